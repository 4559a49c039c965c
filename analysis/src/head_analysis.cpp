// All selected statistics of one (image, layer, head, paradigm), the selection of statistics and
// the JSON record of every definition and parameter that produced the numbers.
#include <algorithm>
#include <array>
#include <iterator>
#include <optional>
#include <string>

#include "attnlens/analysis/registered_statistics.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "shared_work.h"
#include "statistic_parts.h"

namespace attnlens {
namespace {

void selectRegistered(StatSelection& s, const std::string& key) {
    // Registration order, whatever order the list names them in.
    if (std::find(s.registered.begin(), s.registered.end(), key) != s.registered.end()) return;
    s.registered.push_back(key);
    std::vector<std::string> ordered;
    for (const RegisteredStatistic& r : registeredStatistics())
        if (std::find(s.registered.begin(), s.registered.end(), r.key) != s.registered.end()) ordered.push_back(r.key);
    s.registered = std::move(ordered);
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

}  // namespace

std::string statisticNamesText(std::string_view separator) {
    std::string s;
    for (const BuiltInStatistic& b : builtInStatistics())
        s += (s.empty() ? "" : std::string(separator)) + std::string(b.name);
    for (const RegisteredStatistic& r : registeredStatistics()) s += std::string(separator) + r.key;
    return s;
}

StatSelection StatSelection::parse(std::string_view list) {
    const std::span<const BuiltInStatistic> builtIn = builtInStatistics();
    StatSelection s;
    for (const BuiltInStatistic& b : builtIn) s.*b.selected = false;
    s.registered.clear();
    bool any = false;
    std::size_t start = 0;
    while (start <= list.size()) {
        const std::size_t comma = std::min(list.find(',', start), list.size());
        const std::string_view name = trim(list.substr(start, comma - start));
        start = comma + 1;
        if (name.empty()) continue;  // tolerate "rank,,local" and a trailing comma
        any = true;
        const auto named =
            std::find_if(builtIn.begin(), builtIn.end(), [&](const BuiltInStatistic& b) { return b.name == name; });
        if (name == "all") {
            for (const BuiltInStatistic& b : builtIn) s.*b.selected = true;
            for (const RegisteredStatistic& r : registeredStatistics()) selectRegistered(s, r.key);
        } else if (named != builtIn.end())
            s.*named->selected = true;
        else if (findRegisteredStatistic(name))
            selectRegistered(s, std::string(name));
        else
            throwUsage("unknown statistic '" + printableText(name) + "' (known: " + statisticNamesText() + ")");
    }
    if (!any) throwUsage("no statistic selected (known: " + statisticNamesText() + ", or all)");
    return s;
}

std::vector<std::string> StatSelection::names() const {
    std::vector<std::string> out;
    for (const BuiltInStatistic& b : builtInStatistics())
        if (this->*b.selected) out.emplace_back(b.name);
    out.insert(out.end(), registered.begin(), registered.end());
    return out;
}

nlohmann::json AnalysisOptions::toJson() const {
    using nlohmann::json;
    json j;
    j["statistics"] = stats.names();
    if (!stats.registered.empty()) {
        json registered = json::object();
        for (const std::string& key : stats.registered)
            if (const RegisteredStatistic* r = findRegisteredStatistic(key))
                registered[key] = {{"title", r->title}, {"definition", r->definition}};
        j["registered_statistics"] = registered;
    }
    for (const StatisticParts* parts : statisticTable())
        j[std::string(parts->statistic.name)] = parts->definitions(*this);
    return j;
}

DenseNeeds denseNeeds(const StatSelection& stats, bool lowRank, Index tokens, bool withBranch) {
    DenseNeeds needs;
    for (const StatisticParts* parts : statisticTable())
        if (!parts->statistic.selected || stats.*parts->statistic.selected)
            parts->needs(stats, lowRank, withBranch, needs);
    needs.matrix = needs.matrix || !stats.registered.empty();  // registered statistics are functions of A
    needs.sharedRawRows = needs.matrix && stats.magnitude && tokens <= kSharedRawRowsMaxTokens;
    return needs;
}

namespace {

void checkHeadLayout(const AttentionHead& head, const AttentionLayout& geometry) {
    const Index n = head.tokens(), keys = head.keys();
    const TokenLayout& layout = geometry.queries;
    if (layout.tokens() != n || geometry.keys.tokens() != keys)
        throwInput("analysis: the token layout (prefix " + std::to_string(layout.prefix) + " + grid " +
                   std::to_string(layout.gridH) + " x " + std::to_string(layout.gridW) + " = " +
                   std::to_string(layout.tokens()) + " tokens, " + std::to_string(geometry.keys.tokens()) +
                   " keys) does not match the head's " + std::to_string(n) + " tokens and " + std::to_string(keys) +
                   " keys");
}

// A with its row statuses, as the selection needs it: with its raw rows (one GEMM for both the
// matrix and the magnitude curves, which start from raw rows), alone, or only the statuses.
struct HeadMatrix {
    Matrix a, raw;
    std::vector<double> dotSums;
    std::vector<RowStatus> status;
};

HeadMatrix headMatrix(const AttentionHead& head, const DenseNeeds& needs) {
    const Index n = head.tokens(), keys = head.keys();
    HeadMatrix m;
    if (needs.sharedRawRows) {
        m.raw.resize(n, keys);
        m.dotSums.resize(std::size_t(n));
        head.rawRows(0, n, m.raw, m.dotSums.data());
        m.a = m.raw;
        m.status.resize(std::size_t(n));
        for (Index i = 0; i < n; ++i)
            m.status[std::size_t(i)] = head.normaliseRawRow(m.a.row(i), m.dotSums[std::size_t(i)]);
    } else if (needs.matrix) {
        m.a = head.matrix(&m.status);
    } else {
        // Row statuses without the N x N matrix: blocks of rows, O(block * N) memory.
        constexpr Index kBlock = 256;
        m.status.assign(std::size_t(n), RowStatus::Ok);
        Matrix block;
        for (Index begin = 0; begin < n; begin += kBlock) {
            const Index count = std::min(kBlock, n - begin);
            block.resize(count, keys);
            head.rows(begin, count, block, m.status.data() + begin);
        }
    }
    return m;
}

// The low-rank spectrum and confusion count share one factorisation and one QR.
std::optional<linalg::LowRankFactors> sharedFactors(const AttentionHead& head, const AnalysisOptions& options) {
    const StatSelection& sel = options.stats;
    std::optional<linalg::LowRankFactors> factors;
    if (head.hasLowRankForm() && (sel.rank || sel.confusion)) {
        factors.emplace();
        factors->f = linalg::factorise(head);
        // Non-finite keys flag every row: both statistics then stop before they need the QR.
        if ((sel.confusion || !options.spectrum.spatialOnly) && factors->f.r.allFinite())
            factors->rightR = linalg::thinQrR(factors->f.r);
    }
    return factors;
}

// O = A V once for the local mass's output share and the distance's output error, when both
// want it of the same V; empty otherwise.
Matrix sharedOutput(const Matrix& a, const StatSelection& sel, const DistanceReference* reference,
                    const Matrix* values) {
    const bool distanceOutput = sel.distance && reference && reference->values && reference->output.size() > 0;
    Matrix output;
    if (values && sel.local && distanceOutput && reference->values == values) {
        output.resize(a.rows(), values->cols());
        linalg::gemm(false, false, 1.0, a, *values, 0.0, output);
    }
    return output;
}

std::vector<std::pair<std::string, double>> registeredValues(const StatSelection& sel, const HeadMatrix& m,
                                                             const AdmissibleKeys& admissible) {
    std::vector<std::pair<std::string, double>> values;
    for (const std::string& key : sel.registered) {
        const RegisteredStatistic* r = findRegisteredStatistic(key);
        if (!r) throwUsage("unknown statistic '" + printableText(key) + "' (known: " + statisticNamesText() + ")");
        values.emplace_back(key, r->compute(m.a, m.status, admissible));
    }
    return values;
}

}  // namespace

HeadStatistics analyzeHead(const AttentionHead& head, const Matrix& q, const AttentionLayout& geometry,
                           const AnalysisOptions& options, const LocalBranchHead* branch,
                           const DistanceReference* reference, const Matrix* values, CancelToken cancel) {
    validate(options);
    const auto poll = [&] { cancel.throwIfRequested("the head's statistics"); };
    checkHeadLayout(head, geometry);
    const StatSelection& sel = options.stats;
    HeadStatistics stats;
    stats.tokens = head.tokens();
    stats.keys = head.keys();

    const bool lowRank = head.hasLowRankForm();
    DenseNeeds needs = denseNeeds(sel, lowRank, head.tokens(), branch != nullptr);
    if (head.windows()) needs.sharedRawRows = false;  // window rows normalise over their own keys
    const HeadMatrix m = headMatrix(head, needs);
    const Matrix& a = m.a;
    const std::vector<RowStatus>& status = m.status;
    stats.flaggedRows =
        Index(std::count_if(status.begin(), status.end(), [](RowStatus s) { return s != RowStatus::Ok; }));
    poll();
    const Matrix* full = needs.matrix ? &a : nullptr;
    // The keys each row may attend to: the yardstick of the local baseline and normalised entropy.
    const AdmissibleKeys admissible(geometry, head.windows());
    const std::optional<linalg::LowRankFactors> factors = sharedFactors(head, options);
    const Matrix output = sharedOutput(a, sel, reference, values);
    poll();
    const HeadWork work{head,
                        q,
                        geometry,
                        options,
                        branch,
                        reference,
                        values,
                        needs,
                        lowRank,
                        a,
                        full,
                        status,
                        admissible,
                        factors,
                        output.size() > 0 ? &output : nullptr,
                        needs.sharedRawRows ? detail::RawRows{&m.raw, m.dotSums.data()} : detail::RawRows{}};
    // Each statistic from the shared work (statistic_<name>.cpp); the local branch where the layer
    // has one and rank or local is selected.
    for (const StatisticParts* parts : statisticTable()) {
        const bool on = parts->statistic.selected ? sel.*parts->statistic.selected : needs.branch;
        if (!on) continue;
        parts->compute(work, stats);
        poll();
    }
    stats.registered = registeredValues(sel, m, admissible);
    poll();
    return stats;
}

}  // namespace attnlens
