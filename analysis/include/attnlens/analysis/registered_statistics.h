#pragma once
// Per-head statistics added by one entry: a number per (image, layer, head, paradigm) computed from
// the rows of A. Each is one RegisteredStatistic (its key, its title, its definition and its
// computation); analyze, the JSON report, the summary, the record table and the desktop program's
// Heads view take every registered statistic from here, so that a new one is its function and its
// entry in registered_statistics.cpp, its test, and its definition in docs/DEFINITIONS.md
// "Registered statistics".
//
// A registered statistic is selected by its key like a built-in one (--stats KEY, "all" selects
// them too), needs the dense matrix A (the memory plan counts it), and appears
//   - in each record as "registered": {KEY: value} (null when not finite),
//   - in the summary's per-paradigm and per-layer entries as "registered_means": {KEY: mean},
//   - in the options as "registered_statistics": {KEY: {"title", "definition"}},
//   - in the record table (--records hdf5) as the column "registered_KEY",
//   - in the Heads view's "Colour by" list under its title.
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnlens/attention/admissible_keys.h"
#include "attnlens/attention/attention.h"

namespace attnlens {

struct RegisteredStatistic {
    std::string key;         // [a-z0-9_]+, not a built-in statistic's name
    std::string title;       // as the desktop program names it
    std::string definition;  // the formula, with every tolerance, for the report's options
    // The head's value from its full N x n matrix A (rows whose status is not Ok hold NaN and are
    // to be left out) and the keys each row may attend to (admissible_keys.h: keys.count(i) is
    // |S_i|, the yardstick of any "uniform" or "N": a query's window on window layers;
    // keys.layout() the queries' and keys' grids); NaN when there is nothing to measure.
    std::function<double(const Matrix& a, std::span<const RowStatus> status, const AdmissibleKeys& keys)> compute;
};

// Every registered statistic, in order: those of registered_statistics.cpp, then those added by
// registerStatistic().
const std::vector<RegisteredStatistic>& registeredStatistics();
// Their keys, in that order.
std::vector<std::string> registeredStatisticKeys();
// nullptr when no statistic has this key.
const RegisteredStatistic* findRegisteredStatistic(std::string_view key);
// Adds a statistic (a program's start-up, tests), before any analysis runs: the list is read
// without a lock. Error(Usage) for a key that is not [a-z0-9_]+, is a built-in statistic's name or
// "all", or is registered already, and for a statistic without a computation.
void registerStatistic(RegisteredStatistic statistic);
// Removes a statistic registered with registerStatistic (tests, so that a statistic one test
// registers is not seen by the next one in the same process); nothing when none has this key.
void unregisterStatistic(std::string_view key);

}  // namespace attnlens
