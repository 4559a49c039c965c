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

// The one table of the built-in statistics (statistics.h).
constexpr std::array<BuiltInStatistic, 6> kBuiltInStatistics{{
    {"rank", &StatSelection::rank, "spectrum, numerical and effective rank beside the paradigm's bound"},
    {"local", &StatSelection::local, "k x k local mass beside its uniform baselines, and its output share"},
    {"entropy", &StatSelection::entropy, "row entropy, maximum weight and negative mass, on A and |A|"},
    {"confusion", &StatSelection::confusion, "pairs of queries with (nearly) identical rows"},
    {"magnitude", &StatSelection::magnitude, "entropy and sharpness as the queries are scaled"},
    {"distance", &StatSelection::distance, "total variation, Jensen-Shannon and output error to a reference"},
}};

std::span<const BuiltInStatistic> builtInStatistics() { return kBuiltInStatistics; }

std::string statisticNamesText(std::string_view separator) {
    std::string s;
    for (const BuiltInStatistic& b : kBuiltInStatistics)
        s += (s.empty() ? "" : std::string(separator)) + std::string(b.name);
    for (const RegisteredStatistic& r : registeredStatistics()) s += std::string(separator) + r.key;
    return s;
}

StatSelection StatSelection::parse(std::string_view list) {
    StatSelection s;
    for (const BuiltInStatistic& b : kBuiltInStatistics) s.*b.selected = false;
    s.registered.clear();
    bool any = false;
    std::size_t start = 0;
    while (start <= list.size()) {
        const std::size_t comma = std::min(list.find(',', start), list.size());
        const std::string_view name = trim(list.substr(start, comma - start));
        start = comma + 1;
        if (name.empty()) continue;  // tolerate "rank,,local" and a trailing comma
        any = true;
        const auto builtIn = std::find_if(kBuiltInStatistics.begin(), kBuiltInStatistics.end(),
                                          [&](const BuiltInStatistic& b) { return b.name == name; });
        if (name == "all") {
            for (const BuiltInStatistic& b : kBuiltInStatistics) s.*b.selected = true;
            for (const RegisteredStatistic& r : registeredStatistics()) selectRegistered(s, r.key);
        } else if (builtIn != kBuiltInStatistics.end())
            s.*builtIn->selected = true;
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
    for (const BuiltInStatistic& b : kBuiltInStatistics)
        if (this->*b.selected) out.emplace_back(b.name);
    out.insert(out.end(), registered.begin(), registered.end());
    return out;
}

namespace {

// The definitions behind each statistic's numbers, as every report's options carry them.
nlohmann::json rankDefinitions(const SpectrumOptions& spectrum) {
    using nlohmann::json;
    json rank;
    rank["definition"] =
        "singular values of A in double precision; rank = #{sigma > tolerance}, tolerance = "
        "relative_tolerance * sigma_max; effective_rank = exp(H(sigma / sum(sigma))), natural log";
    if (spectrum.relativeTolerance)
        rank["relative_tolerance"] = *spectrum.relativeTolerance;
    else
        rank["relative_tolerance"] = "N * 2^-23 (float32 resolution; N = side of the analysed matrix)";
    rank["float32_resolution"] = 1.0 / 8388608.0;
    rank["bound"] =
        "the rank the paradigm's algebra allows on the analysed matrix (FLatten Sec. 4.2): min(N, n) for softmax; "
        "r, the feature count of phi(q) (d for most kernels), for division-normalised linear attention; r + 1 for the "
        "subtract and magnitude normalisations (InLine, MALA), whose rows carry an offset; on window layers the sum "
        "over the key sets (windows, or windows' regions under a masked rule) of min(|set|, that)";
    rank["spatial_only"] = spectrum.spatialOnly;
    rank["spatial_only_rule"] = "prefix rows and columns removed when true";
    rank["flagged_rows"] = "rows with a non-Ok status are left out of the matrix";
    rank["spatial_reduction"] =
        "keys on a reduced grid (format.md 1c): A is N x n, rank <= min(N, n), N in the default tolerance is "
        "max(N, n); spatial_only drops the queries' prefix rows and the keys' prefix columns";
    rank["methods"] = {{"linear_family",
                        "low-rank QR: A = L R^T, L = [diag(rowScale) phiQ, rowOffset], R = [phiK, 1]; "
                        "singular values of R_L R_R^T from thin QR of L and R, O(N r^2)"},
                       {"softmax", "dense SVD (LAPACK dgesdd, values only)"}};
    return rank;
}

nlohmann::json localDefinitions(const std::vector<int>& localK, bool perQueryMaps) {
    using nlohmann::json;
    json local;
    local["k"] = localK;
    local["definition"] =
        "for a spatial query at (y, x): sum of its weights on spatial keys with |dy|, |dx| <= "
        "(k-1)/2, clipped at the grid border, the query itself included; signed weights as they "
        "are; mean over spatial queries whose row status is ok";
    local["uniform_baseline"] =
        "mean over the same queries of |window| / N, N = all tokens incl. prefix (the layer's keys: the wrong "
        "uniform on window layers, kept for older readers; see admissible_baseline)";
    local["admissible_keys"] =
        "S_i, the keys row i may attend to: every key (N incl. prefix; the n keys under spatial reduction); on "
        "window layers the query's window, under Swin's mask (window_mask true) only the window's keys of the "
        "query's own region; per-head windows (CSwin's stripes) the head's own";
    local["admissible_baseline"] =
        "mean over the same queries of |window_i ∩ S_i| / |S_i|, window_i on the image grid (the key grid under "
        "spatial reduction), clipped at its border, never wrapped: what attention uniform over S_i gives; equal to "
        "uniform_baseline unless the layer has windows";
    local["x_uniform"] = "mean / admissible_baseline (null when the baseline is 0 or undefined)";
    local["paper_baseline"] = "k^2 / N";
    local["spatial_reduction"] =
        "keys on a reduced h x w grid (format.md 1c): the window is centred on the query's key cell "
        "(floor((y + 0.5) h / H), floor((x + 0.5) w / W)) and lies on the key grid, clipped at its border; "
        "N in the baselines is n, the keys";
    local["per_query_maps"] = perQueryMaps;
    local["output_share"] =
        "layers with v: mean over the same queries with O_i != 0 of ||sum_{j in window} A_ij V_j||_2 / ||O_i||_2, "
        "O = A V (the window's share of each output row; InLine Table 2's local tokens)";
    return local;
}

nlohmann::json entropyDefinitions() {
    using nlohmann::json;
    json entropy;
    entropy["definition"] =
        "row entropy in nats of max(A, 0) renormalised per row; normalised = entropy / log N; "
        "mean over rows whose status is ok (rows without positive weight have no entropy and are "
        "left out of the entropy means)";
    entropy["max_weight"] = "mean over ok rows of max_j A_ij";
    entropy["spatial_reduction"] = "rows over the n keys of a reduced grid: normalised = entropy / log n";
    entropy["normalised_entropy_admissible"] =
        "mean of entropy_i / log |S_i| (S_i as in local.admissible_keys) over the rows with an entropy and "
        "|S_i| > 1: 1 for a row uniform over the keys it may attend to; equal to normalised_entropy unless the "
        "layer has windows";
    entropy["admissible_keys_mean"] = "mean |S_i| over the ok rows";
    entropy["entropy_abs"] =
        "mean over ok rows of the entropy in nats of |A_i| / sum_j |A_ij| (signed rows: max(A, 0) renormalised "
        "drops the negative weights and reads sharper than the row is); equal to mean_entropy when no weight is "
        "negative";
    entropy["normalised_entropy_abs_admissible"] = "mean of entropy_abs_i / log |S_i| over rows with |S_i| > 1";
    entropy["max_abs_share"] = "mean over ok rows of max_j |A_ij| / sum_j |A_ij|";
    entropy["negative_weight_fraction"] =
        "sum over ok rows of #{j : A_ij < 0} / sum over ok rows of |S_i| (MALA Sec. 3.3 says this is 0 for its "
        "attention)";
    entropy["negative_rows"] = "fraction of ok rows with any A_ij < 0";
    entropy["negative_mass"] = "sum over ok rows of sum_j min(A_ij, 0); mean = total / ok rows";
    return entropy;
}

nlohmann::json confusionDefinitions(const ConfusionOptions& confusion) {
    using nlohmann::json;
    json conf;
    conf["tau"] = confusion.tau;
    conf["query_relative_tolerance"] = confusion.queryRelTolerance;
    conf["definition"] =
        "unordered pairs (p, q), p < q, of ok rows with ||A_p - A_q||_2 < tau whose queries "
        "differ: "
        "||Q_p - Q_q||_2 > query_relative_tolerance * (1 + max_i ||Q_i||), Q = the dump's queries "
        "before any query transform; pairs with close rows but equal queries are counted as "
        "identical_query_pairs";
    conf["method"] =
        "Gram matrix G = X X^T (X = A, or L R_R^T for the linear family), ||X_p - X_q||^2 = G_pp + "
        "G_qq - 2 G_pq; pairs within 1e-8 (G_pp + G_qq) + 1e-300 of tau^2 re-decided from the row "
        "difference; query distances computed exactly from the rows";
    conf["histogram_bins"] = "0, 1, 2-3, 4-7, ...: bin b >= 1 holds counts in [2^(b-1), 2^b - 1]";
    conf["query_relative_floor"] = confusion.queryRelativeFloor;
    conf["confused_pairs_far"] =
        "of confused_pairs, those whose queries are far apart: ||Q_p - Q_q||_2 >= query_relative_floor * "
        "max(||Q_p||, ||Q_q||) (near-identical queries with near-identical rows are continuity; far queries with "
        "one row are the non-injectivity of InLine's Prop. 2)";
    conf["ray_probe"] = {
        {"factors", std::vector<double>(std::begin(kRayProbeFactors), std::end(kRayProbeFactors))},
        {"equal_tolerance", kRayEqualTolerance},
        {"definition",
         "per ok query, TV(a) = 1/2 sum_j |A_ij(a) - A_ij(1)| with the vector entering the normalisation scaled by a "
         "(softmax: the transformed query; kernel paradigms: phi(q_i)); total_variation_mean per factor; "
         "equal_fraction = queries with TV(a) <= equal_tolerance + 1/2 |sum_j A_ij(a) - sum_j A_ij(1)| at every "
         "factor (rows constant along the ray: InLine's Prop. 2; the second term forgives only a change of the row's "
         "total, which the N eps of a division-normalised denominator makes, and is 0 for rows that sum to 1)"}};
    return conf;
}

nlohmann::json magnitudeDefinitions(const MagnitudeOptions& magnitude) {
    using nlohmann::json;
    json mag;
    mag["log2_min"] = magnitude.log2Min;
    mag["log2_max"] = magnitude.log2Max;
    mag["points"] = magnitude.points;
    mag["top_k"] = magnitude.topK;
    mag["factors"] = magnitude.factors();
    mag["definition"] =
        "row of query i with the vector entering the normalisation multiplied by a (softmax: the "
        "query; kernel paradigms: phi(q)); per factor: max weight, entropy (as above), top-k mass "
        "(sum of the k largest weights) and ratio A_im / A_in, m = argmax of the row at a = 1, "
        "n = key with the lower median weight at a = 1 (a = 1 always evaluated), and spread = "
        "||A_i(a) - mean_j A_ij(a)||_2 / |sum_j A_ij(a)| over the keys the row may attend to (its L2 distance from "
        "the uniform row per unit of its total; null where the row sums to 0): monotone in a for softmax and in "
        "|alpha(a)| / |sum| for the affine rows alpha(a) raw + beta(a) of the linear family, negative weights or not, "
        "where the ratio is not (its median weight can cross 0) and max(A, 0)'s entropy drops the negative weights";
    mag["mean_curve"] =
        "over queries whose rows are ok at every factor and at a = 1: arithmetic means of max "
        "weight, entropy, top-k mass and spread (over the queries where it is finite); ratio = exp(mean log ratio) "
        "over ratios that are finite and > 0, the others counted as skipped_ratios";
    return mag;
}

nlohmann::json distanceDefinitions(const DistanceOptions& distance) {
    using nlohmann::json;
    json dist;
    dist["reference"] = distance.reference.toJson();
    dist["queries"] = "queries whose rows are ok under both the paradigm and the reference";
    dist["total_variation"] =
        "TV_i = 1/2 sum_j |A_ij - R_ij| (R: the reference's matrix on the same q, k); signed rows as they are "
        "(signed_queries counts queries where either row has a negative weight)";
    dist["jensen_shannon"] =
        "JS_i = 1/2 KL(a || m) + 1/2 KL(r || m), m = (a + r) / 2, natural log (nats, at most log 2), a and r "
        "the rows divided by their sums; only queries whose two rows are non-negative with a positive sum";
    dist["output_relative_error"] = "||O - O_ref||_F / ||O_ref||_F over the ok queries, O = A V (layers with v only)";
    dist["output_relative_error_with_branch"] =
        "||O - O_ref||_F / ||O_ref + B||_F, B = the layer's local branch on V (depthwise convolution plus "
        "bias, resources/format.md 1a), the same for both (layers with a local branch and v only)";
    dist["output_cosine"] = "cos(O_i, O_ref_i) per query whose two output rows are non-zero";
    dist["quantiles"] = kDistanceQuantiles;
    dist["quantile_rule"] = "numpy.quantile's linear rule over the queries' values";
    return dist;
}

}  // namespace

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

    j["rank"] = rankDefinitions(spectrum);
    j["local"] = localDefinitions(localK, perQueryMaps);
    j["entropy"] = entropyDefinitions();
    j["confusion"] = confusionDefinitions(confusion);
    j["magnitude"] = magnitudeDefinitions(magnitude);
    j["local_branch"] = localBranch.toJson();
    j["distance"] = distanceDefinitions(distance);
    return j;
}

DenseNeeds denseNeeds(const StatSelection& stats, bool lowRank, Index tokens, bool withBranch) {
    DenseNeeds needs;
    needs.branch = withBranch && (stats.rank || stats.local);
    // Kernel paradigms get rank and confusion from the low-rank factors, without A.
    needs.matrix = stats.local || stats.entropy || stats.distance || needs.branch || !stats.registered.empty() ||
                   (!lowRank && (stats.confusion || stats.rank));
    needs.sharedRawRows = needs.matrix && stats.magnitude && tokens <= kSharedRawRowsMaxTokens;
    needs.denseSvd = (!lowRank && stats.rank) || (needs.branch && stats.rank);
    needs.reference = stats.distance;
    if (!lowRank && stats.rank)
        needs.copies = 2;
    else if (!lowRank && stats.confusion)
        needs.copies = 1;
    if (needs.branch) needs.copies += 3;
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
    poll();
    if (sel.rank)
        stats.spectrum = lowRank ? detail::lowRankSpectrum(head, geometry, options.spectrum, *factors)
                                 : spectrum(head, geometry, options.spectrum, full);
    const Matrix output = sharedOutput(a, sel, reference, values);
    const Matrix* shared = output.size() > 0 ? &output : nullptr;
    poll();
    if (sel.local) {
        stats.local = localMass(a, status, geometry, options.localK, values, shared, &admissible);
        if (!options.perQueryMaps)
            for (auto& l : stats.local) l.perQuery.clear();
    }
    poll();
    if (needs.branch)
        stats.localBranch =
            analyzeLocalBranch(a, status,
                               // Spatial reduction: the branch's values are interpolated from the keys (format.md 1c).
                               geometry.reducedKeys() ? LocalBranchGrid::interpolated(geometry.queries, geometry.keys)
                                                      : LocalBranchGrid(geometry.queries, branch->windows),
                               *branch, options.localBranch, options.spectrum, options.localK, sel.rank, sel.local);
    poll();
    if (sel.entropy) stats.entropy = entropyStatistics(a, status, &admissible);
    stats.registered = registeredValues(sel, m, admissible);
    poll();
    if (sel.distance && reference) stats.distance = distanceToReference(a, status, *reference, shared);
    poll();
    if (sel.confusion)
        stats.confusion = lowRank ? detail::lowRankConfusion(head, q, options.confusion, status, *factors)
                                  : confusion(head, q, options.confusion, full, status);
    poll();
    if (sel.confusion) stats.rayProbe = rayProbe(head);
    poll();
    if (sel.magnitude)
        stats.magnitude = needs.sharedRawRows
                              ? detail::meanMagnitudeCurve(head, options.magnitude, {&m.raw, m.dotSums.data()})
                              : meanMagnitudeCurve(head, options.magnitude);
    poll();
    return stats;
}

}  // namespace attnlens
