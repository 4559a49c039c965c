#pragma once
// The running mean of finite values that report summaries and sweeps accumulate (one definition for
// both; they once kept a struct each).
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "attnlens/io/text.h"

namespace attnlens::detail {

// Mean of the finite values pushed (NaN, and null in JSON, where there are none).
struct FiniteMean {
    double sum = 0;
    std::int64_t n = 0;
    void add(double x) {
        if (std::isfinite(x)) {
            sum += x;
            ++n;
        }
    }
    double mean() const { return n ? sum / double(n) : std::numeric_limits<double>::quiet_NaN(); }
    nlohmann::json value() const { return n ? nlohmann::json(sum / double(n)) : nlohmann::json(nullptr); }
    void merge(const FiniteMean& o) {
        sum += o.sum;
        n += o.n;
    }
    // [sum, n]: exact for merging (summary_state).
    nlohmann::json state() const { return nlohmann::json::array({sum, n}); }
    static FiniteMean fromState(const nlohmann::json& j) {
        FiniteMean m;
        if (!j.is_array() || j.size() != 2 || !j[0].is_number() || !j[1].is_number_integer() ||
            j[1].get<std::int64_t>() < 0)
            throw std::invalid_argument("a running mean must be [sum, count], got " + printableText(j.dump(), 80));
        m.sum = j[0].get<double>();
        m.n = j[1].get<std::int64_t>();
        return m;
    }
};

}  // namespace attnlens::detail
