#pragma once
// Per-head analyses of one attention paradigm (see docs/DEFINITIONS.md "Definitions" for every formula, tolerance
// and bin). All functions are pure: inputs in, result structs out, no I/O.
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "attnlens/analysis/execution.h"
#include "attnlens/analysis/registered_statistics.h"
#include "attnlens/attention/admissible_keys.h"
#include "attnlens/attention/attention.h"
#include "attnlens/attention/local_branch.h"
#include "attnlens/attention/token_layout.h"

namespace attnlens {

// ---- Spectrum and rank (FLatten Sec. 4.2, Fig. 5) -------------------------------------------------
struct SpectrumOptions {
    // Rank tolerance relative to sigma_max; unset = N * 2^-23 (float32 resolution of the activations).
    std::optional<double> relativeTolerance;
    bool spatialOnly = false;  // drop prefix rows and columns (the paper's 196 x 196)
};
struct SpectrumResult {
    std::vector<double> singularValues;  // descending
    Index size = 0;                      // side of the (sub)matrix analysed (the larger side of N x n)
    double relativeTolerance = 0;
    double tolerance = 0;      // absolute: relativeTolerance * sigma_max
    int rank = 0;              // #{sigma > tolerance}
    double effectiveRank = 0;  // exp(H(sigma / sum sigma))
    std::string method;        // "low-rank QR" or "dense SVD (LAPACK dgesdd)"
    // Window attention: each window's numerical rank (its block A[window, window], tolerance
    // relativeTolerance(Mh Mw) times the block's sigma_max), in window order; empty otherwise.
    std::vector<int> windowRanks;
    // The rank the paradigm's algebra allows (FLatten Sec. 4.2: rank(linear) <= d; InLine and MALA
    // add a row offset: <= d + 1; softmax: <= min(N, n)), on the analysed (sub)matrix, per window
    // block summed on window layers; 0 where unknown (a spectrum read back from an older report).
    int bound = 0;
    std::string boundRule;  // how bound was reached, e.g. "r + 1 = 33 (phi(q) has r = 32 features, row offset)"
};
// The bound above for a head and the spectrum's options (spatial_only drops prefix rows and columns).
std::pair<int, std::string> rankBound(const AttentionHead& head, const AttentionLayout& layout,
                                      const SpectrumOptions& options);
// Linear family: from the factorised form in O(N r^2). Softmax: dense SVD of the matrix.
// layout: the layer's queries and keys (a TokenLayout converts to one where the keys are the queries').
SpectrumResult spectrum(const AttentionHead& head, const AttentionLayout& layout, const SpectrumOptions& options,
                        const Matrix* fullMatrix = nullptr);
// Reference path: dense SVD of any matrix (used by tests to check the factorised path).
SpectrumResult denseSpectrum(const Matrix& a, const SpectrumOptions& options);
// A matrix that is zero outside the windows' blocks (window attention, a branch convolving inside
// windows): the union of the blocks' spectra (a dense SVD per window) and windowRanks; rows holding
// non-finite values are left out. Equals denseSpectrum(a) up to rounding.
SpectrumResult blockDiagonalSpectrum(const Matrix& a, const WindowPartition& windows, const SpectrumOptions& options);

// ---- Local k x k mass (InLine Sec. 4.2, Fig. 3) ---------------------------------------------------
struct LocalMassResult {
    int k = 3;
    double mean = 0;             // mean over spatial queries with finite rows
    double uniformBaseline = 0;  // mean_i |window_i| / n (border-clipped windows; n keys, N without reduction)
    double paperBaseline = 0;    // k^2 / n
    // The yardstick (admissible_keys.h): mean over the same queries of |N_k(i) ∩ S_i| / |S_i|, what
    // a row uniform over the keys it may attend to puts in the window. Equals uniformBaseline on
    // plain and spatial-reduction layers; on window layers uniformBaseline is the wrong uniform.
    double admissibleBaseline = 0;
    std::vector<double> perQuery;  // gridH*gridW, row-major; NaN for flagged rows
    Index queries = 0;             // spatial queries averaged
    // With V (InLine Table 2's local tokens asked of the output): the window's share of each output
    // row, mean over the same queries (those with O_i != 0) of ||sum_{j in window} A_ij V_j|| /
    // ||O_i||, O = A V. NaN without V.
    std::optional<double> outputShare;
    Index outputQueries = 0;
};
// Window sizes k: odd (the window is centred on the query), in [kMinLocalK, kMaxLocalK].
inline constexpr int kMinLocalK = 1, kMaxLocalK = 99;
// a: the full N x n matrix; status: per-row status (may be empty = all Ok). Under spatial reduction
// the window is centred on the query's key cell (AttentionLayout::keyRow/keyCol) on the key grid.
// values: V (n x d_v) for LocalMassResult::outputShare; nullptr: none. output: O = a V when the
// caller has it already (the distance statistic needs it too); nullptr: computed here.
// admissible: the rows' key sets (nullptr: every key, the plain and spatial-reduction rule); its
// layout must be `layout`.
std::vector<LocalMassResult> localMass(const Matrix& a, std::span<const RowStatus> status,
                                       const AttentionLayout& layout, std::span<const int> ks,
                                       const Matrix* values = nullptr, const Matrix* output = nullptr,
                                       const AdmissibleKeys* admissible = nullptr);
// The uniform baseline of a layer's geometry alone: mean over every spatial query of
// |window_i| / n, which is localMass's uniformBaseline when no row is flagged. For a layer whose
// data could not be read, the baseline is still defined.
double uniformLocalBaseline(const AttentionLayout& layout, int k);
// The same over the rows' admissible keys: mean over every spatial query of |N_k(i) ∩ S_i| / |S_i|
// (localMass's admissibleBaseline when no row is flagged).
double admissibleLocalBaseline(const AdmissibleKeys& admissible, int k);
// "x uniform": a local mass over its admissible baseline (how many times what uniform attention over
// the admissible keys puts there); NaN when the baseline is not positive and finite.
inline double timesUniform(double mass, double admissibleBaseline) {
    return admissibleBaseline > 0 && admissibleBaseline < std::numeric_limits<double>::infinity()
               ? mass / admissibleBaseline
               : std::numeric_limits<double>::quiet_NaN();
}

// ---- Entropy, maximum weight and negative mass of rows -------------------------------------------
struct EntropyResult {
    double meanEntropy = 0;            // nats, on max(A,0) renormalised per row
    double meanNormalisedEntropy = 0;  // divided by log N (the layer's keys)
    // Mean of H_i / log |S_i| over the rows with an entropy and |S_i| > 1 (admissible_keys.h): 1 for a
    // row uniform over the keys it may attend to, also on window layers (where log N is the wrong
    // yardstick). Equals meanNormalisedEntropy on plain and spatial-reduction layers.
    double meanAdmissibleNormalisedEntropy = 0;
    Index admissibleNormalisedRows = 0;  // the rows behind it
    double meanAdmissibleKeys = 0;       // mean |S_i| over the Ok rows
    // Signed rows honestly (MALA Sec. 3.3 says negative scores do not occur; InLine's rows carry
    // them): the same on |A| renormalised per row, which for a row without negative weights is
    // the same number as above, and how many weights are negative.
    double meanEntropyAbs = 0;                      // nats, H(|a_i| / sum_j |a_ij|)
    double meanAdmissibleNormalisedEntropyAbs = 0;  // H_abs,i / log |S_i| over rows with |S_i| > 1
    double meanMaxAbsShare = 0;                     // mean over rows of max_j |a_ij| / sum_j |a_ij|
    double negativeWeightFraction = 0;              // sum_i #{j : a_ij < 0} / sum_i |S_i|
    double meanMaxWeight = 0;
    double negativeRowFraction = 0;  // rows with any A_ij < 0
    double totalNegativeMass = 0;    // sum over rows of sum_j min(A_ij, 0)   (<= 0)
    double meanNegativeMass = 0;     // totalNegativeMass / rows
    Index rows = 0;                  // finite rows used
    Index flaggedRows = 0;           // rows with status != Ok
};
EntropyResult entropyStatistics(const Matrix& a, std::span<const RowStatus> status,
                                const AdmissibleKeys* admissible = nullptr);
// Entropy (nats) of max(row,0) renormalised; NaN when the positive mass is zero.
double rowEntropy(std::span<const double> row);

// ---- Injectivity confusion (InLine Sec. 4.1, Fig. 2) ----------------------------------------------
struct ConfusionOptions {
    double tau = 1e-3;                // ||A_p - A_q||_2 < tau
    double queryRelTolerance = 1e-6;  // queries differ when ||Q_p - Q_q|| > 1e-6 (1 + max_i ||Q_i||)
    // Issue 46 item 5: confused pairs whose queries are also far apart, ||Q_p - Q_q|| >= floor *
    // max(||Q_p||, ||Q_q||), are counted apart (confusedPairsFar): two near-identical background tokens
    // with near-identical flat rows are continuity, not the non-injectivity of InLine's Prop. 2.
    double queryRelativeFloor = 0.1;
};
// The ray probe of injectivity (InLine Fig. 1a, Prop. 2): each query's row against its row with the
// vector that enters the normalisation scaled by a (as the magnitude curves scale it).
inline constexpr double kRayProbeFactors[] = {0.5, 2.0};
// Rows count as equal along the ray below this total variation plus half the change of the row's
// total: division-normalised attention is exactly invariant but for the N eps in its denominator,
// which scales the whole row (ray_probe.cpp).
inline constexpr double kRayEqualTolerance = 1e-4;
struct RayProbe {
    std::vector<double> factors;             // kRayProbeFactors
    std::vector<double> totalVariationMean;  // per factor: mean over ok queries of TV(A_i(a), A_i(1))
    double equalFraction = 0;  // ok queries whose rows are equal (TV <= tolerance + row total moved) at every factor
    Index queries = 0;
};
RayProbe rayProbe(const AttentionHead& head);
struct ConfusionResult {
    std::int64_t confusedPairs = 0;        // unordered pairs with distinct queries and rows closer than tau
    std::int64_t identicalQueryPairs = 0;  // pairs skipped because the queries are the same
    std::int64_t confusedPairsFar = 0;     // of confusedPairs, those with queries far apart (queryRelativeFloor)
    double queryRelativeFloor = 0;
    double tau = 0;
    double queryTolerance = 0;  // the absolute query-distance threshold used
    std::string method;         // "low-rank Gram" or "dense Gram (GEMM)"
};
// q: the head's queries as stored in the dump (before any query transform).
ConfusionResult confusion(const AttentionHead& head, const Matrix& q, const ConfusionOptions& options,
                          const Matrix* fullMatrix = nullptr, std::span<const RowStatus> status = {});
// Reference path for tests: O(N^2 N) explicit pair loop over a full matrix.
ConfusionResult confusionBruteForce(const Matrix& a, const Matrix& q, const ConfusionOptions& options,
                                    std::span<const RowStatus> status = {});
// The confused pairs themselves (the pairs `confusion` counts), for looking at them: at most
// maxPairs, those with the smallest row distance first (ties: by token p, then q).
struct ConfusedPair {
    Index p = 0, q = 0;        // token indices, p < q
    double rowDistance = 0;    // ||A_p - A_q||_2 (< tau)
    double queryDistance = 0;  // ||Q_p - Q_q||_2 of the dump's queries (> the query tolerance)
};
struct ConfusedPairList {
    ConfusionResult counts;           // as confusion() returns for the same head and options
    std::vector<ConfusedPair> pairs;  // sorted by rowDistance
};
ConfusedPairList confusedPairs(const AttentionHead& head, const Matrix& q, const ConfusionOptions& options,
                               std::size_t maxPairs);

// InLine's injectivity conditions (Appendix A) for one head: Proposition 1 (softmax is injective
// when rank(K) = d and rank([K, 1]) = d + 1) and Proposition 3 (InLine's subtractive normalisation
// is injective when rank(phi(K)) = d and rank([phi(K), 1]) = d + 1, phi injective); Proposition 2:
// division-normalised linear attention is never injective (scaling phi(q) changes nothing).
// Ranks by SVD with numpy's matrix_rank rule: sigma > max(rows, cols) * 2^-52 * sigma_max, over
// the keys whose features are finite.
struct InjectivityConditions {
    Index features = 0;          // d: columns of K (softmax) or of phi(K)
    Index keys = 0;              // rows used
    int rankFeatures = 0;        // rank(phi(K)), rank(K) for softmax
    int rankWithOnes = 0;        // rank([phi(K), 1])
    bool conditionsMet = false;  // rankFeatures == d and rankWithOnes == d + 1
    std::string proposition;     // which proposition applies, and what it says for this head
    // Window attention: each query's sequence is its key set (its window; its window and region for
    // kernel paradigms under a masked rule), so the conditions hold per key set. keys, rankFeatures
    // and rankWithOnes are then the smallest over the key sets, conditionsMet says every set meets
    // them, and these list each set's ranks (in window, or group, order).
    std::vector<int> keySetRankFeatures, keySetRankWithOnes;
    int keySetsMet = 0;
};
InjectivityConditions injectivityConditions(const AttentionHead& head, const Matrix& k);

// Histogram bins 0, 1, 2-3, 4-7, ...: bin 0 holds count 0, bin b>=1 holds [2^(b-1), 2^b - 1].
int confusionBin(std::int64_t count);
std::string confusionBinLabel(int bin);

// ---- Magnitude scaling (MALA Sec. 3.2, Fig. 2, Eq. 5-12) ------------------------------------------
struct MagnitudeOptions {
    double log2Min = -2;  // factors a = 2^t, t on a uniform grid
    double log2Max = 4;
    int points = 13;
    int topK = 9;  // top-k mass
    // The grid's limits (validate): at least two points, factors between 2^-60 and 2^60.
    static constexpr int kMinPoints = 2, kMaxPoints = 1000;
    static constexpr double kLog2Limit = 60;
    // Threads of the mean curve of a big head (execution.h; 0 threads: the processors); analyzeDump
    // sets it from its memory plan (each costs a QueryScaler, a thread stack, a malloc arena and a
    // BLAS buffer). Not part of the definition: the curve does not depend on it.
    ThreadBudget threads;
    std::vector<double> factors() const;
};
struct MagnitudeCurve {
    std::vector<double> factors;
    std::vector<double> maxWeight, entropy, topMass, ratio;  // one per factor
    // ||A_i(a) - mean_j A_ij(a)||_2 / |sum_j A_ij(a)| over the keys the row may attend to: its L2
    // distance from the uniform row per unit of its total. Unlike the ratio and the entropy of
    // max(A, 0), negative weights cannot turn it back: it grows with |alpha| for every affine row
    // alpha(a) raw + beta(a) of the linear family and with a for softmax (sum_j A_ij^2 does).
    std::vector<double> spread;
    Index query = -1;      // -1 for the mean curve over queries
    Index topKey = -1;     // m: argmax of the row at a = 1
    Index medianKey = -1;  // n: the key with the median weight at a = 1 (lower median)
    Index queriesAveraged = 0;
    // Mean curve: (query, factor) ratios left out of the log-mean because they were <= 0 or not
    // finite (signed rows, or a zero median weight); 0 for a single query's curve.
    Index skippedRatios = 0;
};
MagnitudeCurve magnitudeCurve(const AttentionHead& head, Index query, const MagnitudeOptions& options);
// Mean over every query with finite rows at all factors (ratio: mean of log ratio, reported as exp).
MagnitudeCurve meanMagnitudeCurve(const AttentionHead& head, const MagnitudeOptions& options);

// ---- Local branch: equivalent matrices E_c = A + M_c (FLatten Eq. 10-12, InLine Eq. 6) -------------
struct LocalBranchOptions {
    bool enabled = true;        // false: every layer's branch is treated as absent
    std::vector<int> channels;  // V channels within a head; empty = all d_v
    // Channels whose singular values are kept in the results; unset = every analysed channel.
    std::optional<std::vector<int>> spectrumChannels;
    // false: a layer's branch is analysed under the paradigm named by its `attention` attribute
    // when that paradigm is selected, otherwise under every selected paradigm; true: always every one.
    bool allParadigms = false;
    // alpha in E_c = A + alpha M_c (and in the branch's output, bias included): 1 is the model's
    // branch, 0 none; for sweeps of how much of the branch a claim needs (attnlens-cli sweep).
    double weight = 1.0;
    nlohmann::json toJson() const;
};
// The branch of one head: the image's weights and how channels map to them.
struct LocalBranchHead {
    const LocalBranchWeights* weights = nullptr;
    LocalChannelMap channelMap = LocalChannelMap::PerHead;
    int head = 0;
    int valueDim = 0;
    std::string kind;
    // Scope "window" (localBranchGrid of the layer): the convolution runs inside these windows.
    const WindowPartition* windows = nullptr;
};
struct LocalBranchChannel {
    int channel = -1;                        // V channel within the head; -1 for the mean over the analysed channels
    int weightChannel = -1;                  // the branch's weight channel (-1 for the mean)
    std::optional<SpectrumResult> spectrum;  // rank of E_c (singularValues empty unless kept)
    std::vector<double> localMass;           // mean k x k mass of E_c, one per AnalysisOptions::localK
    std::vector<double> localAbsFraction;    // mean share of |E_c row|_1 inside the k x k window, per k
    double branchShare = 0;                  // mean over ok grid rows of |M_c row|_1 / (|A row|_1 + |M_c row|_1)
};
struct LocalBranchResult {
    std::string kind;
    std::vector<LocalBranchChannel> channels;  // in the order of LocalBranchOptions::channels
    std::optional<LocalBranchChannel> mean;    // E_mean = A + mean_c M_c over the analysed channels
    // Rank of E_c over channels (when rank is selected): min, median (mean of the two middle
    // values for an even count), max.
    int rankMin = 0, rankMax = 0;
    double rankMedian = 0;
    std::vector<double> localMassWithout;         // A's mean k x k mass (the same as HeadStatistics::local)
    std::vector<double> localAbsFractionWithout;  // A's mean share of |A row|_1 inside the window
};
// a: the head's N x N matrix A (rows flagged in status are left out as for A's own statistics).
// Rank uses the same tolerance rule as A's (SpectrumOptions); local mass the same windows.
LocalBranchResult analyzeLocalBranch(const Matrix& a, std::span<const RowStatus> status, const LocalBranchGrid& grid,
                                     const LocalBranchHead& branch, const LocalBranchOptions& options,
                                     const SpectrumOptions& spectrumOptions, std::span<const int> localK, bool withRank,
                                     bool withLocal);
// Spectrum of any N x N matrix on a layout by dense SVD, with A's rules: spatialOnly drops the
// prefix rows and columns, rows holding non-finite values are left out. With blocks, the matrix is
// block-diagonal over those windows (zero outside them) and its spectrum is blockDiagonalSpectrum's.
SpectrumResult matrixSpectrum(const Matrix& a, const TokenLayout& layout, const SpectrumOptions& options,
                              const WindowPartition* blocks = nullptr);

// ---- Distance to a reference paradigm (what-if: how far each paradigm falls from softmax) ---------
// On the same head (same Q, K, V), per query i with rows ok under both paradigms:
//   total variation  TV_i = 1/2 sum_j |A_ij - R_ij|  (signed rows as they are: counted in
//                    signedQueries; for rows summing to 1 it lies in [0, 1])
//   Jensen-Shannon   JS_i = 1/2 KL(a || m) + 1/2 KL(r || m), m = (a + r)/2, nats, in [0, log 2], on
//                    each row divided by its sum; only queries whose rows are both non-negative
//                    with a positive sum
//   output cosine    cos(O_i, Oref_i), O = A V (queries whose two output rows are both non-zero)
// and over the head: ||O - Oref||_F / ||Oref||_F over the ok queries, and, on layers with a local
// branch, the same with the branch's output B (the layer's depthwise convolution of V plus bias,
// the same for both paradigms) added to both: ||O - Oref||_F / ||Oref + B||_F.
struct DistanceOptions {
    Paradigm reference;  // default: the softmax preset
    DistanceOptions();
};
// Quantiles reported over queries (numpy.quantile's default "linear" rule).
inline constexpr std::array<double, 5> kDistanceQuantiles{0.05, 0.25, 0.5, 0.75, 0.95};
struct QueryDistribution {
    Index count = 0;
    double mean = std::numeric_limits<double>::quiet_NaN();
    std::array<double, 5> quantiles = {
        std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN(),
        std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN(),
        std::numeric_limits<double>::quiet_NaN()};
    // Over the finite values (the order of `values` is changed).
    static QueryDistribution of(std::vector<double>& values);
};
struct DistanceResult {
    std::string reference;    // the reference paradigm's name
    Index queries = 0;        // queries whose rows are ok under both paradigms
    Index signedQueries = 0;  // of those, queries where either row has a negative weight
    QueryDistribution totalVariation;
    QueryDistribution jensenShannon;
    bool hasOutput = false;  // the layer has V
    double outputRelativeError = std::numeric_limits<double>::quiet_NaN();
    std::optional<double> outputRelativeErrorWithBranch;  // layers with a local branch
    QueryDistribution outputCosine;
};
// The reference's side of the comparison, built once per head and shared by every paradigm.
struct DistanceReference {
    std::string name;
    Matrix matrix;                   // N x n
    std::vector<RowStatus> status;   // per row
    const Matrix* values = nullptr;  // V (n x d_v), nullptr when the layer has none
    Matrix output;                   // matrix * V (empty without V)
    Matrix branchOutput;             // the local branch's output B (N x d_v); empty without one
};
// values and branchOutput may be null; branchOutput needs values.
DistanceReference distanceReference(const AttentionHead& reference, const Matrix* values,
                                    const Matrix* branchOutput = nullptr);
// a: the paradigm's N x n matrix with its row statuses (empty: all ok). output: O = a V for the
// reference's V when the caller has it already; nullptr: computed here.
DistanceResult distanceToReference(const Matrix& a, std::span<const RowStatus> status,
                                   const DistanceReference& reference, const Matrix* output = nullptr);

// ---- Everything for one head -----------------------------------------------------------------------
struct StatSelection {
    bool rank = true, local = true, entropy = true, confusion = true, magnitude = true, distance = true;
    // The registered statistics selected (registered_statistics.h), by key, in registration order.
    // The default selection is every statistic: every registered one too, so that a new statistic
    // appears in `analyze` without options.
    std::vector<std::string> registered = registeredStatisticKeys();
    // Names of builtInStatistics() and the registered keys (any subset; "all"); Error(Usage) on
    // unknown names.
    static StatSelection parse(std::string_view list);
    std::vector<std::string> names() const;
};

// The built-in statistics, in the order of --stats, the report's `statistics` and the help texts:
// the one table of their names (the registered statistics follow them, registered_statistics.h).
struct BuiltInStatistic {
    std::string_view name;
    bool StatSelection::*selected;
    std::string_view summary;  // what it measures, for help texts
};
std::span<const BuiltInStatistic> builtInStatistics();
// Every statistic's name, built-in then registered: "rank, local, ..., KEY" (messages, help texts).
std::string statisticNamesText(std::string_view separator = ", ");
struct AnalysisOptions {
    StatSelection stats;
    SpectrumOptions spectrum;
    std::vector<int> localK{3, 5, 7};
    ConfusionOptions confusion;
    MagnitudeOptions magnitude;
    LocalBranchOptions localBranch;
    DistanceOptions distance;
    bool perQueryMaps = false;      // keep LocalMassResult::perQuery in results
    nlohmann::json toJson() const;  // every definition and tolerance, for exports
};
// The one rule for analysis options, checked by attnlens-cli, the GUI's preferences (loading and
// the dialog) and the library (analyzeDump, analyzeHead, and each statistic for its own part):
// Error(Usage) naming the option as attnlens-cli spells it and the value, e.g. "--rank-tol: must
// be in (0, 1), got 2" (analysis_options.cpp). The local-branch options depend on the dump and are
// checked by analyzeDump.
void validate(const AnalysisOptions& options);
void validate(const SpectrumOptions& options);
void validate(const ConfusionOptions& options);
void validate(const MagnitudeOptions& options);
void validateLocalK(std::span<const int> ks);
struct HeadStatistics {
    Index tokens = 0;
    Index keys = 0;         // n: the columns of A (tokens, unless the keys lie on a reduced grid)
    Index flaggedRows = 0;  // rows with status != Ok
    std::optional<SpectrumResult> spectrum;
    std::vector<LocalMassResult> local;
    std::optional<EntropyResult> entropy;
    std::optional<ConfusionResult> confusion;
    std::optional<RayProbe> rayProbe;              // with confusion (issue 46 item 5)
    std::optional<MagnitudeCurve> magnitude;       // mean curve over queries
    std::optional<LocalBranchResult> localBranch;  // when the head was analysed with its branch
    std::optional<DistanceResult> distance;        // when distance is selected (and a reference given)
    // The selected registered statistics (StatSelection::registered), in its order: key, value.
    std::vector<std::pair<std::string, double>> registered;
};
// A number per head that a built-in statistic's result holds, as the desktop program's Heads view
// colours by it and render --head-statistic names it: the record's field it is (docs/DEFINITIONS.md),
// the statistic whose result holds it, its title, and its value for one head (NaN where the head has
// no such result or the value is undefined). Each statistic's entry of the one table lists its own
// (analysis/src/statistic_<name>.cpp), so that the view, render and the JSON speak of one number.
struct HeadValue {
    std::string_view field;      // e.g. "entropy.max_weight", "local[k=3].mean"
    std::string_view statistic;  // the built-in statistic whose result holds it (builtInStatistics())
    const char* title;           // UTF-8
    double (*of)(const HeadStatistics& s);
};
// Every built-in statistic's head values, in the order of the statistics.
std::span<const HeadValue> headValues();
// nullptr when no head value is this field.
const HeadValue* findHeadValue(std::string_view field);
// When the dense matrix is built anyway (local mass, entropy) and the magnitude curves are
// selected, analyzeHead keeps the raw rows of the one GEMM for both, for heads up to this many
// tokens (one more N x N matrix: 32 MiB at the limit).
constexpr Index kSharedRawRowsMaxTokens = 2048;
// The N x N matrices analyzeHead builds for one head: decided here once, for analyzeHead and for
// the memory plan that counts them (planMemory, workerBytes).
struct DenseNeeds {
    bool branch = false;         // the local branch is analysed beside A (rank or local mass selected)
    bool matrix = false;         // A itself: local mass, entropy, the branch, softmax rank and confusion
    bool sharedRawRows = false;  // A's raw rows kept for the magnitude curves (kSharedRawRowsMaxTokens)
    bool denseSvd = false;       // a dense SVD of an N x N matrix (softmax rank, the branch's rank)
    bool reference = false;      // the distance's reference matrix (DistanceReference), held beside A
    // N x N copies the statistics make beside A: softmax rank 2 (A's finite rows, dgesdd's input),
    // else softmax confusion 1 (its finite rows, when some are flagged); the branch 3 more (E_c,
    // its finite rows, dgesdd's input).
    int copies = 0;
    // The most N x N matrices held at once (an estimate from above: copies are counted as if alive
    // together).
    int matricesAtOnce() const { return int(matrix) + int(sharedRawRows) + int(reference) + copies; }
};
// lowRank: the paradigm has a factorised form (Paradigm::usesKernel); withBranch: the head has a
// local branch to analyse (LocalBranchHead given).
DenseNeeds denseNeeds(const StatSelection& stats, bool lowRank, Index tokens, bool withBranch);
// branch: the head's local branch, analysed beside A (rank and local mass as selected in
// options.stats); nullptr for none. reference: the same head under options.distance.reference
// (distanceReference), for the distance statistic; nullptr: no distance. values: the head's V, for
// the local mass's output share; nullptr: none.
// `cancel` is polled between the statistics (Error(Cancelled)): one head of large N takes seconds.
HeadStatistics analyzeHead(const AttentionHead& head, const Matrix& q, const AttentionLayout& layout,
                           const AnalysisOptions& options, const LocalBranchHead* branch = nullptr,
                           const DistanceReference* reference = nullptr, const Matrix* values = nullptr,
                           CancelToken cancel = {});

}  // namespace attnlens
