// The one rule for analysis options (statistics.h, validate): attnlens-cli, the GUI's preferences
// and the library all check with these functions, so that a value one accepts no other refuses.
#include <charconv>
#include <cmath>
#include <string>

#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

// The shortest text that reads back as `value` ("2", "0.001", "1e-30").
std::string number(double value) {
    char text[32];
    const auto [end, ec] = std::to_chars(text, text + sizeof text, value);
    return ec == std::errc() ? std::string(text, end) : std::to_string(value);
}

}  // namespace

void validate(const SpectrumOptions& o) {
    if (o.relativeTolerance &&
        !(std::isfinite(*o.relativeTolerance) && *o.relativeTolerance > 0 && *o.relativeTolerance < 1))
        throwUsage("rank tolerance: must be in (0, 1), got " + number(*o.relativeTolerance));
}

void validateLocalK(std::span<const int> ks) {
    if (ks.empty()) throwUsage("local mass window sizes: empty list");
    for (const int k : ks) {
        if (k < kMinLocalK || k > kMaxLocalK)
            throwUsage("local mass window sizes: " + std::to_string(k) + " is out of range [" +
                       std::to_string(kMinLocalK) + ", " + std::to_string(kMaxLocalK) + "]");
        if (k % 2 == 0) throwUsage("local mass window sizes: must be odd, got " + std::to_string(k));
    }
}

void validate(const ConfusionOptions& o) {
    if (!(std::isfinite(o.tau) && o.tau > 0)) throwUsage("confusion threshold tau: must be > 0, got " + number(o.tau));
    if (!(std::isfinite(o.queryRelTolerance) && o.queryRelTolerance >= 0))
        throwUsage("distinct-query tolerance: must be >= 0, got " + number(o.queryRelTolerance));
    if (!(std::isfinite(o.queryRelativeFloor) && o.queryRelativeFloor >= 0 && o.queryRelativeFloor <= 2))
        throwUsage("confusion query floor: must be in [0, 2], got " + number(o.queryRelativeFloor));
}

void validate(const MagnitudeOptions& o) {
    if (o.points < MagnitudeOptions::kMinPoints || o.points > MagnitudeOptions::kMaxPoints)
        throwUsage("magnitude factors: " + std::to_string(o.points) + " is out of range [" +
                   std::to_string(MagnitudeOptions::kMinPoints) + ", " + std::to_string(MagnitudeOptions::kMaxPoints) +
                   "]");
    const double limit = MagnitudeOptions::kLog2Limit;
    if (!(std::isfinite(o.log2Min) && std::isfinite(o.log2Max) && o.log2Max > o.log2Min && o.log2Max <= limit &&
          o.log2Min >= -limit))
        throwUsage("magnitude factors: need -" + number(limit) + " <= LOG2MIN < LOG2MAX <= " + number(limit) +
                   ", got '" + number(o.log2Min) + ":" + number(o.log2Max) + ":" + std::to_string(o.points) + "'");
    if (o.topK < 1) throwUsage("magnitude top-k: must be >= 1, got " + std::to_string(o.topK));
}

void validate(const AnalysisOptions& o) {
    // In the order of attnlens-cli's options, so that the first problem reported is the first given.
    validate(o.spectrum);
    validateLocalK(o.localK);
    validate(o.confusion);
    validate(o.magnitude);
    if (!std::isfinite(o.localBranch.weight))
        throwUsage("local branch weight: must be a finite number, got " + std::to_string(o.localBranch.weight));
}

}  // namespace attnlens
