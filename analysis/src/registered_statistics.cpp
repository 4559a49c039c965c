// The registered per-head statistics (registered_statistics.h). A new one: a function of A and an
// entry in productStatistics() below; a test against a closed form and a second computation in
// tests/analysis; its definition in docs/DEFINITIONS.md "Registered statistics".
#include "attnlens/analysis/registered_statistics.h"

#include "attnlens/analysis/statistics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "attnlens/io/error.h"
#include "attnlens/io/text.h"

namespace attnlens {
namespace {

// A key counts as at or above its row's uniform share within this relative slack: a row uniform over
// S_i keeps every key although its weights' sum rounds (1/197 summed 197 times is not 1 exactly).
constexpr double kAboveUniformSlack = 1e-9;

// The share of its admissible keys a row gives at least their uniform share of its |weights|
// (FLatten's focus: a focused row gives it to few keys), on |A| so that a signed row (InLine, MALA)
// is not made to look focused by its negative weights; on a row without negative weights it is A's.
// Keys outside S_i hold no weight and are never counted.
double aboveUniformShare(const Matrix& a, std::span<const RowStatus> status, const AdmissibleKeys& keys) {
    double sum = 0;
    Index rows = 0;
    for (Index i = 0; i < a.rows(); ++i) {
        if (!status.empty() && status[std::size_t(i)] != RowStatus::Ok) continue;
        const double mass = a.row(i).cwiseAbs().sum();
        if (!(mass > 0) || !std::isfinite(mass)) continue;
        const double admissible = double(keys.count(i));
        const double threshold = (1 - kAboveUniformSlack) * mass / admissible;
        sum += double((a.row(i).array().abs() >= threshold).count()) / admissible;
        ++rows;
    }
    return rows > 0 ? sum / double(rows) : std::numeric_limits<double>::quiet_NaN();
}

// The product's registered statistics, one entry each: {key, title, definition, function of A}.
std::vector<RegisteredStatistic> productStatistics() {
    return {{"above_uniform", "keys at or above uniform (|A|)",
             "mean over the Ok rows i with sum_j |A_ij| > 0 of #{j in S_i : |A_ij| >= (1 - 1e-9) * sum_j |A_ij| / "
             "|S_i|} / |S_i|, S_i the keys row i may attend to (its window on window layers): 1 for a row uniform "
             "over S_i, 1/|S_i| for a one-hot row, lower = more focused; on |A|, so that negative weights do not "
             "count as focus (a row without negative weights: A's own); NaN when no row counts",
             aboveUniformShare}};
}

void checkAndAdd(std::vector<RegisteredStatistic>& list, RegisteredStatistic statistic);

std::vector<RegisteredStatistic>& statistics() {
    static std::vector<RegisteredStatistic> list = [] {
        std::vector<RegisteredStatistic> checked;
        for (RegisteredStatistic& s : productStatistics()) checkAndAdd(checked, std::move(s));
        return checked;
    }();
    return list;
}

void checkAndAdd(std::vector<RegisteredStatistic>& list, RegisteredStatistic statistic) {
    const std::string& key = statistic.key;
    const bool wellFormed = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    });
    if (!wellFormed) throwUsage("registered statistic " + quotedText(key) + ": a key is made of a-z, 0-9 and _");
    // The built-in statistics' names and "all" are the selection's own.
    const auto builtIn = builtInStatistics();
    if (key == "all" ||
        std::any_of(builtIn.begin(), builtIn.end(), [&](const BuiltInStatistic& b) { return b.name == key; }))
        throwUsage("registered statistic '" + key + "': the name of a built-in statistic");
    for (const RegisteredStatistic& s : list)
        if (s.key == key) throwUsage("registered statistic '" + key + "': registered already");
    if (!statistic.compute) throwUsage("registered statistic '" + key + "': no computation");
    list.push_back(std::move(statistic));
}

}  // namespace

const std::vector<RegisteredStatistic>& registeredStatistics() { return statistics(); }

std::vector<std::string> registeredStatisticKeys() {
    std::vector<std::string> keys;
    for (const RegisteredStatistic& s : statistics()) keys.push_back(s.key);
    return keys;
}

const RegisteredStatistic* findRegisteredStatistic(std::string_view key) {
    for (const RegisteredStatistic& s : statistics())
        if (s.key == key) return &s;
    return nullptr;
}

void registerStatistic(RegisteredStatistic statistic) { checkAndAdd(statistics(), std::move(statistic)); }

void unregisterStatistic(std::string_view key) {
    std::vector<RegisteredStatistic>& list = statistics();
    list.erase(std::remove_if(list.begin(), list.end(), [key](const RegisteredStatistic& s) { return s.key == key; }),
               list.end());
}

}  // namespace attnlens
