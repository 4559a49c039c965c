// The registered per-head statistics (registered_statistics.h). A new one: a function of A and an
// entry in productStatistics() below; a test against a closed form and a second computation in
// tests/analysis; its definition in docs/DEFINITIONS.md "Registered statistics".
#include "attnlens/analysis/registered_statistics.h"

#include "attnlens/analysis/statistics.h"

#include <algorithm>
#include <array>

#include "attnlens/io/error.h"
#include "attnlens/io/text.h"

namespace attnlens {
namespace {

// The product's registered statistics, one entry each: {key, title, definition, function of A}.
// None yet: the built-in statistics predate the registry and keep their own fields.
std::vector<RegisteredStatistic> productStatistics() { return {}; }

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
