#pragma once
// What the report files (report_json, summary_aggregate, report_summary, merge_checks, report_merge,
// report_text) share and nobody else needs.
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/statistics.h"
#include "finite_mean.h"

namespace attnlens::report_detail {

using detail::FiniteMean;
using nlohmann::json;

// The time as reports write it (created_utc).
inline std::string utcNow() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// Mean branch share over the analysed channels with a finite share (NaN for none).
inline double meanBranchShare(const LocalBranchResult& b) {
    double sum = 0;
    std::size_t count = 0;
    for (const auto& c : b.channels)
        if (std::isfinite(c.branchShare)) {
            sum += c.branchShare;
            ++count;
        }
    return count ? sum / double(count) : std::numeric_limits<double>::quiet_NaN();
}

// The exact running sums of a summary state (summary_state) and their merge.
inline json meansState(const std::map<int, FiniteMean>& means) {
    json j = json::object();
    for (const auto& [k, m] : means) j[std::to_string(k)] = m.state();
    return j;
}

inline std::map<int, FiniteMean> meansFromState(const json& j) {
    std::map<int, FiniteMean> out;
    for (const auto& [k, v] : j.items()) out[std::stoi(k)] = FiniteMean::fromState(v);
    return out;
}

inline void mergeMeans(std::map<int, FiniteMean>& into, const std::map<int, FiniteMean>& from) {
    for (const auto& [k, m] : from) into[k].merge(m);
}

inline json curveState(const std::vector<FiniteMean>& curve) {
    json j = json::array();
    for (const FiniteMean& m : curve) j.push_back(m.state());
    return j;
}

inline std::vector<FiniteMean> curveFromState(const json& j) {
    std::vector<FiniteMean> out;
    for (const json& v : j) out.push_back(FiniteMean::fromState(v));
    return out;
}

inline void mergeCurve(std::vector<FiniteMean>& into, const std::vector<FiniteMean>& from) {
    if (into.empty()) into.resize(from.size());
    if (from.size() != into.size()) throw std::invalid_argument("magnitude curves of different lengths");
    for (std::size_t i = 0; i < from.size(); ++i) into[i].merge(from[i]);
}

}  // namespace attnlens::report_detail
