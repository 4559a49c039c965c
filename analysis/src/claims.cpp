// The papers' claims as measured inequalities (claims.h). Each claim gathers the records of the
// layers whose own attention belongs to the family the claim is about, computes its numbers, and
// says holds, fails or not_measurable (naming what is missing). What-ifs (a paradigm on another
// model's q and k) are added to the evidence under "what_if" and never enter a verdict.
#include "attnlens/analysis/claims.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "attnlens/io/text.h"

namespace attnlens {
namespace {

using nlohmann::json;

constexpr int kSchemaVersion = 1;
// A magnitude curve is flat when its values differ by no more than this, relative to 1 + |value|.
// Linear attention's cancellation is exact but for the N eps in its denominator (eps = 1e-6: the
// row changes by about N eps / (phi(q) . sum phi(k)) over the factors, 2e-5 on the bundled example),
// while softmax's entropy moves by whole nats over the same factors.
constexpr double kFlatTolerance = 1e-3;

enum class ClaimFamily { Softmax, Linear, InLine, Mala, Other };

ClaimFamily familyOf(const Paradigm& p) {
    switch (p.normalisation) {
        case Normalisation::Softmax:
            return ClaimFamily::Softmax;
        case Normalisation::Divide:
            return ClaimFamily::Linear;
        case Normalisation::Subtract:
            return ClaimFamily::InLine;
        case Normalisation::Magnitude:
            return ClaimFamily::Mala;
    }
    return ClaimFamily::Other;
}

const char* familyName(ClaimFamily f) {
    switch (f) {
        case ClaimFamily::Softmax:
            return "softmax";
        case ClaimFamily::Linear:
            return "linear (division-normalised kernel: linear_relu, linear_elu, focused)";
        case ClaimFamily::InLine:
            return "InLine (subtract normalisation)";
        case ClaimFamily::Mala:
            return "MALA (magnitude-aware normalisation)";
        case ClaimFamily::Other:
            break;
    }
    return "other";
}

double noValue() { return std::numeric_limits<double>::quiet_NaN(); }
json claimNumber(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

struct ClaimMean {
    double sum = 0;
    std::int64_t n = 0;
    void add(double v) {
        if (std::isfinite(v)) sum += v, ++n;
    }
    double value() const { return n ? sum / double(n) : noValue(); }
};

// The records of one report, sorted into the layers' own attention (trained) and the others.
class ClaimEvidence {
public:
    explicit ClaimEvidence(const AnalysisReport& report) : report_(report) {
        for (const HeadRecord& r : report.records) {
            const LayerInfo& layer = report.dump.layers[std::size_t(r.layer)];
            const Paradigm& p = report.paradigms[std::size_t(r.paradigm)];
            if (!layer.attention.empty() && p.name == layer.attention) trained_.push_back(&r);
        }
    }

    const AnalysisReport& report() const { return report_; }
    const LayerInfo& layer(const HeadRecord& r) const { return report_.dump.layers[std::size_t(r.layer)]; }
    const Paradigm& paradigm(const HeadRecord& r) const { return report_.paradigms[std::size_t(r.paradigm)]; }

    // Records of layers whose own attention is of `family` (and passes `extra`).
    std::vector<const HeadRecord*> trained(ClaimFamily family,
                                           const std::function<bool(const HeadRecord&)>& extra = {}) const {
        std::vector<const HeadRecord*> out;
        for (const HeadRecord* r : trained_)
            if (familyOf(paradigm(*r)) == family && (!extra || extra(*r))) out.push_back(r);
        return out;
    }
    // What-if records: paradigm `name` applied to the layers whose own attention is of `family`.
    std::vector<const HeadRecord*> whatIf(const std::string& name, ClaimFamily family) const {
        std::vector<const HeadRecord*> out;
        for (const HeadRecord& r : report_.records) {
            const LayerInfo& l = layer(r);
            if (paradigm(r).name != name || l.attention.empty() || l.attention == name) continue;
            const auto own = std::find_if(report_.paradigms.begin(), report_.paradigms.end(),
                                          [&](const Paradigm& p) { return p.name == l.attention; });
            if (own != report_.paradigms.end() && familyOf(*own) == family) out.push_back(&r);
        }
        return out;
    }
    // Which models and layers a set of records covers, for the evidence.
    json coverage(const std::vector<const HeadRecord*>& records) const {
        std::set<std::string> models, layers, paradigms;
        std::set<int> images;
        for (const HeadRecord* r : records) {
            layers.insert(layer(*r).name);
            models.insert(modelOfLayer(layer(*r).name));
            paradigms.insert(paradigm(*r).name);
            images.insert(r->image);
        }
        return {{"models", std::vector<std::string>(models.begin(), models.end())},
                {"layers", std::vector<std::string>(layers.begin(), layers.end())},
                {"paradigms", std::vector<std::string>(paradigms.begin(), paradigms.end())},
                {"images", images.size()},
                {"records", records.size()}};
    }

private:
    const AnalysisReport& report_;
    std::vector<const HeadRecord*> trained_;
};

ClaimMean meanOf(const std::vector<const HeadRecord*>& records, const std::function<double(const HeadRecord&)>& f) {
    ClaimMean m;
    for (const HeadRecord* r : records) m.add(f(*r));
    return m;
}

double local3TimesUniform(const HeadRecord& r) {
    for (const LocalMassResult& l : r.stats.local)
        if (l.k == 3) return timesUniform(l.mean, l.admissibleBaseline);
    return noValue();
}
double entropyAbs(const HeadRecord& r) {
    return r.stats.entropy ? r.stats.entropy->meanAdmissibleNormalisedEntropyAbs : noValue();
}
double confused(const HeadRecord& r) {
    return r.stats.confusion ? double(r.stats.confusion->confusedPairs) : noValue();
}

// The index of a = 1 among a magnitude curve's factors (always evaluated), -1 if absent.
int unitFactor(const MagnitudeCurve& c) {
    for (std::size_t i = 0; i < c.factors.size(); ++i)
        if (c.factors[i] == 1.0) return int(i);
    return -1;
}

json newClaim(const char* id, const char* paper, const char* reference, const char* statement) {
    return {{"id", id}, {"paper", paper}, {"reference", reference}, {"statement", statement}};
}
json notMeasurable(json c, const std::string& why) {
    c["verdict"] = "not_measurable";
    c["evidence"] = {{"reason", why}};
    return c;
}
json decided(json c, bool holds, json evidence) {
    c["verdict"] = holds ? "holds" : "fails";
    c["evidence"] = std::move(evidence);
    return c;
}
std::string noModel(ClaimFamily f) {
    return std::string("no layer of this dump has a model trained with ") + familyName(f) +
           " attention (its `attention` attribute)";
}

// ---- The claims ------------------------------------------------------------------------------

// The rank a division-normalised kernel map (r = d features) can reach on the record's layer and
// head: min(N, n, d), or on a window layer the sum over its key sets of min(|set|, d) (each window
// is a sequence of its own; rankBound's rule for those paradigms).
int kernelRankBound(const LayerInfo& layer, int head) {
    if (!layer.window) return std::min({layer.tokens, layer.keyTokens(), layer.dim});
    const WindowPartition& w = layer.window->partitionOf(head);
    int sum = 0;
    for (int g = 0; g < w.groups(); ++g) sum += std::min(int(w.groupTokens(g).size()), layer.dim);
    return sum;
}

// The rank softmax can reach there: min(N, n) (window blocks cover the grid).
int softmaxRankCeiling(const LayerInfo& layer) { return std::min(layer.tokens, layer.keyTokens()); }

json linearRankAtMostD(const ClaimEvidence& e) {
    json c = newClaim("flatten.linear_rank_at_most_d", "FLatten", "Sec. 4.2, Eq. 9, Fig. 5",
                      "Linear attention's matrix has rank at most d (the feature dimension of phi), per window on "
                      "window layers.");
    const auto records =
        e.trained(ClaimFamily::Linear, [](const HeadRecord& r) { return r.stats.spectrum.has_value(); });
    if (records.empty()) return notMeasurable(c, noModel(ClaimFamily::Linear));
    int maxRank = 0, maxBound = 0, over = 0, d = 0, windowed = 0;
    for (const HeadRecord* r : records) {
        maxRank = std::max(maxRank, r->stats.spectrum->rank);
        maxBound = std::max(maxBound, r->stats.spectrum->bound);
        d = std::max(d, e.layer(*r).dim);
        over += r->stats.spectrum->rank > r->stats.spectrum->bound;
        windowed += e.layer(*r).window.has_value();
    }
    const ClaimMean rank = meanOf(records, [](const HeadRecord& r) { return double(r.stats.spectrum->rank); });
    return decided(c, over == 0,
                   {{"trained", e.coverage(records)},
                    {"rank_mean", claimNumber(rank.value())},
                    {"rank_max", maxRank},
                    {"d", d},
                    {"bound_max", maxBound},
                    {"records_on_window_layers", windowed},
                    {"records_above_bound", over},
                    {"rule",
                     "every record's numerical rank <= its rank.bound: d (+ 1 for the offset forms) on a "
                     "global layer, the sum over its windows of min(|window|, d) on a window layer"}});
}

json softmaxRankAboveD(const ClaimEvidence& e) {
    json c = newClaim("flatten.softmax_rank_above_d", "FLatten", "Sec. 4.2, Fig. 5",
                      "Softmax attention's matrix has rank above d: it is not capped by the feature dimension (per "
                      "window on window layers).");
    const auto records =
        e.trained(ClaimFamily::Softmax, [](const HeadRecord& r) { return r.stats.spectrum.has_value(); });
    if (records.empty()) return notMeasurable(c, noModel(ClaimFamily::Softmax));
    std::map<std::string, ClaimMean> perLayer, bounds;
    std::map<std::string, int> dims, ceilings;
    for (const HeadRecord* r : records) {
        perLayer[e.layer(*r).name].add(double(r->stats.spectrum->rank));
        bounds[e.layer(*r).name].add(double(kernelRankBound(e.layer(*r), r->head)));
        ceilings[e.layer(*r).name] = softmaxRankCeiling(e.layer(*r));
        dims[e.layer(*r).name] = e.layer(*r).dim;
    }
    json layers = json::array(), untestable = json::array();
    bool holds = true;
    int tested = 0;
    for (const auto& [name, m] : perLayer) {
        const double cap = bounds[name].value();
        // Reduced keys (n <= d) cap softmax as much as a kernel: the layer cannot tell them apart.
        if (double(ceilings[name]) <= cap) {
            untestable.push_back(name);
            continue;
        }
        ++tested;
        holds = holds && m.value() > cap;
        layers.push_back({{"layer", name},
                          {"rank_mean", claimNumber(m.value())},
                          {"d", dims[name]},
                          {"linear_cap", claimNumber(cap)}});
    }
    if (tested == 0)
        return notMeasurable(c,
                             "on every softmax layer of this dump min(N, n) <= the kernel cap (reduced keys or "
                             "tiny windows): softmax cannot exceed d there");
    json evidence = {{"trained", e.coverage(records)},
                     {"layers", layers},
                     {"rule",
                      "every softmax layer's mean numerical rank over its heads and images > linear_cap: "
                      "min(N, n, d), or on a window layer the sum over its windows of min(|window|, d); "
                      "layers where min(N, n) <= that cap cannot tell the two apart and are left out"}};
    if (!untestable.empty()) evidence["layers_untestable"] = untestable;
    const auto what = e.whatIf("linear_relu", ClaimFamily::Softmax);
    if (!what.empty())
        evidence["what_if"] = {{"note", "linear_relu applied to the softmax models' q, k: never decides the verdict"},
                               {"records", what.size()},
                               {"rank_mean", claimNumber(meanOf(what, [](const HeadRecord& r) {
                                                             return r.stats.spectrum ? double(r.stats.spectrum->rank)
                                                                                     : noValue();
                                                         }).value())}};
    return decided(c, holds, evidence);
}

json focusedSharperThanLinear(const ClaimEvidence& e) {
    json c = newClaim("flatten.focused_sharper_than_linear", "FLatten", "Sec. 4.1, Fig. 3",
                      "The focused kernel f_p makes linear attention more focused: the focused model's rows have lower "
                      "entropy than a plain ReLU linear model's.");
    const auto focused = e.trained(ClaimFamily::Linear, [&](const HeadRecord& r) {
        return e.paradigm(r).kernel == Kernel::Focused && r.stats.entropy.has_value();
    });
    const auto plain = e.trained(ClaimFamily::Linear, [&](const HeadRecord& r) {
        return e.paradigm(r).kernel != Kernel::Focused && r.stats.entropy.has_value();
    });
    if (focused.empty()) return notMeasurable(c, "no layer of this dump has a model trained with the focused kernel");
    if (plain.empty())
        return notMeasurable(c, "no layer of this dump has a plain (unfocused) linear model to compare with");
    const double f = meanOf(focused, entropyAbs).value(), p = meanOf(plain, entropyAbs).value();
    return decided(c, f < p,
                   {{"focused", e.coverage(focused)},
                    {"plain_linear", e.coverage(plain)},
                    {"normalised_entropy_abs_admissible_focused", claimNumber(f)},
                    {"normalised_entropy_abs_admissible_plain", claimNumber(p)},
                    {"rule", "mean over records of entropy.normalised_entropy_abs_admissible: focused < plain"}});
}

json localBranchFullRank(const ClaimEvidence& e) {
    json c = newClaim("flatten.dwc_full_rank", "FLatten", "Sec. 4.2, Eq. 12, Fig. 5c",
                      "Adding the depthwise convolution restores full rank: A + M_DWC has rank min(N, n) (the "
                      "median channel of every head).");
    const auto records = e.trained(ClaimFamily::Linear, [](const HeadRecord& r) {
        return r.stats.localBranch && r.stats.localBranch->kind == "dwc" && !r.stats.localBranch->channels.empty() &&
               r.stats.localBranch->channels.front().spectrum.has_value();
    });
    if (records.empty())
        return notMeasurable(c, "no linear model's layer in this dump carries a dwc local branch (format.md 1a)");
    int below = 0, belowAll = 0, rankMin = std::numeric_limits<int>::max();
    ClaimMean median, without;
    for (const HeadRecord* r : records) {
        const auto full = double(std::min(r->stats.tokens, r->stats.keys));
        rankMin = std::min(rankMin, r->stats.localBranch->rankMin);
        below += r->stats.localBranch->rankMedian < full;
        belowAll += r->stats.localBranch->rankMin < full;
        median.add(r->stats.localBranch->rankMedian);
        if (r->stats.spectrum) without.add(double(r->stats.spectrum->rank));
    }
    return decided(c, below == 0,
                   {{"trained", e.coverage(records)},
                    {"rank_of_A_mean", claimNumber(without.value())},
                    {"rank_of_E_c_median_mean", claimNumber(median.value())},
                    {"rank_of_E_c_min", rankMin},
                    {"records_below_full_rank", below},
                    {"records_with_a_channel_below_full_rank", belowAll},
                    {"rule", "every record's median E_c rank over its channels = min(N, n)"}});
}

json linearConfuses(const ClaimEvidence& e) {
    json c = newClaim("inline.linear_not_injective", "InLine", "Prop. 2, Sec. 4.1, Fig. 2",
                      "Linear attention is not injective: distinct queries get the same attention row (confused "
                      "pairs).");
    const auto records =
        e.trained(ClaimFamily::Linear, [](const HeadRecord& r) { return r.stats.confusion.has_value(); });
    if (records.empty()) return notMeasurable(c, noModel(ClaimFamily::Linear));
    const ClaimMean pairs = meanOf(records, confused);
    json evidence = {
        {"trained", e.coverage(records)},
        {"confused_pairs_per_head_mean", claimNumber(pairs.value())},
        {"confused_pairs_far_per_head_mean",
         claimNumber(
             meanOf(records, [](const HeadRecord& r) { return double(r.stats.confusion->confusedPairsFar); }).value())},
        {"tau", records.front()->stats.confusion->tau},
        {"rule", "mean confused pairs per (image, head) > 0 (InLine's definition, ||A_p - A_q|| < tau)"}};
    const auto softmax =
        e.trained(ClaimFamily::Softmax, [](const HeadRecord& r) { return r.stats.confusion.has_value(); });
    if (!softmax.empty())
        evidence["softmax_confused_pairs_per_head_mean"] = claimNumber(meanOf(softmax, confused).value());
    return decided(c, pairs.value() > 0, evidence);
}

json linearConstantAlongRays(const ClaimEvidence& e) {
    json c = newClaim("inline.linear_rows_constant_along_rays", "InLine", "Prop. 2, Fig. 1a",
                      "Division-normalised linear attention gives a query and its multiples the same row: it cannot "
                      "tell queries on one ray apart.");
    const auto records =
        e.trained(ClaimFamily::Linear, [](const HeadRecord& r) { return r.stats.rayProbe.has_value(); });
    if (records.empty()) return notMeasurable(c, noModel(ClaimFamily::Linear));
    const auto equal = [](const HeadRecord& r) { return r.stats.rayProbe->equalFraction; };
    const double fraction = meanOf(records, equal).value();
    json evidence = {{"trained", e.coverage(records)},
                     {"equal_fraction_mean", claimNumber(fraction)},
                     {"tolerance", kRayEqualTolerance},
                     {"factors", records.front()->stats.rayProbe->factors},
                     {"rule",
                      "mean over records of ray_probe.equal_fraction >= 0.99 (rows equal to the tolerance in "
                      "total variation at every factor)"}};
    const auto softmax =
        e.trained(ClaimFamily::Softmax, [](const HeadRecord& r) { return r.stats.rayProbe.has_value(); });
    if (!softmax.empty()) evidence["softmax_equal_fraction_mean"] = claimNumber(meanOf(softmax, equal).value());
    return decided(c, fraction >= 0.99, evidence);
}

json injectiveHasNoConfusion(const ClaimEvidence& e, ClaimFamily family, const char* id, const char* reference,
                             const char* statement) {
    json c = newClaim(id, "InLine", reference, statement);
    const auto records = e.trained(family, [](const HeadRecord& r) { return r.stats.confusion.has_value(); });
    if (records.empty()) return notMeasurable(c, noModel(family));
    std::int64_t total = 0, heads = 0, far = 0;
    for (const HeadRecord* r : records) {
        total += r->stats.confusion->confusedPairs;
        far += r->stats.confusion->confusedPairsFar;
        heads += r->stats.confusion->confusedPairs > 0;
    }
    return decided(c, total == 0,
                   {{"trained", e.coverage(records)},
                    {"confused_pairs_total", total},
                    {"confused_pairs_far_total", far},
                    {"records_with_confused_pairs", heads},
                    {"rule",
                     "no confused pairs in any record; near-identical rows of flat attention also count "
                     "(continuity, not only non-injectivity)"}});
}

json softmaxMoreLocal(const ClaimEvidence& e) {
    json c = newClaim("inline.softmax_more_local", "InLine", "Sec. 4.2, Fig. 3",
                      "Softmax attention is more local than linear attention: more of each row's weight lies in the "
                      "query's 3 x 3 neighbourhood (over its uniform baseline).");
    const auto softmax = e.trained(ClaimFamily::Softmax, [](const HeadRecord& r) { return !r.stats.local.empty(); });
    const auto linear = e.trained(ClaimFamily::Linear, [](const HeadRecord& r) { return !r.stats.local.empty(); });
    if (softmax.empty()) return notMeasurable(c, noModel(ClaimFamily::Softmax));
    if (linear.empty()) return notMeasurable(c, noModel(ClaimFamily::Linear));
    const double s = meanOf(softmax, local3TimesUniform).value(), l = meanOf(linear, local3TimesUniform).value();
    json evidence = {{"softmax", e.coverage(softmax)},
                     {"linear", e.coverage(linear)},
                     {"x_uniform_3x3_softmax", claimNumber(s)},
                     {"x_uniform_3x3_linear", claimNumber(l)},
                     {"rule", "mean over records of local[k=3].x_uniform: softmax > linear"}};
    const auto what = e.whatIf("linear_relu", ClaimFamily::Softmax);
    if (!what.empty())
        evidence["what_if"] = {{"note", "linear_relu applied to the softmax models' q, k: never decides the verdict"},
                               {"records", what.size()},
                               {"x_uniform_3x3", claimNumber(meanOf(what, local3TimesUniform).value())}};
    return decided(c, s > l, evidence);
}

json localResidualRaisesLocality(const ClaimEvidence& e) {
    json c = newClaim("inline.local_residual_raises_locality", "InLine", "Sec. 4.2, Eq. 6, Table 2",
                      "InLine's local residual raises locality: A + M_c has more 3 x 3 mass than A alone.");
    const auto records = e.trained(ClaimFamily::InLine, [](const HeadRecord& r) {
        return r.stats.localBranch && r.stats.localBranch->mean && !r.stats.localBranch->mean->localMass.empty() &&
               !r.stats.localBranch->localMassWithout.empty() && !r.stats.local.empty() && r.stats.local.front().k == 3;
    });
    if (records.empty())
        return notMeasurable(c, "no InLine model's layer in this dump carries a local branch with its local mass");
    const ClaimMean with =
        meanOf(records, [](const HeadRecord& r) { return r.stats.localBranch->mean->localMass.front(); });
    const ClaimMean without =
        meanOf(records, [](const HeadRecord& r) { return r.stats.localBranch->localMassWithout.front(); });
    return decided(c, with.value() > without.value(),
                   {{"trained", e.coverage(records)},
                    {"local_3x3_without", claimNumber(without.value())},
                    {"local_3x3_with_branch", claimNumber(with.value())},
                    {"rule", "mean 3 x 3 mass of E_mean = A + mean_c M_c > that of A"}});
}

// ClaimMean over records of a magnitude curve's value at the largest factor minus at the smallest,
// and the largest |change| relative to 1 + |value at a = 1|.
struct CurveChange {
    ClaimMean change, maxRelative;
};
CurveChange curveChange(const std::vector<const HeadRecord*>& records,
                        const std::function<const std::vector<double>&(const MagnitudeCurve&)>& values) {
    CurveChange out;
    double worst = 0;
    for (const HeadRecord* r : records) {
        const MagnitudeCurve& m = *r->stats.magnitude;
        const std::vector<double>& v = values(m);
        const int unit = unitFactor(m);
        if (v.empty() || unit < 0) continue;
        out.change.add(v.back() - v.front());
        for (double x : v)
            if (std::isfinite(x) && std::isfinite(v[std::size_t(unit)]))
                worst = std::max(worst, std::abs(x - v[std::size_t(unit)]) / (1 + std::abs(v[std::size_t(unit)])));
    }
    out.maxRelative.add(worst);
    return out;
}

json linearIgnoresMagnitude(const ClaimEvidence& e) {
    json c = newClaim("mala.linear_ignores_magnitude", "MALA", "Sec. 3.2, Eq. 5, Fig. 2",
                      "Linear attention ignores the query's magnitude: scaling phi(q) leaves its row unchanged.");
    const auto records =
        e.trained(ClaimFamily::Linear, [](const HeadRecord& r) { return r.stats.magnitude.has_value(); });
    if (records.empty()) return notMeasurable(c, noModel(ClaimFamily::Linear));
    const CurveChange entropy =
        curveChange(records, [](const MagnitudeCurve& m) -> const std::vector<double>& { return m.entropy; });
    const CurveChange maxWeight =
        curveChange(records, [](const MagnitudeCurve& m) -> const std::vector<double>& { return m.maxWeight; });
    // The row's shape decides: its entropy is taken on the row normalised to sum 1, so the N eps of a
    // division-normalised denominator (a s_j / (a S + N eps), which scales the whole row and with it
    // the largest weight, by up to 1 % at a = 1/4 on small models) leaves it alone.
    return decided(
        c, entropy.maxRelative.value() <= kFlatTolerance,
        {{"trained", e.coverage(records)},
         {"largest_relative_entropy_change", claimNumber(entropy.maxRelative.value())},
         {"largest_relative_change", claimNumber(std::max(entropy.maxRelative.value(), maxWeight.maxRelative.value()))},
         {"largest_relative_max_weight_change", claimNumber(maxWeight.maxRelative.value())},
         {"tolerance", kFlatTolerance},
         {"rule",
          "the mean entropy curve (of each row's max(A, 0) renormalised to sum 1: its shape) changes by at most "
          "the tolerance, relative to 1 + its value at a = 1, over every factor; the max weight's change "
          "is reported beside it: it also follows the row's total, which the N eps of a division-"
          "normalised denominator moves"}});
}

json softmaxSharpens(const ClaimEvidence& e) {
    json c = newClaim("mala.softmax_sharpens", "MALA", "Sec. 3.2, Eq. 6, Fig. 2",
                      "Softmax attention sharpens as the query grows: its row entropy falls from the smallest to the "
                      "largest magnitude factor.");
    const auto records =
        e.trained(ClaimFamily::Softmax, [](const HeadRecord& r) { return r.stats.magnitude.has_value(); });
    if (records.empty()) return notMeasurable(c, noModel(ClaimFamily::Softmax));
    const CurveChange entropy =
        curveChange(records, [](const MagnitudeCurve& m) -> const std::vector<double>& { return m.entropy; });
    return decided(c, entropy.change.value() < 0,
                   {{"trained", e.coverage(records)},
                    {"entropy_change_mean", claimNumber(entropy.change.value())},
                    {"factors", records.front()->stats.magnitude->factors},
                    {"rule", "mean over records of entropy(a_max) - entropy(a_min) < 0"}});
}

json malaGentler(const ClaimEvidence& e) {
    json c = newClaim("mala.sharpens_more_gently_than_softmax", "MALA", "Sec. 3.2-3.3, Fig. 2",
                      "MALA's attention sharpens as the query grows, more gently than softmax's: its largest weight "
                      "grows, by a smaller factor.");
    const auto growth = [](const HeadRecord& r) {
        const MagnitudeCurve& m = *r.stats.magnitude;
        const int unit = unitFactor(m);
        return unit < 0 || m.maxWeight.empty() ? noValue() : m.maxWeight.back() / m.maxWeight[std::size_t(unit)];
    };
    // The same growth of the spread (reports before it have none: no value), which negative weights
    // cannot bend; reported beside the verdict's max weight.
    const auto spreadGrowth = [](const HeadRecord& r) {
        const MagnitudeCurve& m = *r.stats.magnitude;
        const int unit = unitFactor(m);
        return unit < 0 || m.spread.size() != m.factors.size() ? noValue()
                                                               : m.spread.back() / m.spread[std::size_t(unit)];
    };
    const auto mala = e.trained(ClaimFamily::Mala, [](const HeadRecord& r) { return r.stats.magnitude.has_value(); });
    const auto softmax =
        e.trained(ClaimFamily::Softmax, [](const HeadRecord& r) { return r.stats.magnitude.has_value(); });
    if (mala.empty()) return notMeasurable(c, noModel(ClaimFamily::Mala));
    if (softmax.empty()) return notMeasurable(c, noModel(ClaimFamily::Softmax));
    const double gm = meanOf(mala, growth).value(), gs = meanOf(softmax, growth).value();
    json evidence = {{"mala", e.coverage(mala)},
                     {"softmax", e.coverage(softmax)},
                     {"max_weight_growth_mala", claimNumber(gm)},
                     {"max_weight_growth_softmax", claimNumber(gs)},
                     {"spread_growth_mala", claimNumber(meanOf(mala, spreadGrowth).value())},
                     {"spread_growth_softmax", claimNumber(meanOf(softmax, spreadGrowth).value())},
                     {"rule",
                      "mean over records of max_weight(a_max) / max_weight(1): 1 < MALA's < softmax's (the spread's "
                      "growth, spread(a_max) / spread(1), is reported beside it and does not decide)"}};
    const auto what = e.whatIf("softmax", ClaimFamily::Mala);
    if (!what.empty())
        evidence["what_if"] = {{"note", "softmax applied to the MALA models' q, k: never decides the verdict"},
                               {"records", what.size()},
                               {"max_weight_growth", claimNumber(meanOf(what, [&](const HeadRecord& r) {
                                                                     return r.stats.magnitude ? growth(r) : noValue();
                                                                 }).value())}};
    return decided(c, gm > 1 && gm < gs, evidence);
}

json malaNotNegative(const ClaimEvidence& e) {
    json c = newClaim("mala.no_negative_weights", "MALA", "Sec. 3.3",
                      "MALA's attention weights are not negative in practice.");
    const auto records = e.trained(ClaimFamily::Mala, [](const HeadRecord& r) { return r.stats.entropy.has_value(); });
    if (records.empty()) return notMeasurable(c, noModel(ClaimFamily::Mala));
    const ClaimMean fraction =
        meanOf(records, [](const HeadRecord& r) { return r.stats.entropy->negativeWeightFraction; });
    const ClaimMean rows = meanOf(records, [](const HeadRecord& r) { return r.stats.entropy->negativeRowFraction; });
    const ClaimMean mass = meanOf(records, [](const HeadRecord& r) { return r.stats.entropy->meanNegativeMass; });
    return decided(c, fraction.value() == 0,
                   {{"trained", e.coverage(records)},
                    {"negative_weight_fraction_mean", claimNumber(fraction.value())},
                    {"negative_row_fraction_mean", claimNumber(rows.value())},
                    {"negative_mass_per_row_mean", claimNumber(mass.value())},
                    {"rule", "no negative weight in any record (entropy.negative_weight_fraction = 0)"}});
}

json entropyOrder(const ClaimEvidence& e) {
    json c = newClaim("mala.entropy_order", "MALA", "Sec. 3.3, Fig. 4",
                      "Row entropy orders softmax < MALA < linear attention: MALA is spikier than linear attention and "
                      "smoother than softmax.");
    const auto has = [](const HeadRecord& r) { return r.stats.entropy.has_value(); };
    const auto softmax = e.trained(ClaimFamily::Softmax, has), mala = e.trained(ClaimFamily::Mala, has),
               linear = e.trained(ClaimFamily::Linear, has);
    for (const auto& [records, family] :
         {std::pair{&softmax, ClaimFamily::Softmax}, {&mala, ClaimFamily::Mala}, {&linear, ClaimFamily::Linear}})
        if (records->empty()) return notMeasurable(c, noModel(family));
    const double s = meanOf(softmax, entropyAbs).value(), m = meanOf(mala, entropyAbs).value(),
                 l = meanOf(linear, entropyAbs).value();
    return decided(c, s < m && m < l,
                   {{"softmax", e.coverage(softmax)},
                    {"mala", e.coverage(mala)},
                    {"linear", e.coverage(linear)},
                    {"normalised_entropy_abs_admissible_softmax", claimNumber(s)},
                    {"normalised_entropy_abs_admissible_mala", claimNumber(m)},
                    {"normalised_entropy_abs_admissible_linear", claimNumber(l)},
                    {"rule",
                     "means over records of entropy.normalised_entropy_abs_admissible (on |A|, so MALA's "
                     "negative weights count): softmax < MALA < linear"}});
}

}  // namespace

AnalyzeRequest claimsAnalyzeRequest() {
    AnalyzeRequest r;
    r.options.stats = StatSelection::parse("rank,local,entropy,confusion,magnitude");
    r.options.localK = {3};
    r.options.localBranch.allParadigms = false;
    return r;
}

nlohmann::json evaluateClaims(const AnalysisReport& report, const std::string& file, const ToolInfo& tool) {
    const ClaimEvidence e(report);
    json claims = json::array({
        linearRankAtMostD(e),
        softmaxRankAboveD(e),
        focusedSharperThanLinear(e),
        localBranchFullRank(e),
        linearConfuses(e),
        linearConstantAlongRays(e),
        injectiveHasNoConfusion(e, ClaimFamily::Softmax, "inline.softmax_injective", "Prop. 1, Fig. 2",
                                "Softmax attention is injective: distinct queries get distinct rows (no confused "
                                "pairs)."),
        injectiveHasNoConfusion(e, ClaimFamily::InLine, "inline.inline_injective", "Prop. 3",
                                "InLine attention is injective: distinct queries get distinct rows (no confused "
                                "pairs)."),
        softmaxMoreLocal(e),
        localResidualRaisesLocality(e),
        linearIgnoresMagnitude(e),
        softmaxSharpens(e),
        malaGentler(e),
        malaNotNegative(e),
        entropyOrder(e),
    });
    json counts = {{"holds", 0}, {"fails", 0}, {"not_measurable", 0}};
    for (const json& c : claims)
        counts[c["verdict"].get<std::string>()] = counts[c["verdict"].get<std::string>()].get<int>() + 1;
    json definitions = {
        {"trained_evidence",
         "only records whose paradigm is the layer's own attention (its `attention` attribute: the paradigm its model "
         "was trained with) decide a verdict"},
        {"what_if", "a paradigm applied to another model's q, k; reported under evidence.what_if, never decides"},
        {"families",
         {{"softmax", "normalisation softmax"},
          {"linear", "division-normalised kernels (linear_relu, linear_elu, focused)"},
          {"inline", "subtract normalisation"},
          {"mala", "magnitude-aware normalisation"}}},
        {"flat_tolerance", kFlatTolerance},
        {"statistics", report.request.options.toJson()},
    };
    json out = {
        {"format", "attnlens.claims"},
        {"schema_version", kSchemaVersion},
        {"input", {{"file", file}, {"images", report.request.images.size()}, {"layers", report.request.layers.size()}}},
        {"tool", {{"name", tool.name}, {"version", tool.version}, {"command", tool.command}}},
        {"definitions", definitions},
        {"claims", claims},
        {"counts", counts}};
    // An analysis that skipped unreadable (image, layer) (the desktop program's) says what its
    // evidence lacks; the evidence's coverage counts only what was read.
    if (!report.skipped.empty()) {
        json skipped = json::array();
        for (const SkippedLayer& s : report.skipped)
            skipped.push_back(
                {{"image", s.image}, {"layer", report.dump.layers[std::size_t(s.layer)].name}, {"message", s.message}});
        out["skipped"] = std::move(skipped);
    }
    return out;
}

}  // namespace attnlens
