#include "attnlens/analysis/report.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "attnlens/io/error.h"
#include "attnlens/io/json_message.h"
#include "attnlens/io/output_path.h"
#include "attnlens/io/text.h"
#include "attnlens/math/blas.h"
#include "finite_mean.h"
#include "parallel.h"
#include "statistic_bounds.h"

namespace attnlens {
namespace {

using detail::FiniteMean;
using nlohmann::json;

json finiteOrNull(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json vectorJson(const std::vector<double>& v) {
    json a = json::array();
    for (double x : v) a.push_back(finiteOrNull(x));
    return a;
}

std::string utcNow() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// Mean branch share over the analysed channels with a finite share (NaN for none).
double meanBranchShare(const LocalBranchResult& b) {
    double sum = 0;
    std::size_t count = 0;
    for (const auto& c : b.channels)
        if (std::isfinite(c.branchShare)) {
            sum += c.branchShare;
            ++count;
        }
    return count ? sum / double(count) : std::numeric_limits<double>::quiet_NaN();
}

json branchChannelJson(const LocalBranchChannel& c, const std::vector<int>& ks) {
    json e;
    if (c.channel >= 0) {
        e["channel"] = c.channel;
        e["weight_channel"] = c.weightChannel;
    }
    if (c.spectrum) {
        const auto& sp = *c.spectrum;
        e["rank"] = sp.rank;
        e["effective_rank"] = finiteOrNull(sp.effectiveRank);
        e["size"] = sp.size;
        e["tolerance"] = finiteOrNull(sp.tolerance);
        e["method"] = sp.method;
        if (!sp.singularValues.empty()) e["singular_values"] = vectorJson(sp.singularValues);
        if (!sp.windowRanks.empty()) e["window_ranks"] = sp.windowRanks;
    }
    if (!c.localMass.empty()) {
        json l = json::array();
        for (std::size_t i = 0; i < c.localMass.size() && i < ks.size(); ++i)
            l.push_back({{"k", ks[i]},
                         {"mean", finiteOrNull(c.localMass[i])},
                         {"abs_fraction", finiteOrNull(c.localAbsFraction[i])}});
        e["local"] = l;
    }
    e["branch_share"] = finiteOrNull(c.branchShare);
    return e;
}

json localBranchJson(const LocalBranchResult& b, const HeadStatistics& s, const std::vector<int>& ks) {
    json j;
    j["kind"] = b.kind;
    j["channels_analysed"] = b.channels.size();
    if (b.mean && b.mean->spectrum) {
        j["rank"] = {{"without", s.spectrum ? json(s.spectrum->rank) : json(nullptr)},
                     {"min", b.rankMin},
                     {"median", b.rankMedian},
                     {"max", b.rankMax},
                     {"mean_channel", b.mean->spectrum->rank},
                     {"size", b.mean->spectrum->size}};
    }
    if (!b.localMassWithout.empty()) {
        json l = json::array();
        for (std::size_t i = 0; i < b.localMassWithout.size() && i < ks.size(); ++i) {
            double lo = std::numeric_limits<double>::infinity(), hi = -lo;
            for (const auto& c : b.channels)
                if (std::isfinite(c.localMass[i])) {
                    lo = std::min(lo, c.localMass[i]);
                    hi = std::max(hi, c.localMass[i]);
                }
            l.push_back({{"k", ks[i]},
                         {"without", finiteOrNull(b.localMassWithout[i])},
                         {"with", b.mean ? finiteOrNull(b.mean->localMass[i]) : json(nullptr)},
                         {"with_min", finiteOrNull(lo)},
                         {"with_max", finiteOrNull(hi)},
                         {"abs_fraction_without", finiteOrNull(b.localAbsFractionWithout[i])},
                         {"abs_fraction_with", b.mean ? finiteOrNull(b.mean->localAbsFraction[i]) : json(nullptr)}});
        }
        j["local"] = l;
    }
    j["branch_share"] = {{"mean_over_channels", finiteOrNull(meanBranchShare(b))},
                         {"mean_channel", b.mean ? finiteOrNull(b.mean->branchShare) : json(nullptr)}};
    json channels = json::array();
    for (const auto& c : b.channels) channels.push_back(branchChannelJson(c, ks));
    j["channels"] = std::move(channels);
    if (b.mean) j["mean_channel"] = branchChannelJson(*b.mean, ks);
    return j;
}

json distributionJson(const QueryDistribution& d) {
    json q = json::array();
    for (double v : d.quantiles) q.push_back(finiteOrNull(v));
    return {{"mean", finiteOrNull(d.mean)}, {"quantiles", q}, {"queries", d.count}};
}

json distanceJson(const DistanceResult& d) {
    json j = {{"reference", d.reference},
              {"queries", d.queries},
              {"signed_queries", d.signedQueries},
              {"total_variation", distributionJson(d.totalVariation)},
              {"jensen_shannon", distributionJson(d.jensenShannon)}};
    if (d.hasOutput) {
        j["output_relative_error"] = finiteOrNull(d.outputRelativeError);
        if (d.outputRelativeErrorWithBranch)
            j["output_relative_error_with_branch"] = finiteOrNull(*d.outputRelativeErrorWithBranch);
        j["output_cosine"] = distributionJson(d.outputCosine);
    }
    return j;
}

json statsJson(const HeadStatistics& s, bool perQuery, const std::vector<int>& ks) {
    json j;
    if (!s.registered.empty()) {
        json registered = json::object();
        for (const auto& [key, value] : s.registered) registered[key] = finiteOrNull(value);
        j["registered"] = registered;
    }
    j["tokens"] = s.tokens;
    if (s.keys != s.tokens && s.keys > 0) j["keys"] = s.keys;  // spatial reduction only: records stay as they were
    j["flagged_rows"] = s.flaggedRows;
    if (s.spectrum) {
        const auto& sp = *s.spectrum;
        j["rank"] = {{"rank", sp.rank},
                     {"effective_rank", finiteOrNull(sp.effectiveRank)},
                     {"size", sp.size},
                     {"relative_tolerance", sp.relativeTolerance},
                     {"tolerance", finiteOrNull(sp.tolerance)},
                     {"method", sp.method},
                     {"singular_values", vectorJson(sp.singularValues)}};
        if (!sp.windowRanks.empty()) j["rank"]["window_ranks"] = sp.windowRanks;
        if (sp.bound > 0) {
            j["rank"]["bound"] = sp.bound;
            j["rank"]["bound_rule"] = sp.boundRule;
        }
    }
    if (!s.local.empty()) {
        json a = json::array();
        for (const auto& l : s.local) {
            json e = {{"k", l.k},
                      {"mean", finiteOrNull(l.mean)},
                      {"uniform_baseline", l.uniformBaseline},
                      {"paper_baseline", l.paperBaseline},
                      {"admissible_baseline", finiteOrNull(l.admissibleBaseline)},
                      {"x_uniform", finiteOrNull(timesUniform(l.mean, l.admissibleBaseline))},
                      {"queries", l.queries}};
            if (l.outputShare) {
                e["output_share"] = finiteOrNull(*l.outputShare);
                e["output_queries"] = l.outputQueries;
            }
            if (perQuery) e["per_query"] = vectorJson(l.perQuery);
            a.push_back(e);
        }
        j["local"] = a;
    }
    if (s.entropy) {
        const auto& f = *s.entropy;
        j["entropy"] = {{"mean_entropy", finiteOrNull(f.meanEntropy)},
                        {"normalised_entropy", finiteOrNull(f.meanNormalisedEntropy)},
                        {"normalised_entropy_admissible", finiteOrNull(f.meanAdmissibleNormalisedEntropy)},
                        {"admissible_keys_mean", finiteOrNull(f.meanAdmissibleKeys)},
                        {"entropy_abs", finiteOrNull(f.meanEntropyAbs)},
                        {"normalised_entropy_abs_admissible", finiteOrNull(f.meanAdmissibleNormalisedEntropyAbs)},
                        {"max_abs_share", finiteOrNull(f.meanMaxAbsShare)},
                        {"negative_weight_fraction", finiteOrNull(f.negativeWeightFraction)},
                        {"max_weight", finiteOrNull(f.meanMaxWeight)},
                        {"negative_row_fraction", finiteOrNull(f.negativeRowFraction)},
                        {"negative_mass_total", finiteOrNull(f.totalNegativeMass)},
                        {"negative_mass_per_row", finiteOrNull(f.meanNegativeMass)},
                        {"rows", f.rows},
                        {"flagged_rows", f.flaggedRows}};
    }
    if (s.confusion) {
        const auto& c = *s.confusion;
        j["confusion"] = {{"confused_pairs", c.confusedPairs},
                          {"identical_query_pairs", c.identicalQueryPairs},
                          {"tau", c.tau},
                          {"query_tolerance", c.queryTolerance},
                          {"confused_pairs_far", c.confusedPairsFar},
                          {"query_relative_floor", c.queryRelativeFloor},
                          {"method", c.method}};
    }
    if (s.rayProbe) {
        const auto& p = *s.rayProbe;
        j["ray_probe"] = {{"factors", p.factors},
                          {"total_variation_mean", vectorJson(p.totalVariationMean)},
                          {"equal_fraction", finiteOrNull(p.equalFraction)},
                          {"queries", p.queries}};
    }
    if (s.magnitude) {
        const auto& m = *s.magnitude;
        j["magnitude"] = {{"factors", m.factors},
                          {"max_weight", vectorJson(m.maxWeight)},
                          {"entropy", vectorJson(m.entropy)},
                          {"top_mass", vectorJson(m.topMass)},
                          {"ratio", vectorJson(m.ratio)},
                          {"spread", vectorJson(m.spread)},
                          {"queries_averaged", m.queriesAveraged}};
    }
    if (s.localBranch) j["local_branch"] = localBranchJson(*s.localBranch, s, ks);
    if (s.distance) j["distance"] = distanceJson(*s.distance);
    return j;
}

json meansState(const std::map<int, FiniteMean>& means) {
    json j = json::object();
    for (const auto& [k, m] : means) j[std::to_string(k)] = m.state();
    return j;
}

std::map<int, FiniteMean> meansFromState(const json& j) {
    std::map<int, FiniteMean> out;
    for (const auto& [k, v] : j.items()) out[std::stoi(k)] = FiniteMean::fromState(v);
    return out;
}

void mergeMeans(std::map<int, FiniteMean>& into, const std::map<int, FiniteMean>& from) {
    for (const auto& [k, m] : from) into[k].merge(m);
}

json curveState(const std::vector<FiniteMean>& curve) {
    json j = json::array();
    for (const FiniteMean& m : curve) j.push_back(m.state());
    return j;
}

std::vector<FiniteMean> curveFromState(const json& j) {
    std::vector<FiniteMean> out;
    for (const json& v : j) out.push_back(FiniteMean::fromState(v));
    return out;
}

void mergeCurve(std::vector<FiniteMean>& into, const std::vector<FiniteMean>& from) {
    if (into.empty()) into.resize(from.size());
    if (from.size() != into.size()) throw std::invalid_argument("magnitude curves of different lengths");
    for (std::size_t i = 0; i < from.size(); ++i) into[i].merge(from[i]);
}

// The means and totals of a set of records (one paradigm, or one paradigm and layer), from the
// statistics as analyzeHead made them. Non-finite values (null in a report) are left out of means.
struct Aggregate {
    std::int64_t records = 0;
    FiniteMean rank, effectiveRank, entropy, normalisedEntropy, maxWeight, negativeRows, negativeMass;
    FiniteMean rankBound;  // records whose spectrum has a bound (none in reports before it)
    std::map<int, FiniteMean> local, localUniform, localPaper, localOutputShare;
    // Over the rows' admissible keys (admissible_keys.h). A summary state written before they existed
    // has none: a merge with it cannot know them for its records, so they are null (incomplete).
    FiniteMean admissibleNormalisedEntropy;
    // On |A| and the share of negative weights (signed rows, issue 46 item 3); absent in older states.
    FiniteMean entropyAbs, admissibleNormalisedEntropyAbs, maxAbsShare, negativeWeights;
    std::map<int, FiniteMean> localAdmissible, localTimesUniform;
    // True when a merged summary state predates these yardsticks (admissible keys, |A|): their means
    // would cover only some records, so the summary gives null for them.
    bool yardsticksIncomplete = false;
    std::int64_t confused = 0, flagged = 0;
    std::int64_t confusedFar = 0;   // confused pairs with far-apart queries (ConfusionOptions::queryRelativeFloor)
    FiniteMean rayEqual;            // the ray probe's equal fraction
    std::vector<FiniteMean> rayTv;  // per kRayProbeFactors
    bool hasConfusion = false;
    std::vector<FiniteMean> magMax, magEntropy, magTop, magLogRatio, magSpread;
    // Some magnitude curve came without its spread (a record or state from before it): the merged
    // spread would cover a hidden subset, so it is null instead.
    bool magSpreadMissing = false;
    std::vector<double> factors;
    // Local branch (records that carry one).
    std::int64_t branchRecords = 0;
    FiniteMean branchRankWithout, branchRankMedian, branchRankMeanChannel, branchShare;
    int branchRankMin = INT_MAX, branchRankMax = INT_MIN;
    std::map<int, FiniteMean> branchLocalWithout, branchLocalWith, branchAbsWithout, branchAbsWith;
    // Distance to the reference (records that carry one).
    std::int64_t distanceRecords = 0;
    FiniteMean totalVariation, jensenShannon, outputError, outputErrorWithBranch, outputCosine;
    // The queries behind those means: compared (ok under both paradigms, total variation's) and, of
    // them, the ones Jensen-Shannon is taken over (rows without a negative weight). A state from
    // before them cannot say: coverage unknown.
    std::int64_t distanceQueries = 0, jensenShannonQueries = 0;
    bool distanceQueriesMissing = false;
    std::string reference;
    // Registered statistics (registered_statistics.h), by key.
    std::map<std::string, FiniteMean> registered;

    void add(const HeadStatistics& s) {
        constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
        ++records;
        for (const auto& [key, value] : s.registered) registered[key].add(value);
        if (s.distance) {
            const DistanceResult& d = *s.distance;
            ++distanceRecords;
            reference = d.reference;
            distanceQueries += std::int64_t(d.queries);
            jensenShannonQueries += std::int64_t(d.jensenShannon.count);
            totalVariation.add(d.totalVariation.mean);
            jensenShannon.add(d.jensenShannon.mean);
            if (d.hasOutput) {
                outputError.add(d.outputRelativeError);
                if (d.outputRelativeErrorWithBranch) outputErrorWithBranch.add(*d.outputRelativeErrorWithBranch);
                outputCosine.add(d.outputCosine.mean);
            }
        }
        if (s.localBranch) {
            const LocalBranchResult& b = *s.localBranch;
            ++branchRecords;
            if (b.mean && b.mean->spectrum) {
                branchRankWithout.add(s.spectrum ? double(s.spectrum->rank) : kNone);
                branchRankMedian.add(b.rankMedian);
                branchRankMeanChannel.add(double(b.mean->spectrum->rank));
                branchRankMin = std::min(branchRankMin, b.rankMin);
                branchRankMax = std::max(branchRankMax, b.rankMax);
            }
            // The branch's local masses are per AnalysisOptions::localK, as A's own (s.local).
            for (std::size_t i = 0; i < b.localMassWithout.size() && i < s.local.size(); ++i) {
                const int k = s.local[i].k;
                branchLocalWithout[k].add(b.localMassWithout[i]);
                branchLocalWith[k].add(b.mean ? b.mean->localMass[i] : kNone);
                branchAbsWithout[k].add(b.localAbsFractionWithout[i]);
                branchAbsWith[k].add(b.mean ? b.mean->localAbsFraction[i] : kNone);
            }
            branchShare.add(meanBranchShare(b));
        }
        flagged += s.flaggedRows;
        if (s.spectrum) {
            rank.add(double(s.spectrum->rank));
            if (s.spectrum->bound > 0) rankBound.add(double(s.spectrum->bound));
            effectiveRank.add(s.spectrum->effectiveRank);
        }
        for (const LocalMassResult& l : s.local) {
            local[l.k].add(l.mean);
            localUniform[l.k].add(l.uniformBaseline);
            localAdmissible[l.k].add(l.admissibleBaseline);
            localTimesUniform[l.k].add(timesUniform(l.mean, l.admissibleBaseline));
            localPaper[l.k].add(l.paperBaseline);
            if (l.outputShare) localOutputShare[l.k].add(*l.outputShare);
        }
        if (s.entropy) {
            const EntropyResult& e = *s.entropy;
            entropy.add(e.meanEntropy);
            normalisedEntropy.add(e.meanNormalisedEntropy);
            admissibleNormalisedEntropy.add(e.meanAdmissibleNormalisedEntropy);
            entropyAbs.add(e.meanEntropyAbs);
            admissibleNormalisedEntropyAbs.add(e.meanAdmissibleNormalisedEntropyAbs);
            maxAbsShare.add(e.meanMaxAbsShare);
            negativeWeights.add(e.negativeWeightFraction);
            maxWeight.add(e.meanMaxWeight);
            negativeRows.add(e.negativeRowFraction);
            negativeMass.add(e.meanNegativeMass);
        }
        if (s.confusion) {
            hasConfusion = true;
            confused += s.confusion->confusedPairs;
            confusedFar += s.confusion->confusedPairsFar;
        }
        if (s.rayProbe) {
            rayEqual.add(s.rayProbe->equalFraction);
            if (rayTv.empty()) rayTv.resize(s.rayProbe->totalVariationMean.size());
            for (std::size_t f = 0; f < rayTv.size() && f < s.rayProbe->totalVariationMean.size(); ++f)
                rayTv[f].add(s.rayProbe->totalVariationMean[f]);
        }
        if (s.magnitude) {
            const MagnitudeCurve& m = *s.magnitude;
            const std::size_t points = m.factors.size();
            if (magMax.empty()) {
                magMax.resize(points);
                magEntropy.resize(points);
                magTop.resize(points);
                magLogRatio.resize(points);
                magSpread.resize(points);
                factors = m.factors;
            }
            magSpreadMissing = magSpreadMissing || m.spread.size() != points;
            for (std::size_t i = 0; i < points && i < magMax.size(); ++i) {
                magMax[i].add(m.maxWeight[i]);
                magEntropy[i].add(m.entropy[i]);
                magTop[i].add(m.topMass[i]);
                if (std::isfinite(m.ratio[i]) && m.ratio[i] > 0) magLogRatio[i].add(std::log(m.ratio[i]));
                if (i < m.spread.size()) magSpread[i].add(m.spread[i]);
            }
        }
    }

    // Adds another set of records' aggregate: the same as adding its records here.
    void merge(const Aggregate& o) {
        records += o.records;
        for (auto [mine, theirs] : {std::pair{&rank, &o.rank},
                                    {&effectiveRank, &o.effectiveRank},
                                    {&entropy, &o.entropy},
                                    {&normalisedEntropy, &o.normalisedEntropy},
                                    {&rankBound, &o.rankBound},
                                    {&admissibleNormalisedEntropy, &o.admissibleNormalisedEntropy},
                                    {&entropyAbs, &o.entropyAbs},
                                    {&admissibleNormalisedEntropyAbs, &o.admissibleNormalisedEntropyAbs},
                                    {&maxAbsShare, &o.maxAbsShare},
                                    {&negativeWeights, &o.negativeWeights},
                                    {&maxWeight, &o.maxWeight},
                                    {&negativeRows, &o.negativeRows},
                                    {&negativeMass, &o.negativeMass},
                                    {&branchRankWithout, &o.branchRankWithout},
                                    {&branchRankMedian, &o.branchRankMedian},
                                    {&branchRankMeanChannel, &o.branchRankMeanChannel},
                                    {&branchShare, &o.branchShare},
                                    {&totalVariation, &o.totalVariation},
                                    {&jensenShannon, &o.jensenShannon},
                                    {&outputError, &o.outputError},
                                    {&outputErrorWithBranch, &o.outputErrorWithBranch},
                                    {&outputCosine, &o.outputCosine}})
            mine->merge(*theirs);
        for (auto [mine, theirs] : {std::pair{&local, &o.local},
                                    {&localUniform, &o.localUniform},
                                    {&localAdmissible, &o.localAdmissible},
                                    {&localTimesUniform, &o.localTimesUniform},
                                    {&localPaper, &o.localPaper},
                                    {&localOutputShare, &o.localOutputShare},
                                    {&branchLocalWithout, &o.branchLocalWithout},
                                    {&branchLocalWith, &o.branchLocalWith},
                                    {&branchAbsWithout, &o.branchAbsWithout},
                                    {&branchAbsWith, &o.branchAbsWith}})
            mergeMeans(*mine, *theirs);
        yardsticksIncomplete = yardsticksIncomplete || o.yardsticksIncomplete;
        confused += o.confused;
        confusedFar += o.confusedFar;
        rayEqual.merge(o.rayEqual);
        if (!o.rayTv.empty()) mergeCurve(rayTv, o.rayTv);
        flagged += o.flagged;
        hasConfusion = hasConfusion || o.hasConfusion;
        if (!o.magMax.empty()) {
            if (!factors.empty() && factors != o.factors) throw std::invalid_argument("different magnitude factors");
            factors = o.factors;
            mergeCurve(magMax, o.magMax);
            mergeCurve(magEntropy, o.magEntropy);
            mergeCurve(magTop, o.magTop);
            mergeCurve(magLogRatio, o.magLogRatio);
            mergeCurve(magSpread, o.magSpread);
            magSpreadMissing = magSpreadMissing || o.magSpreadMissing;
        }
        branchRecords += o.branchRecords;
        branchRankMin = std::min(branchRankMin, o.branchRankMin);
        branchRankMax = std::max(branchRankMax, o.branchRankMax);
        distanceRecords += o.distanceRecords;
        distanceQueries += o.distanceQueries;
        jensenShannonQueries += o.jensenShannonQueries;
        distanceQueriesMissing = distanceQueriesMissing || o.distanceQueriesMissing;
        if (!o.reference.empty()) reference = o.reference;
        for (const auto& [key, mean] : o.registered) registered[key].merge(mean);
    }

    // Every running sum and count, for summary_state (exact merging of runs without JSON records).
    // withMagnitude: the mean curves too (only the per-paradigm summary shows them).
    json state(bool withMagnitude) const {
        json j;
        j["records"] = records;
        j["means"] = {{"rank", rank.state()},
                      {"effective_rank", effectiveRank.state()},
                      {"entropy", entropy.state()},
                      {"normalised_entropy", normalisedEntropy.state()},
                      {"normalised_entropy_admissible", admissibleNormalisedEntropy.state()},
                      {"rank_bound", rankBound.state()},
                      {"entropy_abs", entropyAbs.state()},
                      {"normalised_entropy_abs_admissible", admissibleNormalisedEntropyAbs.state()},
                      {"max_abs_share", maxAbsShare.state()},
                      {"negative_weight_fraction", negativeWeights.state()},
                      {"max_weight", maxWeight.state()},
                      {"negative_rows", negativeRows.state()},
                      {"negative_mass", negativeMass.state()},
                      {"branch_rank_without", branchRankWithout.state()},
                      {"branch_rank_median", branchRankMedian.state()},
                      {"branch_rank_mean_channel", branchRankMeanChannel.state()},
                      {"branch_share", branchShare.state()},
                      {"total_variation", totalVariation.state()},
                      {"jensen_shannon", jensenShannon.state()},
                      {"output_error", outputError.state()},
                      {"output_error_with_branch", outputErrorWithBranch.state()},
                      {"output_cosine", outputCosine.state()}};
        j["per_k"] = {{"local", meansState(local)},
                      {"local_uniform", meansState(localUniform)},
                      {"local_admissible", meansState(localAdmissible)},
                      {"local_x_uniform", meansState(localTimesUniform)},
                      {"local_paper", meansState(localPaper)},
                      {"local_output_share", meansState(localOutputShare)},
                      {"branch_local_without", meansState(branchLocalWithout)},
                      {"branch_local_with", meansState(branchLocalWith)},
                      {"branch_abs_without", meansState(branchAbsWithout)},
                      {"branch_abs_with", meansState(branchAbsWith)}};
        if (yardsticksIncomplete) j["yardsticks_incomplete"] = true;
        j["confused"] = confused;
        j["confused_far"] = confusedFar;
        j["ray_probe"] = {{"equal_fraction", rayEqual.state()}, {"total_variation", curveState(rayTv)}};
        j["flagged"] = flagged;
        j["has_confusion"] = hasConfusion;
        if (withMagnitude) {
            j["magnitude"] = {{"factors", factors},
                              {"max_weight", curveState(magMax)},
                              {"entropy", curveState(magEntropy)},
                              {"top_mass", curveState(magTop)},
                              {"log_ratio", curveState(magLogRatio)}};
            if (!magSpreadMissing) j["magnitude"]["spread"] = curveState(magSpread);
        }
        j["branch_records"] = branchRecords;
        j["branch_rank_min"] = branchRankMin == INT_MAX ? json(nullptr) : json(branchRankMin);
        j["branch_rank_max"] = branchRankMax == INT_MIN ? json(nullptr) : json(branchRankMax);
        j["distance_records"] = distanceRecords;
        if (!distanceQueriesMissing)
            j["distance_queries"] = {{"compared", distanceQueries}, {"jensen_shannon", jensenShannonQueries}};
        j["reference"] = reference;
        if (!registered.empty()) {
            json r = json::object();
            for (const auto& [key, mean] : registered) r[key] = mean.state();
            j["registered"] = r;
        }
        return j;
    }

    // The inverse of state(); std::invalid_argument or json::exception on a malformed state.
    static Aggregate fromState(const json& j) {
        Aggregate a;
        a.records = j.at("records").get<std::int64_t>();
        const json& m = j.at("means");
        a.rank = FiniteMean::fromState(m.at("rank"));
        a.effectiveRank = FiniteMean::fromState(m.at("effective_rank"));
        a.entropy = FiniteMean::fromState(m.at("entropy"));
        a.normalisedEntropy = FiniteMean::fromState(m.at("normalised_entropy"));
        // States written before the admissible keys: those means are unknown for these records.
        a.yardsticksIncomplete =
            j.value("yardsticks_incomplete", false) || !m.contains("normalised_entropy_admissible");
        if (m.contains("rank_bound")) a.rankBound = FiniteMean::fromState(m.at("rank_bound"));
        // States before the |A| statistics: those means are unknown for their records.
        for (auto [key, mean] : {std::pair{"entropy_abs", &a.entropyAbs},
                                 {"normalised_entropy_abs_admissible", &a.admissibleNormalisedEntropyAbs},
                                 {"max_abs_share", &a.maxAbsShare},
                                 {"negative_weight_fraction", &a.negativeWeights}}) {
            if (m.contains(key))
                *mean = FiniteMean::fromState(m.at(key));
            else
                a.yardsticksIncomplete = true;
        }
        if (m.contains("normalised_entropy_admissible"))
            a.admissibleNormalisedEntropy = FiniteMean::fromState(m.at("normalised_entropy_admissible"));
        a.maxWeight = FiniteMean::fromState(m.at("max_weight"));
        a.negativeRows = FiniteMean::fromState(m.at("negative_rows"));
        a.negativeMass = FiniteMean::fromState(m.at("negative_mass"));
        a.branchRankWithout = FiniteMean::fromState(m.at("branch_rank_without"));
        a.branchRankMedian = FiniteMean::fromState(m.at("branch_rank_median"));
        a.branchRankMeanChannel = FiniteMean::fromState(m.at("branch_rank_mean_channel"));
        a.branchShare = FiniteMean::fromState(m.at("branch_share"));
        a.totalVariation = FiniteMean::fromState(m.at("total_variation"));
        a.jensenShannon = FiniteMean::fromState(m.at("jensen_shannon"));
        a.outputError = FiniteMean::fromState(m.at("output_error"));
        a.outputErrorWithBranch = FiniteMean::fromState(m.at("output_error_with_branch"));
        a.outputCosine = FiniteMean::fromState(m.at("output_cosine"));
        const json& k = j.at("per_k");
        a.local = meansFromState(k.at("local"));
        a.localUniform = meansFromState(k.at("local_uniform"));
        if (k.contains("local_admissible") && k.contains("local_x_uniform")) {
            a.localAdmissible = meansFromState(k.at("local_admissible"));
            a.localTimesUniform = meansFromState(k.at("local_x_uniform"));
            for (const auto* perK : {&a.localAdmissible, &a.localTimesUniform})
                for (const auto& [kk, mean] : a.local)
                    if (!perK->count(kk)) throw std::invalid_argument("per_k lacks window size " + std::to_string(kk));
        } else {
            a.yardsticksIncomplete = true;
        }
        a.localPaper = meansFromState(k.at("local_paper"));
        a.localOutputShare = meansFromState(k.at("local_output_share"));
        a.branchLocalWithout = meansFromState(k.at("branch_local_without"));
        a.branchLocalWith = meansFromState(k.at("branch_local_with"));
        a.branchAbsWithout = meansFromState(k.at("branch_abs_without"));
        a.branchAbsWith = meansFromState(k.at("branch_abs_with"));
        for (const auto* perK : {&a.localUniform, &a.localPaper})
            for (const auto& [kk, mean] : a.local)
                if (!perK->count(kk)) throw std::invalid_argument("per_k lacks window size " + std::to_string(kk));
        for (const auto* perK : {&a.branchLocalWith, &a.branchAbsWithout, &a.branchAbsWith})
            for (const auto& [kk, mean] : a.branchLocalWithout)
                if (!perK->count(kk)) throw std::invalid_argument("per_k lacks window size " + std::to_string(kk));
        a.confused = j.at("confused").get<std::int64_t>();
        if (j.contains("confused_far") && j.contains("ray_probe")) {
            a.confusedFar = j.at("confused_far").get<std::int64_t>();
            a.rayEqual = FiniteMean::fromState(j.at("ray_probe").at("equal_fraction"));
            a.rayTv = curveFromState(j.at("ray_probe").at("total_variation"));
            if (a.confusedFar < 0 || a.confusedFar > a.confused)
                throw std::invalid_argument("confused_far outside [0, confused]");
        } else {
            a.yardsticksIncomplete = true;
        }
        a.flagged = j.at("flagged").get<std::int64_t>();
        a.hasConfusion = j.at("has_confusion").get<bool>();
        const json& mag = j.contains("magnitude") ? j["magnitude"]
                                                  : json::object({{"factors", json::array()},
                                                                  {"max_weight", json::array()},
                                                                  {"entropy", json::array()},
                                                                  {"top_mass", json::array()},
                                                                  {"log_ratio", json::array()}});
        a.factors = mag.at("factors").get<std::vector<double>>();
        a.magMax = curveFromState(mag.at("max_weight"));
        a.magEntropy = curveFromState(mag.at("entropy"));
        a.magTop = curveFromState(mag.at("top_mass"));
        a.magLogRatio = curveFromState(mag.at("log_ratio"));
        if (mag.contains("spread"))
            a.magSpread = curveFromState(mag["spread"]);
        else  // a state from before the spread: its curves merge, the spread does not
            a.magSpread.resize(a.magMax.size());
        a.magSpreadMissing = !mag.contains("spread") && !a.magMax.empty();
        for (const auto* curve : {&a.magMax, &a.magEntropy, &a.magTop, &a.magLogRatio, &a.magSpread})
            if (curve->size() != a.factors.size())
                throw std::invalid_argument("a magnitude curve's length differs from its factors'");
        a.branchRecords = j.at("branch_records").get<std::int64_t>();
        a.branchRankMin = j.at("branch_rank_min").is_null() ? INT_MAX : j["branch_rank_min"].get<int>();
        a.branchRankMax = j.at("branch_rank_max").is_null() ? INT_MIN : j["branch_rank_max"].get<int>();
        a.distanceRecords = j.at("distance_records").get<std::int64_t>();
        a.reference = j.at("reference").get<std::string>();
        if (j.contains("registered"))  // states of reports without registered statistics have none
            for (const auto& [key, mean] : j["registered"].items()) a.registered[key] = FiniteMean::fromState(mean);
        if (j.contains("distance_queries")) {
            a.distanceQueries = j.at("distance_queries").at("compared").get<std::int64_t>();
            a.jensenShannonQueries = j.at("distance_queries").at("jensen_shannon").get<std::int64_t>();
            if (a.distanceQueries < 0 || a.jensenShannonQueries < 0 || a.jensenShannonQueries > a.distanceQueries)
                throw std::invalid_argument("distance_queries: jensen_shannon outside [0, compared]");
        } else {
            a.distanceQueriesMissing = a.distanceRecords > 0;
        }
        if (a.records < 0 || a.branchRecords < 0 || a.distanceRecords < 0 || a.confused < 0 || a.flagged < 0)
            throw std::invalid_argument("a negative count");
        return a;
    }

    // The running mean of one statistic (nullptr: no value of window size k was added).
    const FiniteMean* meanOf(ReportSummary::Statistic statistic, int k) const {
        using S = ReportSummary::Statistic;
        auto ofK = [k](const std::map<int, FiniteMean>& perK) -> const FiniteMean* {
            const auto it = perK.find(k);
            return it == perK.end() ? nullptr : &it->second;
        };
        switch (statistic) {
            case S::Rank:
                return &rank;
            case S::EffectiveRank:
                return &effectiveRank;
            case S::LocalMass:
                return ofK(local);
            case S::LocalUniformBaseline:
                return ofK(localUniform);
            case S::LocalPaperBaseline:
                return ofK(localPaper);
            case S::LocalAdmissibleBaseline:
                return yardsticksIncomplete ? nullptr : ofK(localAdmissible);
            case S::LocalTimesUniform:
                return yardsticksIncomplete ? nullptr : ofK(localTimesUniform);
            case S::AdmissibleNormalisedEntropy:
                return yardsticksIncomplete ? nullptr : &admissibleNormalisedEntropy;
            case S::AdmissibleNormalisedEntropyAbs:
                return yardsticksIncomplete ? nullptr : &admissibleNormalisedEntropyAbs;
            case S::NegativeWeightFraction:
                return yardsticksIncomplete ? nullptr : &negativeWeights;
            case S::LocalOutputShare:
                return ofK(localOutputShare);
            case S::Entropy:
                return &entropy;
            case S::NormalisedEntropy:
                return &normalisedEntropy;
            case S::MaxWeight:
                return &maxWeight;
            case S::NegativeRowFraction:
                return &negativeRows;
            case S::NegativeMassPerRow:
                return &negativeMass;
            case S::TotalVariation:
                return &totalVariation;
            case S::JensenShannon:
                return &jensenShannon;
            case S::OutputRelativeError:
                return &outputError;
            case S::OutputRelativeErrorWithBranch:
                return &outputErrorWithBranch;
            case S::OutputCosine:
                return &outputCosine;
        }
        return nullptr;
    }
    double mean(ReportSummary::Statistic statistic, int k) const {
        const FiniteMean* m = meanOf(statistic, k);
        return m ? m->mean() : std::numeric_limits<double>::quiet_NaN();
    }

    json toJson() const {
        json j;
        j["records"] = records;
        j["rank_mean"] = rank.value();
        j["effective_rank_mean"] = effectiveRank.value();
        // Mean of the records' bounds, over those that have one (rank_bound_records of rank's records).
        j["rank_bound_mean"] = rankBound.value();
        j["rank_bound_records"] = rankBound.n;
        json l = json::object();
        for (const auto& [k, m] : local) {
            const auto admissible = [&](const std::map<int, FiniteMean>& perK) {
                const auto it = perK.find(k);
                return yardsticksIncomplete || it == perK.end() ? json(nullptr) : it->second.value();
            };
            l[std::to_string(k)] = {{"mean", m.value()},
                                    {"uniform_baseline", localUniform.at(k).value()},
                                    {"paper_baseline", localPaper.at(k).value()},
                                    {"admissible_baseline", admissible(localAdmissible)},
                                    {"x_uniform", admissible(localTimesUniform)}};
            if (const auto it = localOutputShare.find(k); it != localOutputShare.end())
                l[std::to_string(k)]["output_share"] = it->second.value();
        }
        j["local"] = l;
        j["entropy_mean"] = entropy.value();
        j["normalised_entropy_mean"] = normalisedEntropy.value();
        j["normalised_entropy_admissible_mean"] =
            yardsticksIncomplete ? json(nullptr) : admissibleNormalisedEntropy.value();
        j["entropy_abs_mean"] = yardsticksIncomplete ? json(nullptr) : entropyAbs.value();
        j["normalised_entropy_abs_admissible_mean"] =
            yardsticksIncomplete ? json(nullptr) : admissibleNormalisedEntropyAbs.value();
        j["max_abs_share_mean"] = yardsticksIncomplete ? json(nullptr) : maxAbsShare.value();
        j["negative_weight_fraction_mean"] = yardsticksIncomplete ? json(nullptr) : negativeWeights.value();
        j["max_weight_mean"] = maxWeight.value();
        j["negative_row_fraction_mean"] = negativeRows.value();
        j["negative_mass_per_row_mean"] = negativeMass.value();
        j["confused_pairs_total"] = hasConfusion ? json(confused) : json(nullptr);
        j["confused_pairs_far_total"] = hasConfusion && !yardsticksIncomplete ? json(confusedFar) : json(nullptr);
        if (!rayTv.empty() && !yardsticksIncomplete) {
            json tv = json::array();
            for (const FiniteMean& m : rayTv) tv.push_back(m.value());
            j["ray_probe_mean"] = {
                {"factors", std::vector<double>(std::begin(kRayProbeFactors), std::end(kRayProbeFactors))},
                {"total_variation_mean", tv},
                {"equal_fraction_mean", rayEqual.value()}};
        }
        j["flagged_rows_total"] = flagged;
        if (branchRecords > 0) {
            json b;
            b["records"] = branchRecords;
            b["rank_without_mean"] = branchRankWithout.value();
            b["rank_median_mean"] = branchRankMedian.value();
            b["rank_mean_channel_mean"] = branchRankMeanChannel.value();
            b["rank_min"] = branchRankMin == INT_MAX ? json(nullptr) : json(branchRankMin);
            b["rank_max"] = branchRankMax == INT_MIN ? json(nullptr) : json(branchRankMax);
            json l = json::object();
            for (const auto& [k, m] : branchLocalWithout)
                l[std::to_string(k)] = {{"without", m.value()},
                                        {"with", branchLocalWith.at(k).value()},
                                        {"abs_fraction_without", branchAbsWithout.at(k).value()},
                                        {"abs_fraction_with", branchAbsWith.at(k).value()}};
            b["local"] = l;
            b["branch_share_mean"] = branchShare.value();
            j["local_branch"] = b;
        }
        if (distanceRecords > 0) {
            // Means over records of each record's mean over queries.
            json d;
            d["reference"] = reference;
            d["records"] = distanceRecords;
            d["total_variation_mean"] = totalVariation.value();
            d["jensen_shannon_mean"] = jensenShannon.value();
            // What the Jensen-Shannon mean covers: the queries it is taken over (rows without a
            // negative weight) of those compared; null where a merged state from before it cannot say.
            d["compared_queries"] = distanceQueriesMissing ? json(nullptr) : json(distanceQueries);
            d["jensen_shannon_queries"] = distanceQueriesMissing ? json(nullptr) : json(jensenShannonQueries);
            d["jensen_shannon_coverage"] = distanceQueriesMissing || distanceQueries == 0
                                               ? json(nullptr)
                                               : json(double(jensenShannonQueries) / double(distanceQueries));
            d["output_relative_error_mean"] = outputError.value();
            d["output_relative_error_with_branch_mean"] = outputErrorWithBranch.value();
            d["output_cosine_mean"] = outputCosine.value();
            j["distance"] = d;
        }
        if (!magMax.empty()) {
            json m;
            m["factors"] = factors;
            json mx = json::array(), en = json::array(), tp = json::array(), ra = json::array(), sp = json::array();
            for (std::size_t i = 0; i < magMax.size(); ++i) {
                mx.push_back(magMax[i].value());
                en.push_back(magEntropy[i].value());
                tp.push_back(magTop[i].value());
                sp.push_back(magSpreadMissing ? json(nullptr) : magSpread[i].value());
                ra.push_back(magLogRatio[i].n ? json(std::exp(magLogRatio[i].sum / double(magLogRatio[i].n)))
                                              : json(nullptr));
            }
            m["max_weight"] = mx;
            m["entropy"] = en;
            m["top_mass"] = tp;
            m["ratio_geometric_mean"] = ra;
            m["spread"] = sp;
            j["magnitude_mean"] = m;
        }
        if (!registered.empty()) {
            json r = json::object();
            for (const auto& [key, mean] : registered) r[key] = mean.value();
            j["registered_means"] = r;
        }
        return j;
    }
};

std::string fmt(const json& v, int precision = 3) {
    if (!v.is_number()) return "-";
    std::ostringstream s;
    s << std::setprecision(precision) << std::fixed << v.get<double>();
    return s.str();
}

// ---- Validation of merge inputs ------------------------------------------------------------------
// Every report given to merge is checked against the report schema (resources/analysis.schema.json:
// the types and ranges of the fields that merge and its summary read) and against its own dump
// description (input.dump): image indices below the dump's image count, layer names and positions
// among its layers, heads below the layer's head count, paradigms among the report's paradigms.
// Messages name the file, the record and the field.

std::string shown(const json& v) { return printableText(v.dump(), 80); }

class ReportChecker {
public:
    explicit ReportChecker(std::string file) : file_(std::move(file)) {}

    [[noreturn]] void fail(const std::string& where, const std::string& what) const {
        throwInput("merge: " + printableText(file_) + ": " + where + ": " + what +
                   "; merge takes reports written by attnlens-cli analyze");
    }

    const json& field(const json& object, const char* key, const std::string& where) const {
        if (!object.is_object()) fail(where, "must be an object, got " + shown(object));
        const auto it = object.find(key);
        if (it == object.end()) fail(where, "the field \"" + std::string(key) + "\" is missing");
        return *it;
    }
    std::int64_t integer(const json& v, const std::string& where, std::int64_t min,
                         std::int64_t max = std::numeric_limits<std::int64_t>::max()) const {
        const bool ok = v.is_number_integer() &&
                        (v.is_number_unsigned() ? v.get<std::uint64_t>() <= std::uint64_t(max)
                                                : v.get<std::int64_t>() >= min && v.get<std::int64_t>() <= max);
        if (!ok) {
            const std::string range = max == std::numeric_limits<std::int64_t>::max()
                                          ? ">= " + std::to_string(min)
                                          : "from " + std::to_string(min) + " to " + std::to_string(max);
            fail(where, "must be an integer " + range + ", got " + shown(v));
        }
        return v.get<std::int64_t>();
    }
    void number(const json& v, const std::string& where) const {
        if (!v.is_number()) fail(where, "must be a number, got " + shown(v));
    }
    // A number, or null where the value is not finite (the schema's "num").
    void numberOrNull(const json& v, const std::string& where) const {
        if (!v.is_number() && !v.is_null()) fail(where, "must be a number or null, got " + shown(v));
    }
    void numberArray(const json& v, const std::string& where, bool nullable = true) const {
        if (!v.is_array()) fail(where, "must be an array of numbers, got " + shown(v));
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (nullable)
                numberOrNull(v[i], where + "[" + std::to_string(i) + "]");
            else
                number(v[i], where + "[" + std::to_string(i) + "]");
        }
    }
    const std::string& string(const json& v, const std::string& where) const {
        if (!v.is_string()) fail(where, "must be a string, got " + shown(v));
        return v.get_ref<const std::string&>();
    }
    const json& array(const json& v, const std::string& where) const {
        if (!v.is_array()) fail(where, "must be an array, got " + shown(v));
        return v;
    }
    const json& object(const json& v, const std::string& where) const {
        if (!v.is_object()) fail(where, "must be an object, got " + shown(v));
        return v;
    }

    // Numeric fields of an object: each a number-or-null (or a number when strict).
    // A number (when present and not null) within [lo, hi] up to rounding: what a head allows.
    void within(const json& o, const char* key, const std::string& where, double lo, double hi,
                const std::string& because) const {
        if (o.contains(key)) inRange(o[key], where + "." + key, lo, hi, because);
    }

    // A number (null passes: a value that was not finite) in [lo, hi], up to 1e-9 relative.
    void inRange(const json& value, const std::string& where, double lo, double hi, const std::string& because) const {
        if (!value.is_number()) return;
        const double v = value.get<double>();
        double scale = 1.0;
        for (double b : {lo, hi})
            if (std::isfinite(b)) scale = std::max(scale, std::abs(b));
        const double slack = 1e-9 * scale;
        if (!(v >= lo - slack && v <= hi + slack)) {
            std::ostringstream range;
            range << "[" << lo << ", " << hi << "]";
            fail(where, shown(value) + " is impossible: " + because + " " + range.str());
        }
    }

    // Bounds every record must meet whatever produced it (issue 27: merge summed a rank of 100000
    // for 37 tokens, entropy -5, local mass 7): rank and effective rank <= min(N, n); entropy in
    // [0, log n], normalised in [0, 1]; the share of rows with negative weights in [0, 1] and the
    // negative mass <= 0; softmax rows (non-negative, summing to 1): max weight and local mass in [0, 1].
    void plausible(const json& r, const std::string& w, bool softmax) const {
        const double tokens = r["tokens"].get<double>();
        const double keys = r.contains("keys") ? r["keys"].get<double>() : tokens;
        const double side = std::min(tokens, keys);
        const double pairs = tokens * (tokens - 1) / 2;
        within(r, "flagged_rows", w, 0, tokens, "a head of N rows flags a number of rows in");
        if (r.contains("confusion") && r["confusion"].is_object()) {
            within(r["confusion"], "confused_pairs", w + ".confusion", 0, pairs, "N rows make a number of pairs in");
            within(r["confusion"], "identical_query_pairs", w + ".confusion", 0, pairs,
                   "N rows make a number of pairs in");
        }
        if (r.contains("local") && r["local"].is_array())
            for (std::size_t i = 0; i < r["local"].size(); ++i)
                within(r["local"][i], "queries", w + ".local[" + std::to_string(i) + "]", 0, tokens,
                       "a head of N queries has a number of them in");
        if (r.contains("magnitude") && r["magnitude"].is_object()) {
            const json& m = r["magnitude"];
            const std::string where = w + ".magnitude";
            within(m, "queries_averaged", where, 0, tokens, "a head of N queries has a number of them in");
            eachWithin(m, "entropy", where, 0, std::log(std::max(keys, 1.0)),
                       "the entropy of a row over n keys lies in");
            if (softmax) {
                eachWithin(m, "max_weight", where, 0, 1, "softmax weights lie in");
                eachWithin(m, "top_mass", where, 0, 1, "a part of a softmax row's mass lies in");
                eachWithin(m, "ratio", where, 0, std::numeric_limits<double>::infinity(),
                           "a ratio of two softmax weights lies in");
            }
        }
        if (r.contains("rank")) {
            within(r["rank"], "rank", w + ".rank", 0, side, "a head of N x n allows rank in");
            within(r["rank"], "bound", w + ".rank", 0, side, "a head of N x n allows a rank bound in");
            if (r["rank"].contains("bound") && r["rank"]["bound"].is_number())
                within(r["rank"], "rank", w + ".rank", 0, r["rank"]["bound"].get<double>(),
                       "the paradigm's algebra (rank.bound) allows rank in");
            within(r["rank"], "effective_rank", w + ".rank", 0, side, "a head of N x n allows effective rank in");
        }
        if (r.contains("entropy")) {
            const json& e = r["entropy"];
            within(e, "mean_entropy", w + ".entropy", 0, std::log(std::max(keys, 1.0)),
                   "the entropy of a row over n keys lies in");
            within(e, "normalised_entropy", w + ".entropy", 0, 1, "normalised entropy lies in");
            within(e, "normalised_entropy_admissible", w + ".entropy", 0, 1, "normalised entropy lies in");
            within(e, "admissible_keys_mean", w + ".entropy", 1, keys, "a row's admissible keys number in");
            within(e, "entropy_abs", w + ".entropy", 0, std::log(std::max(keys, 1.0)),
                   "the entropy of a row over n keys lies in");
            within(e, "normalised_entropy_abs_admissible", w + ".entropy", 0, 1, "normalised entropy lies in");
            within(e, "max_abs_share", w + ".entropy", 0, 1, "a share of a row's |weights| lies in");
            within(e, "negative_weight_fraction", w + ".entropy", 0, 1, "a fraction of weights lies in");
            within(e, "negative_row_fraction", w + ".entropy", 0, 1, "a fraction of rows lies in");
            within(e, "negative_mass_total", w + ".entropy", -std::numeric_limits<double>::infinity(), 0,
                   "a sum of negative weights lies in");
            within(e, "negative_mass_per_row", w + ".entropy", -std::numeric_limits<double>::infinity(), 0,
                   "a sum of negative weights lies in");
            if (softmax) within(e, "max_weight", w + ".entropy", 0, 1, "softmax weights lie in");
        }
        if (r.contains("confusion") && r["confusion"].is_object() && r["confusion"].contains("confused_pairs") &&
            r["confusion"]["confused_pairs"].is_number())
            within(r["confusion"], "confused_pairs_far", w + ".confusion", 0,
                   r["confusion"]["confused_pairs"].get<double>(), "a part of the confused pairs lies in");
        if (r.contains("ray_probe") && r["ray_probe"].is_object()) {
            within(r["ray_probe"], "equal_fraction", w + ".ray_probe", 0, 1, "a fraction of queries lies in");
            const json& tv = r["ray_probe"].value("total_variation_mean", json::array());
            for (std::size_t i = 0; tv.is_array() && i < tv.size(); ++i)
                if (tv[i].is_number() && !(tv[i].get<double>() >= 0))
                    fail(w + ".ray_probe.total_variation_mean[" + std::to_string(i) + "]",
                         shown(tv[i]) + " is impossible: half an L1 distance is >= 0");
        }
        if (r.contains("distance") && r["distance"].is_object()) {
            const json& d = r["distance"];
            const double inf = std::numeric_limits<double>::infinity();
            within(d, "queries", w + ".distance", 0, tokens, "a head of N queries has a number of them in");
            // Half the L1 distance of two non-negative rows with sums at most 1 is at most 1; signed
            // rows can be farther apart.
            const bool signedRows = !d.contains("signed_queries") || !d["signed_queries"].is_number() ||
                                    d["signed_queries"].get<double>() != 0;
            if (d.contains("total_variation"))
                within(d["total_variation"], "mean", w + ".distance.total_variation", 0, signedRows ? inf : 1.0,
                       signedRows ? "half an L1 distance lies in"
                                  : "half the L1 distance of two rows without negative weights lies in");
            if (d.contains("jensen_shannon"))
                within(d["jensen_shannon"], "mean", w + ".distance.jensen_shannon", 0, std::log(2.0),
                       "a Jensen-Shannon divergence in nats lies in");
            within(d, "output_relative_error", w + ".distance", 0, inf, "a relative error lies in");
            if (d.contains("output_cosine"))
                within(d["output_cosine"], "mean", w + ".distance.output_cosine", -1, 1, "a cosine lies in");
        }
        if (r.contains("local"))
            for (std::size_t i = 0; i < r["local"].size(); ++i)
                within(r["local"][i], "admissible_baseline", w + ".local[" + std::to_string(i) + "]", 0, 1,
                       "a share of a row uniform over its admissible keys lies in");
        if (softmax && r.contains("local"))
            for (std::size_t i = 0; i < r["local"].size(); ++i)
                within(r["local"][i], "mean", w + ".local[" + std::to_string(i) + "]", 0, 1,
                       "a softmax row's mass in a window lies in");
    }

    // within() for every number of the array o[key] (nulls pass: values that were not finite).
    void eachWithin(const json& o, const char* key, const std::string& where, double lo, double hi,
                    const std::string& because) const {
        if (!o.contains(key) || !o[key].is_array()) return;
        for (std::size_t i = 0; i < o[key].size(); ++i)
            inRange(o[key][i], where + "." + key + "[" + std::to_string(i) + "]", lo, hi, because);
    }

    void numbers(const json& o, const std::string& where, std::initializer_list<const char*> keys,
                 bool nullable = true) const {
        for (const char* k : keys) {
            if (nullable)
                numberOrNull(field(o, k, where), where + "." + k);
            else
                number(field(o, k, where), where + "." + k);
        }
    }

    void localEntries(const json& v, const std::string& where, std::initializer_list<const char*> keys) const {
        array(v, where);
        for (std::size_t i = 0; i < v.size(); ++i) {
            const std::string w = where + "[" + std::to_string(i) + "]";
            integer(field(v[i], "k", w), w + ".k", 1);
            numbers(v[i], w, keys);
        }
    }

    void branchChannel(const json& c, const std::string& where) const {
        object(c, where);
        numberOrNull(field(c, "branch_share", where), where + ".branch_share");
        for (const char* k : {"channel", "weight_channel", "rank", "size"})
            if (c.contains(k)) integer(c[k], where + "." + k, 0);
        for (const char* k : {"effective_rank", "tolerance"})
            if (c.contains(k)) numberOrNull(c[k], where + "." + k);
        if (c.contains("method")) string(c["method"], where + ".method");
        if (c.contains("singular_values")) numberArray(c["singular_values"], where + ".singular_values");
        if (c.contains("local")) localEntries(c["local"], where + ".local", {"mean", "abs_fraction"});
    }

    // The statistics of one record (schema definitions/record).
    void statistics(const json& r, const std::string& w) const {
        integer(field(r, "tokens", w), w + ".tokens", 1);
        if (r.contains("keys")) integer(r["keys"], w + ".keys", 1);
        integer(field(r, "flagged_rows", w), w + ".flagged_rows", 0);
        if (r.contains("rank")) {
            const json& s = object(r["rank"], w + ".rank");
            integer(field(s, "rank", w + ".rank"), w + ".rank.rank", 0);
            integer(field(s, "size", w + ".rank"), w + ".rank.size", 0);
            numbers(s, w + ".rank", {"effective_rank", "tolerance"});
            numbers(s, w + ".rank", {"relative_tolerance"}, false);
            if (s.contains("bound")) integer(s["bound"], w + ".rank.bound", 0);
            if (s.contains("bound_rule")) string(s["bound_rule"], w + ".rank.bound_rule");
            string(field(s, "method", w + ".rank"), w + ".rank.method");
            numberArray(field(s, "singular_values", w + ".rank"), w + ".rank.singular_values");
        }
        if (r.contains("local")) {
            const std::string where = w + ".local";
            localEntries(r["local"], where, {"mean"});
            for (std::size_t i = 0; i < r["local"].size(); ++i) {
                const std::string e = where + "[" + std::to_string(i) + "]";
                // The schema says number, but a head without a valid query writes null here.
                numbers(r["local"][i], e, {"uniform_baseline", "paper_baseline"});
                // Reports before the admissible keys lack these two.
                for (const char* k : {"admissible_baseline", "x_uniform"})
                    if (r["local"][i].contains(k)) numberOrNull(r["local"][i][k], e + "." + k);
                integer(field(r["local"][i], "queries", e), e + ".queries", 0);
                if (r["local"][i].contains("per_query")) numberArray(r["local"][i]["per_query"], e + ".per_query");
                if (r["local"][i].contains("output_share")) {
                    numberOrNull(r["local"][i]["output_share"], e + ".output_share");
                    integer(field(r["local"][i], "output_queries", e), e + ".output_queries", 0);
                }
            }
        }
        if (r.contains("entropy")) {
            const json& e = object(r["entropy"], w + ".entropy");
            numbers(e, w + ".entropy",
                    {"mean_entropy", "normalised_entropy", "max_weight", "negative_row_fraction", "negative_mass_total",
                     "negative_mass_per_row"});
            for (const char* k : {"normalised_entropy_admissible", "admissible_keys_mean", "entropy_abs",
                                  "normalised_entropy_abs_admissible", "max_abs_share", "negative_weight_fraction"})
                if (e.contains(k)) numberOrNull(e[k], w + ".entropy." + k);
            integer(field(e, "rows", w + ".entropy"), w + ".entropy.rows", 0);
            integer(field(e, "flagged_rows", w + ".entropy"), w + ".entropy.flagged_rows", 0);
        }
        if (r.contains("confusion")) {
            const json& c = object(r["confusion"], w + ".confusion");
            integer(field(c, "confused_pairs", w + ".confusion"), w + ".confusion.confused_pairs", 0);
            integer(field(c, "identical_query_pairs", w + ".confusion"), w + ".confusion.identical_query_pairs", 0);
            numbers(c, w + ".confusion", {"tau", "query_tolerance"});
            string(field(c, "method", w + ".confusion"), w + ".confusion.method");
            if (c.contains("confused_pairs_far"))
                integer(c["confused_pairs_far"], w + ".confusion.confused_pairs_far", 0);
            if (c.contains("query_relative_floor"))
                numberOrNull(c["query_relative_floor"], w + ".confusion.query_relative_floor");
        }
        if (r.contains("ray_probe")) {
            const json& p = object(r["ray_probe"], w + ".ray_probe");
            numberArray(field(p, "factors", w + ".ray_probe"), w + ".ray_probe.factors");
            numberArray(field(p, "total_variation_mean", w + ".ray_probe"), w + ".ray_probe.total_variation_mean");
            numberOrNull(field(p, "equal_fraction", w + ".ray_probe"), w + ".ray_probe.equal_fraction");
            integer(field(p, "queries", w + ".ray_probe"), w + ".ray_probe.queries", 0);
        }
        if (r.contains("magnitude")) {
            const std::string where = w + ".magnitude";
            const json& m = object(r["magnitude"], where);
            const json& factors = field(m, "factors", where);
            numberArray(factors, where + ".factors", false);
            for (const char* k : {"max_weight", "entropy", "top_mass", "ratio"}) {
                const json& v = field(m, k, where);
                numberArray(v, where + "." + k);
                if (v.size() != factors.size())
                    fail(where + "." + k, "has " + std::to_string(v.size()) + " values for " +
                                              std::to_string(factors.size()) + " factors");
            }
            if (m.contains("spread")) {  // reports before it have none
                const json& v = m["spread"];
                numberArray(v, where + ".spread");
                if (v.size() != factors.size())
                    fail(where + ".spread", "has " + std::to_string(v.size()) + " values for " +
                                                std::to_string(factors.size()) + " factors");
                for (std::size_t i = 0; i < v.size(); ++i)
                    if (v[i].is_number() && !(v[i].get<double>() >= 0))
                        fail(where + ".spread[" + std::to_string(i) + "]", "is negative (a norm)");
            }
            integer(field(m, "queries_averaged", where), where + ".queries_averaged", 0);
        }
        if (r.contains("local_branch")) {
            const std::string where = w + ".local_branch";
            const json& b = object(r["local_branch"], where);
            string(field(b, "kind", where), where + ".kind");
            integer(field(b, "channels_analysed", where), where + ".channels_analysed", 0);
            const json& share = object(field(b, "branch_share", where), where + ".branch_share");
            numbers(share, where + ".branch_share", {"mean_over_channels", "mean_channel"});
            const json& channels = array(field(b, "channels", where), where + ".channels");
            for (std::size_t i = 0; i < channels.size(); ++i)
                branchChannel(channels[i], where + ".channels[" + std::to_string(i) + "]");
            if (b.contains("mean_channel")) branchChannel(b["mean_channel"], where + ".mean_channel");
            if (b.contains("rank")) {
                const json& k = object(b["rank"], where + ".rank");
                const json& without = field(k, "without", where + ".rank");
                if (!without.is_null()) integer(without, where + ".rank.without", 0);
                for (const char* key : {"min", "max", "mean_channel", "size"})
                    integer(field(k, key, where + ".rank"), where + ".rank." + key, 0);
                numberOrNull(field(k, "median", where + ".rank"), where + ".rank.median");
            }
            if (b.contains("local"))
                localEntries(b["local"], where + ".local",
                             {"without", "with", "with_min", "with_max", "abs_fraction_without", "abs_fraction_with"});
        }
        if (r.contains("distance")) {
            const std::string where = w + ".distance";
            const json& d = object(r["distance"], where);
            string(field(d, "reference", where), where + ".reference");
            integer(field(d, "queries", where), where + ".queries", 0);
            integer(field(d, "signed_queries", where), where + ".signed_queries", 0);
            distribution(field(d, "total_variation", where), where + ".total_variation");
            distribution(field(d, "jensen_shannon", where), where + ".jensen_shannon");
            if (d.contains("output_relative_error")) {
                numberOrNull(d["output_relative_error"], where + ".output_relative_error");
                if (d.contains("output_relative_error_with_branch"))
                    numberOrNull(d["output_relative_error_with_branch"], where + ".output_relative_error_with_branch");
                distribution(field(d, "output_cosine", where), where + ".output_cosine");
            }
        }
    }

    void distribution(const json& v, const std::string& where) const {
        object(v, where);
        numberOrNull(field(v, "mean", where), where + ".mean");
        const json& q = field(v, "quantiles", where);
        numberArray(q, where + ".quantiles");
        if (q.size() != kDistanceQuantiles.size())
            fail(where + ".quantiles", "has " + std::to_string(q.size()) + " values for " +
                                           std::to_string(kDistanceQuantiles.size()) + " quantiles");
        integer(field(v, "queries", where), where + ".queries", 0);
    }

private:
    std::string file_;
};

// What a report's input.dump says about the dump: image count and layers (name -> position, heads).
struct DumpDescription {
    std::int64_t images = 0;
    std::vector<std::string> layerNames;
    std::vector<std::int64_t> layerHeads;

    int layerPosition(const std::string& name) const {
        for (std::size_t i = 0; i < layerNames.size(); ++i)
            if (layerNames[i] == name) return int(i);
        return -1;
    }
};

DumpDescription describeDump(const ReportChecker& check, const json& report) {
    DumpDescription d;
    const json& dump = check.object(check.field(check.field(report, "input", "report"), "dump", "input"), "input.dump");
    constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
    d.images = check.integer(check.field(dump, "images", "input.dump"), "input.dump.images", 0, kMaxInt);
    const json& layers = check.array(check.field(dump, "layers", "input.dump"), "input.dump.layers");
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const std::string w = "input.dump.layers[" + std::to_string(i) + "]";
        d.layerNames.push_back(check.string(check.field(layers[i], "name", w), w + ".name"));
        d.layerHeads.push_back(check.integer(check.field(layers[i], "heads", w), w + ".heads", 1, kMaxInt));
    }
    return d;
}

// One record: (image, layer, head, paradigm) within the report's selection and dump description.
struct RecordKey {
    std::int64_t image, layerPosition, head;
    std::string paradigm;
    bool operator<(const RecordKey& o) const {
        return std::tie(image, layerPosition, head, paradigm) < std::tie(o.image, o.layerPosition, o.head, o.paradigm);
    }
};

std::string describeKey(const RecordKey& k, const std::string& layer) {
    return "(image " + std::to_string(k.image) + ", layer " + printableText(layer) + ", head " +
           std::to_string(k.head) + ", paradigm " + printableText(k.paradigm) + ")";
}

// The records of one merge input, in the order of its results array, and its skipped entries.
struct MergeInput {
    DumpDescription dump;
    std::vector<RecordKey> keys;
    std::vector<std::pair<std::int64_t, std::int64_t>> skipped;  // (image, layer position)
};

// Checks one merge input: its selection, paradigms and every record against the schema and its
// own dump description, and that no (image, layer, head, paradigm) appears twice in it.
MergeInput checkMergeInput(const json& r, const std::string& name) {
    const ReportChecker check(name);
    MergeInput out;
    std::set<RecordKey> seen;
    const DumpDescription dump = describeDump(check, r);

    const json& selection = check.object(check.field(r, "selection", "report"), "selection");
    std::set<std::int64_t> images;
    const json& selectedImages = check.array(check.field(selection, "images", "selection"), "selection.images");
    for (std::size_t i = 0; i < selectedImages.size(); ++i)
        images.insert(
            check.integer(selectedImages[i], "selection.images[" + std::to_string(i) + "]", 0, dump.images - 1));
    std::set<std::string> layers;
    const json& selectedLayers = check.array(check.field(selection, "layers", "selection"), "selection.layers");
    for (std::size_t i = 0; i < selectedLayers.size(); ++i) {
        const std::string where = "selection.layers[" + std::to_string(i) + "]";
        const std::string& layer = check.string(selectedLayers[i], where);
        if (dump.layerPosition(layer) < 0)
            check.fail(where, "layer " + shown(selectedLayers[i]) + " is not a layer of the dump (input.dump.layers)");
        layers.insert(layer);
    }
    std::optional<std::set<std::int64_t>> heads;  // nothing: "all"
    const json& selectedHeads = check.field(selection, "heads", "selection");
    if (!(selectedHeads.is_string() && selectedHeads.get<std::string>() == "all")) {
        if (!selectedHeads.is_array())
            check.fail("selection.heads", "must be \"all\" or an array, got " + shown(selectedHeads));
        heads.emplace();
        for (std::size_t i = 0; i < selectedHeads.size(); ++i)
            heads->insert(check.integer(selectedHeads[i], "selection.heads[" + std::to_string(i) + "]", 0));
    }

    std::set<std::string> paradigms, softmaxParadigms;
    const json& paradigmList = check.array(check.field(r, "paradigms", "report"), "paradigms");
    if (paradigmList.empty()) check.fail("paradigms", "is empty");
    for (std::size_t i = 0; i < paradigmList.size(); ++i) {
        const std::string where = "paradigms[" + std::to_string(i) + "]";
        const std::string& p = check.string(check.field(paradigmList[i], "name", where), where + ".name");
        if (!paradigms.insert(p).second)
            check.fail(where, "the paradigm name " + shown(paradigmList[i]["name"]) + " is used twice");
        if (paradigmList[i].value("normalisation", json()) == "softmax") softmaxParadigms.insert(p);
    }

    // The statistics every record carries (options.statistics) and the window sizes of its local
    // entries (options.local.k); reports that do not say are not held to them.
    std::set<std::string> selectedStatistics;
    if (r.contains("options") && r["options"].is_object() && r["options"].contains("statistics")) {
        const json& stats = check.array(r["options"]["statistics"], "options.statistics");
        for (std::size_t i = 0; i < stats.size(); ++i)
            selectedStatistics.insert(check.string(stats[i], "options.statistics[" + std::to_string(i) + "]"));
    }
    std::optional<std::vector<std::int64_t>> windowSizes;
    if (r.contains("options") && r["options"].is_object() && r["options"].contains("local") &&
        r["options"]["local"].is_object() && r["options"]["local"].contains("k")) {
        const json& ks = check.array(r["options"]["local"]["k"], "options.local.k");
        windowSizes.emplace();
        for (std::size_t i = 0; i < ks.size(); ++i)
            windowSizes->push_back(check.integer(ks[i], "options.local.k[" + std::to_string(i) + "]", 1));
    }

    const json& results = check.array(check.field(r, "results", "report"), "results");
    for (std::size_t i = 0; i < results.size(); ++i) {
        const json& record = results[i];
        std::string where = "results[" + std::to_string(i) + "]";
        check.object(record, where);
        RecordKey key;
        key.image = check.integer(check.field(record, "image", where), where + ".image", 0, dump.images - 1);
        const std::string& layer = check.string(check.field(record, "layer", where), where + ".layer");
        key.layerPosition = dump.layerPosition(layer);
        if (key.layerPosition < 0)
            check.fail(where + ".layer",
                       "layer " + shown(record["layer"]) + " is not a layer of the dump (input.dump.layers)");
        const std::int64_t position =
            check.integer(check.field(record, "layer_position", where), where + ".layer_position", 0);
        if (position != key.layerPosition)
            check.fail(where + ".layer_position", std::to_string(position) + " is not the position " +
                                                      std::to_string(key.layerPosition) + " of layer " +
                                                      shown(record["layer"]) + " in the dump");
        key.head = check.integer(check.field(record, "head", where), where + ".head", 0,
                                 dump.layerHeads[std::size_t(key.layerPosition)] - 1);
        key.paradigm = check.string(check.field(record, "paradigm", where), where + ".paradigm");
        if (!paradigms.count(key.paradigm))
            check.fail(where + ".paradigm",
                       "paradigm " + shown(record["paradigm"]) + " is not one of the report's paradigms");
        where += " " + describeKey(key, layer);
        if (!images.count(key.image)) check.fail(where, "the image is not in the report's selection.images");
        if (!layers.count(layer)) check.fail(where, "the layer is not in the report's selection.layers");
        if (heads && !heads->count(key.head)) check.fail(where, "the head is not in the report's selection.heads");
        check.statistics(record, where);
        check.plausible(record, where, softmaxParadigms.count(key.paradigm) > 0);
        // Only the statistics analyze computes per record; distance needs a reference, local a grid.
        for (const char* statistic : {"rank", "entropy", "confusion", "magnitude"}) {
            const std::string field = std::string(statistic) == "rank" ? "rank" : statistic;
            if (selectedStatistics.count(statistic) && !record.contains(field))
                check.fail(where, "the statistic \"" + field +
                                      "\" is missing, though the report's options.statistics selects it");
        }
        if (selectedStatistics.count("local") && windowSizes && !windowSizes->empty()) {
            if (!record.contains("local"))
                check.fail(where,
                           "the statistic \"local\" is missing, though the report's options.statistics selects it");
            std::vector<std::int64_t> ks;
            for (const json& entry : record["local"]) ks.push_back(entry["k"].get<std::int64_t>());
            const auto listed = [](const std::vector<std::int64_t>& values) {
                std::string text;
                for (std::size_t v = 0; v < values.size(); ++v) text += (v ? ", " : "") + std::to_string(values[v]);
                return "[" + text + "]";
            };
            if (ks != *windowSizes)
                check.fail(where + ".local", "has window sizes " + listed(ks) +
                                                 " where the report's options.local.k are " + listed(*windowSizes));
        }
        if (!seen.insert(key).second) check.fail(where, "this record appears twice in the file");
        out.keys.push_back(std::move(key));
    }

    // (image, layer)s analyze --skip-unreadable could not read: in the selection, without records.
    if (r.contains("skipped")) {
        std::set<std::pair<std::int64_t, std::int64_t>> withRecords;
        for (const RecordKey& key : out.keys) withRecords.emplace(key.image, key.layerPosition);
        const json& skipped = check.array(r["skipped"], "skipped");
        for (std::size_t i = 0; i < skipped.size(); ++i) {
            const std::string where = "skipped[" + std::to_string(i) + "]";
            check.object(skipped[i], where);
            const std::int64_t image =
                check.integer(check.field(skipped[i], "image", where), where + ".image", 0, dump.images - 1);
            const std::string& layer = check.string(check.field(skipped[i], "layer", where), where + ".layer");
            const int position = dump.layerPosition(layer);
            if (position < 0)
                check.fail(where + ".layer",
                           "layer " + shown(skipped[i]["layer"]) + " is not a layer of the dump (input.dump.layers)");
            if (check.integer(check.field(skipped[i], "layer_position", where), where + ".layer_position", 0) !=
                position)
                check.fail(where + ".layer_position", "is not the position " + std::to_string(position) + " of layer " +
                                                          shown(skipped[i]["layer"]) + " in the dump");
            check.string(check.field(skipped[i], "message", where), where + ".message");
            if (!images.count(image)) check.fail(where, "the image is not in the report's selection.images");
            if (!layers.count(layer)) check.fail(where, "the layer is not in the report's selection.layers");
            if (withRecords.count({image, position}))
                check.fail(where, "image " + std::to_string(image) + ", layer " + printableText(layer) +
                                      " is listed as skipped but has records");
            out.skipped.emplace_back(image, position);
        }
    }
    // The records cover the selection exactly: every (image, layer, head, paradigm) of it whose
    // (image, layer) was not skipped. A dropped record would leave the merged summary over fewer
    // images than the report says it covers.
    {
        std::set<std::pair<std::int64_t, std::int64_t>> skippedSet(out.skipped.begin(), out.skipped.end());
        std::vector<int> layerPositions;
        for (const std::string& layer : layers) layerPositions.push_back(dump.layerPosition(layer));
        std::sort(layerPositions.begin(), layerPositions.end());
        const auto headsOf = [&](int position) {
            const std::int64_t count = dump.layerHeads[std::size_t(position)];
            if (!heads) return count;
            return std::int64_t(std::count_if(heads->begin(), heads->end(), [&](std::int64_t h) { return h < count; }));
        };
        std::int64_t expected = 0;
        for (int position : layerPositions) {
            std::int64_t readImages = 0;
            for (std::int64_t image : images) readImages += skippedSet.count({image, position}) ? 0 : 1;
            expected += readImages * headsOf(position) * std::int64_t(paradigms.size());
        }
        const bool jsonRecords = !(r.contains("record_detail") && r["record_detail"].is_object() &&
                                   r["record_detail"].value("format", std::string("json")) != "json");
        const std::int64_t have =
            jsonRecords ? std::int64_t(out.keys.size())
                        : (r["record_detail"].contains("records") && r["record_detail"]["records"].is_number_integer()
                               ? r["record_detail"]["records"].get<std::int64_t>()
                               : -1);
        if (have >= 0 && have != expected) {
            std::string first;
            if (jsonRecords) {  // the first (image, layer, head, paradigm) of the selection without a record
                for (std::int64_t image : images) {
                    for (int position : layerPositions) {
                        if (skippedSet.count({image, position})) continue;
                        for (std::int64_t head = 0; head < dump.layerHeads[std::size_t(position)] && first.empty();
                             ++head) {
                            if (heads && !heads->count(head)) continue;
                            for (const std::string& p : paradigms)
                                if (!seen.count(RecordKey{image, position, head, p}) && first.empty())
                                    first = describeKey(RecordKey{image, position, head, p},
                                                        dump.layerNames[std::size_t(position)]);
                        }
                        if (!first.empty()) break;
                    }
                    if (!first.empty()) break;
                }
            }
            check.fail(jsonRecords ? "results" : "record_detail.records",
                       std::to_string(have) + " records where the selection (" + std::to_string(images.size()) +
                           " images, " + std::to_string(layerPositions.size()) + " layers, their selected heads, " +
                           std::to_string(paradigms.size()) + " paradigms, less " + std::to_string(skippedSet.size()) +
                           " skipped (image, layer)s) has " + std::to_string(expected) +
                           (first.empty() ? std::string() : "; the first without a record is " + first) +
                           ": a report covers its selection exactly");
        }
    }
    if (r.contains("non_finite")) {
        const json& nonFinite = check.array(r["non_finite"], "non_finite");
        for (std::size_t i = 0; i < nonFinite.size(); ++i)
            check.object(nonFinite[i], "non_finite[" + std::to_string(i) + "]");
    }
    if (r.contains("timing")) {
        const json& timing = check.object(r["timing"], "timing");
        if (timing.contains("seconds")) check.numberOrNull(timing["seconds"], "timing.seconds");
    }
    if (r.contains("created_utc")) check.string(r["created_utc"], "created_utc");
    out.dump = dump;
    return out;
}

json withoutPath(json dump) {
    if (dump.is_object()) dump.erase("path");
    return dump;
}

}  // namespace

nlohmann::json reportProvenanceJson(const AnalysisReport& report, const ToolInfo& tool) {
    json j;
    j["schema"] = "attnlens.analysis";
    j["schema_version"] = 1;
    j["tool"] = {{"name", tool.name}, {"version", tool.version}, {"command", tool.command}};
    j["created_utc"] = utcNow();
    json layers = json::array();
    for (int l : report.request.layers) layers.push_back(report.dump.layers[l].name);
    j["selection"] = {{"images", report.request.images},
                      {"layers", layers},
                      {"heads", report.request.heads.empty() ? json("all") : json(report.request.heads)}};
    // Only for shards of a study (analyze --shard), so that other reports keep the fields they had.
    if (report.request.study) j["selection"]["study"] = studyJson(*report.request.study);
    json paradigms = json::array();
    for (const auto& p : report.paradigms) paradigms.push_back(p.toJson());
    j["paradigms"] = paradigms;
    j["options"] = report.request.options.toJson();
    // Only for dumps with /labels, so that other reports keep the fields they always had.
    if (!report.labels.empty()) {
        json labels = json::array();
        for (const auto& [image, label] : report.labels) labels.push_back({{"image", image}, {"label", label}});
        j["image_labels"] = std::move(labels);
    }
    return j;
}

nlohmann::json recordJson(const AnalysisReport& report, const HeadRecord& r) {
    json e = statsJson(r.stats, report.request.options.perQueryMaps, report.request.options.localK);
    e["image"] = r.image;
    e["layer"] = report.dump.layers[r.layer].name;
    e["layer_position"] = r.layer;
    e["head"] = r.head;
    e["paradigm"] = report.paradigms[r.paradigm].name;
    return e;
}

nlohmann::json reportOutcomeJson(const AnalysisReport& report) {
    json j;
    j["input"] = {{"path", report.dump.path},
                  {"size_bytes", report.dump.fileSize},
                  {"sha256", report.sha256},
                  {"dump", report.dump.toJson()}};
    json nonFinite = json::array();
    for (const auto& nf : report.nonFinite)
        nonFinite.push_back({{"image", nf.image},
                             {"layer", report.dump.layers[nf.layer].name},
                             {"head", nf.head},
                             {"token", nf.token},
                             {"tensor", tensorName(nf.tensor)},
                             {"message", nf.describe(report.dump)}});
    j["non_finite"] = std::move(nonFinite);
    // Only when something was skipped (AnalyzeRequest::skipUnreadable), so that reports of runs
    // without damage keep the fields they always had.
    if (!report.skipped.empty()) {
        json skipped = json::array();
        for (const SkippedLayer& s : report.skipped)
            skipped.push_back({{"image", s.image},
                               {"layer", report.dump.layers[std::size_t(s.layer)].name},
                               {"layer_position", s.layer},
                               {"message", s.message}});
        j["skipped"] = std::move(skipped);
    }
    // What the run left out or chose and would otherwise say only on the terminal (an image whose
    // label cannot be read, left out of the per-label tables; the memory plan's thread budget).
    // Only when there is one, so that other reports keep the fields they always had.
    if (!report.notes.empty()) j["notes"] = report.notes;
    // The kernels the timing was measured with (math/blas.h: OpenBLAS's choice can be 2.5x slower).
    j["timing"] = {
        {"seconds", report.seconds}, {"threads", report.request.threads.count()}, {"blas", blas::coreDescription()}};
    return j;
}

nlohmann::json reportToJson(const AnalysisReport& report, const ToolInfo& tool) {
    json j = reportProvenanceJson(report, tool);
    const json outcome = reportOutcomeJson(report);
    for (const auto& [key, value] : outcome.items()) j[key] = value;
    std::vector<json> entries(report.records.size());
    // Records are independent: built in parallel chunks of 256, each into its own entry.
    detail::parallelForChunks(entries.size(), 256, detail::processorCount(), [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) entries[i] = recordJson(report, report.records[i]);
    });
    j["results"] = json::array();
    j["results"].get_ref<json::array_t&>() = std::move(entries);
    j["summary"] = summarize(j);
    return j;
}

namespace {

double numberOrNaN(const json& v) { return v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN(); }

std::vector<double> numbersOrNaN(const json& v) {
    std::vector<double> out;
    out.reserve(v.size());
    for (const json& x : v) out.push_back(numberOrNaN(x));
    return out;
}

// A spectrum as statsJson/branchChannelJson write it ("relative_tolerance" only for A's own).
SpectrumResult spectrumFromJson(const json& j) {
    SpectrumResult s;
    s.rank = j.at("rank").get<int>();
    s.effectiveRank = numberOrNaN(j.value("effective_rank", json()));
    s.size = j.value("size", Index(0));
    s.relativeTolerance = numberOrNaN(j.value("relative_tolerance", json()));
    s.tolerance = numberOrNaN(j.value("tolerance", json()));
    s.method = j.value("method", std::string());
    if (j.contains("singular_values")) s.singularValues = numbersOrNaN(j["singular_values"]);
    if (j.contains("window_ranks")) s.windowRanks = j["window_ranks"].get<std::vector<int>>();
    s.bound = j.value("bound", 0);
    s.boundRule = j.value("bound_rule", std::string());
    return s;
}

LocalBranchChannel branchChannelFromJson(const json& j) {
    LocalBranchChannel c;
    c.channel = j.value("channel", -1);
    c.weightChannel = j.value("weight_channel", -1);
    if (j.contains("rank")) c.spectrum = spectrumFromJson(j);
    if (j.contains("local"))
        for (const json& l : j["local"]) {
            c.localMass.push_back(numberOrNaN(l.at("mean")));
            c.localAbsFraction.push_back(numberOrNaN(l.at("abs_fraction")));
        }
    c.branchShare = numberOrNaN(j.at("branch_share"));
    return c;
}

LocalBranchResult localBranchFromJson(const json& j) {
    LocalBranchResult b;
    b.kind = j.at("kind").get<std::string>();
    for (const json& c : j.at("channels")) b.channels.push_back(branchChannelFromJson(c));
    if (j.contains("mean_channel")) b.mean = branchChannelFromJson(j["mean_channel"]);
    if (j.contains("rank")) {
        b.rankMin = j["rank"].at("min").get<int>();
        b.rankMax = j["rank"].at("max").get<int>();
        b.rankMedian = numberOrNaN(j["rank"].at("median"));
    }
    if (j.contains("local"))
        for (const json& l : j["local"]) {
            b.localMassWithout.push_back(numberOrNaN(l.at("without")));
            b.localAbsFractionWithout.push_back(numberOrNaN(l.at("abs_fraction_without")));
        }
    return b;
}

}  // namespace

namespace {

QueryDistribution distributionFromJson(const json& j) {
    QueryDistribution d;
    d.mean = numberOrNaN(j.at("mean"));
    const std::vector<double> q = numbersOrNaN(j.at("quantiles"));
    for (std::size_t i = 0; i < d.quantiles.size() && i < q.size(); ++i) d.quantiles[i] = q[i];
    d.count = j.value("queries", Index(0));
    return d;
}

DistanceResult distanceFromJson(const json& j) {
    DistanceResult d;
    d.reference = j.at("reference").get<std::string>();
    d.queries = j.value("queries", Index(0));
    d.signedQueries = j.value("signed_queries", Index(0));
    d.totalVariation = distributionFromJson(j.at("total_variation"));
    d.jensenShannon = distributionFromJson(j.at("jensen_shannon"));
    d.hasOutput = j.contains("output_relative_error");
    if (d.hasOutput) {
        d.outputRelativeError = numberOrNaN(j["output_relative_error"]);
        if (j.contains("output_relative_error_with_branch"))
            d.outputRelativeErrorWithBranch = numberOrNaN(j["output_relative_error_with_branch"]);
        d.outputCosine = distributionFromJson(j.at("output_cosine"));
    }
    return d;
}

}  // namespace

HeadRecord recordFromJson(const nlohmann::json& r, const std::vector<std::string>& paradigms) {
    HeadRecord record;
    record.image = r.at("image").get<int>();
    record.layer = r.at("layer_position").get<int>();
    record.head = r.at("head").get<int>();
    const auto named = std::find(paradigms.begin(), paradigms.end(), r.at("paradigm").get<std::string>());
    record.paradigm = named == paradigms.end() ? -1 : int(named - paradigms.begin());
    HeadStatistics& s = record.stats;
    s.tokens = r.value("tokens", Index(0));
    s.keys = r.value("keys", s.tokens);
    s.flaggedRows = r.value("flagged_rows", Index(0));
    if (r.contains("rank")) s.spectrum = spectrumFromJson(r["rank"]);
    if (r.contains("local"))
        for (const json& l : r["local"]) {
            LocalMassResult m;
            m.k = l.at("k").get<int>();
            m.mean = numberOrNaN(l.at("mean"));
            m.uniformBaseline = numberOrNaN(l.at("uniform_baseline"));
            m.paperBaseline = numberOrNaN(l.at("paper_baseline"));
            // Reports before the admissible keys have none: unknown, never taken to be uniform_baseline.
            m.admissibleBaseline = numberOrNaN(l.value("admissible_baseline", json()));
            m.queries = l.value("queries", Index(0));
            if (l.contains("per_query")) m.perQuery = numbersOrNaN(l["per_query"]);
            if (l.contains("output_share")) {
                m.outputShare = numberOrNaN(l["output_share"]);
                m.outputQueries = l.value("output_queries", Index(0));
            }
            s.local.push_back(std::move(m));
        }
    if (r.contains("entropy")) {
        const json& e = r["entropy"];
        EntropyResult f;
        f.meanEntropy = numberOrNaN(e.at("mean_entropy"));
        f.meanNormalisedEntropy = numberOrNaN(e.at("normalised_entropy"));
        f.meanAdmissibleNormalisedEntropy = numberOrNaN(e.value("normalised_entropy_admissible", json()));
        f.meanAdmissibleKeys = numberOrNaN(e.value("admissible_keys_mean", json()));
        f.meanEntropyAbs = numberOrNaN(e.value("entropy_abs", json()));
        f.meanAdmissibleNormalisedEntropyAbs = numberOrNaN(e.value("normalised_entropy_abs_admissible", json()));
        f.meanMaxAbsShare = numberOrNaN(e.value("max_abs_share", json()));
        f.negativeWeightFraction = numberOrNaN(e.value("negative_weight_fraction", json()));
        f.meanMaxWeight = numberOrNaN(e.at("max_weight"));
        f.negativeRowFraction = numberOrNaN(e.at("negative_row_fraction"));
        f.totalNegativeMass = numberOrNaN(e.value("negative_mass_total", json()));
        f.meanNegativeMass = numberOrNaN(e.at("negative_mass_per_row"));
        f.rows = e.value("rows", Index(0));
        f.flaggedRows = e.value("flagged_rows", Index(0));
        s.entropy = f;
    }
    if (r.contains("confusion")) {
        const json& c = r["confusion"];
        ConfusionResult f;
        f.confusedPairs = c.at("confused_pairs").get<std::int64_t>();
        f.identicalQueryPairs = c.value("identical_query_pairs", std::int64_t(0));
        f.tau = numberOrNaN(c.value("tau", json()));
        f.queryTolerance = numberOrNaN(c.value("query_tolerance", json()));
        f.method = c.value("method", std::string());
        f.confusedPairsFar = c.value("confused_pairs_far", std::int64_t(0));
        f.queryRelativeFloor = numberOrNaN(c.value("query_relative_floor", json()));
        s.confusion = f;
    }
    if (r.contains("ray_probe")) {
        const json& p = r["ray_probe"];
        RayProbe probe;
        probe.factors = numbersOrNaN(p.at("factors"));
        probe.totalVariationMean = numbersOrNaN(p.at("total_variation_mean"));
        probe.equalFraction = numberOrNaN(p.at("equal_fraction"));
        probe.queries = p.value("queries", Index(0));
        s.rayProbe = probe;
    }
    if (r.contains("magnitude")) {
        const json& m = r["magnitude"];
        MagnitudeCurve c;
        c.factors = numbersOrNaN(m.at("factors"));
        c.maxWeight = numbersOrNaN(m.at("max_weight"));
        c.entropy = numbersOrNaN(m.at("entropy"));
        c.topMass = numbersOrNaN(m.at("top_mass"));
        c.ratio = numbersOrNaN(m.at("ratio"));
        if (m.contains("spread")) c.spread = numbersOrNaN(m["spread"]);
        c.queriesAveraged = m.value("queries_averaged", Index(0));
        s.magnitude = std::move(c);
    }
    if (r.contains("local_branch")) s.localBranch = localBranchFromJson(r["local_branch"]);
    if (r.contains("distance")) s.distance = distanceFromJson(r["distance"]);
    if (r.contains("registered"))
        for (const auto& [key, value] : r["registered"].items()) s.registered.emplace_back(key, numberOrNaN(value));
    return record;
}

struct ReportSummary::State {
    std::vector<std::string> order;
    // Indexed by the paradigm's position in `order`.
    std::vector<Aggregate> overall;
    std::vector<std::map<int, Aggregate>> perLayer;  // layer position ->
    // Confused pairs per image, per model (modelOfLayer of the record's layer) -> image ->; the
    // whole dump's count of an image is the sum over the models.
    std::vector<std::map<std::string, std::map<int, std::int64_t>>> perModelImage;
    std::vector<std::map<std::pair<int, int>, Aggregate>> perHead;  // (layer position, head) ->
    std::vector<std::map<std::int64_t, Aggregate>> perLabel;        // the image's label ->
    std::map<int, std::int64_t> imageLabels;                        // images with a record and a label
    std::map<int, std::string> layerNames;
    bool anyConfusion = false;
    std::int64_t skipped = 0;

    explicit State(std::vector<std::string> paradigms)
        : order(std::move(paradigms)),
          overall(order.size()),
          perLayer(order.size()),
          perModelImage(order.size()),
          perHead(order.size()),
          perLabel(order.size()) {}
};

ReportSummary::ReportSummary(std::vector<std::string> paradigmOrder)
    : state_(std::make_unique<State>(std::move(paradigmOrder))) {}

ReportSummary::ReportSummary(const std::vector<Paradigm>& paradigms)
    : ReportSummary([&] {
          std::vector<std::string> order;
          for (const auto& p : paradigms) order.push_back(p.name);
          return order;
      }()) {}

ReportSummary::ReportSummary(const AnalysisReport& report) : ReportSummary(report.paradigms) {
    for (const HeadRecord& r : report.records) {
        const auto label = report.labels.find(r.image);
        add(r, report.dump.layers[std::size_t(r.layer)].name,
            label == report.labels.end() ? std::nullopt : std::optional<std::int64_t>(label->second));
    }
}

ReportSummary::~ReportSummary() = default;
ReportSummary::ReportSummary(ReportSummary&&) noexcept = default;
ReportSummary& ReportSummary::operator=(ReportSummary&&) noexcept = default;

void ReportSummary::add(const HeadRecord& r, const std::string& layerName, std::optional<std::int64_t> label) {
    State& s = *state_;
    if (r.paradigm < 0 || std::size_t(r.paradigm) >= s.order.size()) return;  // not summarised
    const auto p = std::size_t(r.paradigm);
    s.overall[p].add(r.stats);
    s.perLayer[p][r.layer].add(r.stats);
    s.perHead[p][{r.layer, r.head}].add(r.stats);
    if (label) {
        s.perLabel[p][*label].add(r.stats);
        s.imageLabels[r.image] = *label;
    }
    s.layerNames[r.layer] = layerName;
    std::int64_t& confused = s.perModelImage[p][modelOfLayer(layerName)][r.image];
    if (r.stats.confusion) {
        s.anyConfusion = true;
        confused += r.stats.confusion->confusedPairs;
    }
}

void ReportSummary::add(const nlohmann::json& record, std::optional<std::int64_t> label) {
    add(recordFromJson(record, state_->order), record.at("layer").get<std::string>(), label);
}

double ReportSummary::layerMean(int paradigm, int layerPosition, Statistic statistic, int k) const {
    const auto& layers = state_->perLayer.at(std::size_t(paradigm));
    const auto it = layers.find(layerPosition);
    return it == layers.end() ? std::numeric_limits<double>::quiet_NaN() : it->second.mean(statistic, k);
}

ReportSummary::QueryCoverage ReportSummary::layerJensenShannonCoverage(int paradigm, int layerPosition) const {
    const auto& layers = state_->perLayer.at(std::size_t(paradigm));
    const auto it = layers.find(layerPosition);
    if (it == layers.end() || it->second.distanceQueriesMissing) return {};
    return {it->second.jensenShannonQueries, it->second.distanceQueries};
}

double ReportSummary::headMean(int paradigm, int layerPosition, int head, Statistic statistic, int k) const {
    const auto& heads = state_->perHead.at(std::size_t(paradigm));
    const auto it = heads.find({layerPosition, head});
    return it == heads.end() ? std::numeric_limits<double>::quiet_NaN() : it->second.mean(statistic, k);
}

double ReportSummary::labelMean(int paradigm, std::int64_t label, Statistic statistic, int k) const {
    const auto& labels = state_->perLabel.at(std::size_t(paradigm));
    const auto it = labels.find(label);
    return it == labels.end() ? std::numeric_limits<double>::quiet_NaN() : it->second.mean(statistic, k);
}

std::map<std::int64_t, std::int64_t> ReportSummary::imagesPerLabel() const {
    std::map<std::int64_t, std::int64_t> out;
    for (const auto& [image, label] : state_->imageLabels) ++out[label];
    return out;
}

std::int64_t ReportSummary::records() const {
    std::int64_t n = 0;
    for (const Aggregate& a : state_->overall) n += a.records;
    return n;
}

nlohmann::json ReportSummary::stateJson() const {
    const State& s = *state_;
    json j;
    j["schema"] = "attnlens.summary_state";
    j["schema_version"] = 1;
    j["note"] = "the summary's running sums and counts ([sum, count] per mean), for merge; read \"summary\" instead";
    j["paradigms"] = s.order;
    json layers = json::array();
    for (const auto& [position, name] : s.layerNames) layers.push_back({position, name});
    j["layer_names"] = std::move(layers);
    json overall = json::array(), perLayer = json::array(), perHead = json::array(), perLabel = json::array(),
         confusion = json::array();
    for (std::size_t p = 0; p < s.order.size(); ++p) {
        overall.push_back(s.overall[p].state(true));
        json l = json::array(), h = json::array(), b = json::array(), c = json::object();
        for (const auto& [position, aggregate] : s.perLayer[p]) l.push_back({position, aggregate.state(false)});
        for (const auto& [key, aggregate] : s.perHead[p]) h.push_back({key.first, key.second, aggregate.state(false)});
        for (const auto& [label, aggregate] : s.perLabel[p]) b.push_back({label, aggregate.state(false)});
        for (const auto& [model, perImage] : s.perModelImage[p]) {
            json counts = json::array();
            for (const auto& [image, count] : perImage) counts.push_back({image, count});
            c[model] = std::move(counts);
        }
        perLayer.push_back(std::move(l));
        perHead.push_back(std::move(h));
        perLabel.push_back(std::move(b));
        confusion.push_back(std::move(c));
    }
    j["overall"] = std::move(overall);
    j["per_layer"] = std::move(perLayer);
    j["per_head"] = std::move(perHead);
    j["per_label"] = std::move(perLabel);
    j["confusion_per_model_image"] = std::move(confusion);
    json labels = json::array();
    for (const auto& [image, label] : s.imageLabels) labels.push_back({image, label});
    j["image_labels"] = std::move(labels);
    j["any_confusion"] = s.anyConfusion;
    j["skipped"] = s.skipped;
    return j;
}

ReportSummary ReportSummary::fromStateJson(const nlohmann::json& j) {
    if (!j.is_object() || j.value("schema", json()) != "attnlens.summary_state" ||
        j.value("schema_version", json()) != 1)
        throw std::invalid_argument("not an attnlens.summary_state of schema_version 1");
    ReportSummary out(j.at("paradigms").get<std::vector<std::string>>());
    State& s = *out.state_;
    const std::size_t paradigms = s.order.size();
    for (const json& l : j.at("layer_names")) s.layerNames[l.at(0).get<int>()] = l.at(1).get<std::string>();
    const auto perParadigm = [&](const char* key) -> const json& {
        const json& v = j.at(key);
        if (!v.is_array() || v.size() != paradigms)
            throw std::invalid_argument(std::string(key) + " must have one entry per paradigm");
        return v;
    };
    const json &overall = perParadigm("overall"), &perLayer = perParadigm("per_layer"),
               &perHead = perParadigm("per_head"), &perLabel = perParadigm("per_label"),
               &confusion = perParadigm("confusion_per_model_image");
    const auto knownLayer = [&](int position) {
        if (!s.layerNames.count(position))
            throw std::invalid_argument("layer position " + std::to_string(position) + " is not in layer_names");
        return position;
    };
    for (std::size_t p = 0; p < paradigms; ++p) {
        s.overall[p] = Aggregate::fromState(overall[p]);
        for (const json& e : perLayer[p]) s.perLayer[p][knownLayer(e.at(0).get<int>())] = Aggregate::fromState(e.at(1));
        for (const json& e : perHead[p])
            s.perHead[p][{knownLayer(e.at(0).get<int>()), e.at(1).get<int>()}] = Aggregate::fromState(e.at(2));
        for (const json& e : perLabel[p]) s.perLabel[p][e.at(0).get<std::int64_t>()] = Aggregate::fromState(e.at(1));
        for (const auto& [model, counts] : confusion[p].items())
            for (const json& e : counts) s.perModelImage[p][model][e.at(0).get<int>()] = e.at(1).get<std::int64_t>();
    }
    for (const json& e : j.at("image_labels")) s.imageLabels[e.at(0).get<int>()] = e.at(1).get<std::int64_t>();
    s.anyConfusion = j.at("any_confusion").get<bool>();
    s.skipped = j.at("skipped").get<std::int64_t>();
    return out;
}

void ReportSummary::merge(const ReportSummary& other) {
    State& s = *state_;
    const State& o = *other.state_;
    if (s.order != o.order) throw std::invalid_argument("summaries of different paradigms");
    for (const auto& [position, name] : o.layerNames) {
        const auto [it, inserted] = s.layerNames.emplace(position, name);
        if (!inserted && it->second != name)
            throw std::invalid_argument("layer position " + std::to_string(position) + " is " + it->second +
                                        " in one summary and " + name + " in the other");
    }
    for (std::size_t p = 0; p < s.order.size(); ++p) {
        s.overall[p].merge(o.overall[p]);
        for (const auto& [key, aggregate] : o.perLayer[p]) s.perLayer[p][key].merge(aggregate);
        for (const auto& [key, aggregate] : o.perHead[p]) s.perHead[p][key].merge(aggregate);
        for (const auto& [key, aggregate] : o.perLabel[p]) s.perLabel[p][key].merge(aggregate);
        for (const auto& [model, perImage] : o.perModelImage[p])
            for (const auto& [image, count] : perImage) s.perModelImage[p][model][image] += count;
    }
    for (const auto& [image, label] : o.imageLabels) s.imageLabels[image] = label;
    s.anyConfusion = s.anyConfusion || o.anyConfusion;
    s.skipped += o.skipped;
}

void ReportSummary::addSkipped(std::int64_t imageLayers) { state_->skipped += imageLayers; }

std::vector<std::string> ReportSummary::models() const {
    std::vector<std::string> out;
    for (const auto& [position, name] : state_->layerNames) {
        std::string model = modelOfLayer(name);
        if (std::find(out.begin(), out.end(), model) == out.end()) out.push_back(std::move(model));
    }
    return out;
}

double ReportSummary::modelMean(int paradigm, const std::string& model, Statistic statistic, int k) const {
    FiniteMean pooled;
    for (const auto& [position, aggregate] : state_->perLayer.at(std::size_t(paradigm))) {
        if (modelOfLayer(state_->layerNames.at(position)) != model) continue;
        if (const FiniteMean* m = aggregate.meanOf(statistic, k)) {
            pooled.sum += m->sum;
            pooled.n += m->n;
        }
    }
    return pooled.mean();
}

std::map<int, std::int64_t> ReportSummary::confusionPerImage(int paradigm,
                                                             const std::optional<std::string>& model) const {
    const auto& perModel = state_->perModelImage.at(std::size_t(paradigm));
    if (model) {
        const auto it = perModel.find(*model);
        return it == perModel.end() ? std::map<int, std::int64_t>{} : it->second;
    }
    std::map<int, std::int64_t> total;
    for (const auto& [name, perImage] : perModel)
        for (const auto& [image, count] : perImage) total[image] += count;
    return total;
}

std::vector<std::int64_t> ReportSummary::confusionHistogram(int paradigm, int minBins,
                                                            const std::optional<std::string>& model) const {
    std::vector<std::int64_t> bins(std::size_t(std::max(0, minBins)), 0);
    for (const auto& [image, count] : confusionPerImage(paradigm, model)) {
        const auto bin = std::size_t(confusionBin(count));
        if (bins.size() <= bin) bins.resize(bin + 1, 0);
        ++bins[bin];
    }
    return bins;
}

nlohmann::json ReportSummary::toJson() const {
    const State& s = *state_;
    const std::vector<std::string> modelNames = models();
    auto histogramJson = [](const std::vector<std::int64_t>& hist) {
        json labels = json::array();
        for (int b = 0; b < int(hist.size()); ++b) labels.push_back(confusionBinLabel(b));
        return json{{"bins", labels}, {"images", hist}};
    };
    json out = json::array();
    for (std::size_t p = 0; p < s.order.size(); ++p) {
        json e = s.overall[p].toJson();
        e["paradigm"] = s.order[p];
        json layers = json::array();
        for (const auto& [lp, agg] : s.perLayer[p]) {
            json le = agg.toJson();
            le.erase("magnitude_mean");
            le["layer"] = s.layerNames.at(lp);
            le["layer_position"] = lp;
            layers.push_back(le);
        }
        e["layers"] = layers;
        json heads = json::array();
        for (const auto& [key, agg] : s.perHead[p]) {
            json he = agg.toJson();
            he.erase("magnitude_mean");
            he["layer"] = s.layerNames.at(key.first);
            he["layer_position"] = key.first;
            he["head"] = key.second;
            heads.push_back(std::move(he));
        }
        e["heads"] = std::move(heads);
        if (!s.perLabel[p].empty()) {
            const std::map<std::int64_t, std::int64_t> images = imagesPerLabel();
            json labels = json::array();
            for (const auto& [label, agg] : s.perLabel[p]) {
                json be = agg.toJson();
                be.erase("magnitude_mean");
                be["label"] = label;
                be["images"] = images.count(label) ? images.at(label) : 0;
                labels.push_back(std::move(be));
            }
            e["labels"] = std::move(labels);
        }
        if (s.anyConfusion) {
            json perImg = json::array();
            for (const auto& [img, count] : confusionPerImage(int(p)))
                perImg.push_back({{"image", img}, {"confused_pairs", count}});
            e["confusion_per_image"] = perImg;
            e["confusion_histogram"] = histogramJson(confusionHistogram(int(p), 0));
            // Several models in one dump (layer names <model>.<block>): their images' counts
            // summed over all layers mix the models, so each model gets its own histogram too.
            if (modelNames.size() > 1) {
                json perModel = json::array();
                for (const std::string& model : modelNames) {
                    json h = histogramJson(confusionHistogram(int(p), 0, model));
                    h["model"] = model;
                    perModel.push_back(std::move(h));
                }
                e["confusion_histogram_per_model"] = std::move(perModel);
            }
        }
        out.push_back(e);
    }
    json summary = {
        {"per_paradigm", out},
        {"note",
         "means over (image, layer, head) records (per_paradigm[].layers: per layer; .heads: per (layer, "
         "head); .labels: per image label, for dumps with /labels); confusion counts summed over layers and "
         "heads per image"}};
    if (s.skipped > 0) {
        summary["skipped_image_layers"] = s.skipped;
        summary["note"] = summary["note"].get<std::string>() +
                          "; (image, layer)s listed in \"skipped\" could not be read and have no records";
    }
    return summary;
}

std::map<int, std::int64_t> imageLabelsOf(const nlohmann::json& report) {
    std::map<int, std::int64_t> out;
    if (report.contains("image_labels"))
        for (const json& e : report["image_labels"]) out[e.at("image").get<int>()] = e.at("label").get<std::int64_t>();
    return out;
}

nlohmann::json summarize(const nlohmann::json& report) {
    std::vector<std::string> order;
    for (const auto& p : report.at("paradigms")) order.push_back(p.at("name").get<std::string>());
    ReportSummary summary(std::move(order));
    const std::map<int, std::int64_t> labels = imageLabelsOf(report);
    for (const auto& r : report.at("results")) {
        const auto it = labels.find(r.at("image").get<int>());
        summary.add(r, it == labels.end() ? std::nullopt : std::optional<std::int64_t>(it->second));
    }
    if (report.contains("skipped")) summary.addSkipped(std::int64_t(report["skipped"].size()));
    return summary.toJson();
}

namespace {

// The queries and keys of each layer of a report's dump (input.dump.layers; 0 where a report does
// not say), by layer name.
std::map<std::string, detail::HeadShape> layerShapes(const json& report) {
    std::map<std::string, detail::HeadShape> out;
    const json& dump = report.value("input", json::object()).value("dump", json::object());
    for (const json& layer : dump.value("layers", json::array())) {
        if (!layer.is_object() || !layer.contains("name") || !layer["name"].is_string()) continue;
        detail::HeadShape shape;
        if (layer.contains("tokens") && layer["tokens"].is_number()) shape.queries = layer["tokens"].get<double>();
        shape.keys = shape.queries;
        if (layer.contains("keys") && layer["keys"].is_object() && layer["keys"].contains("tokens") &&
            layer["keys"]["tokens"].is_number())
            shape.keys = layer["keys"]["tokens"].get<double>();
        out[layer["name"].get<std::string>()] = shape;
    }
    return out;
}

// Holds a summary state's running means and totals to what its records allow (statistic_bounds.h),
// as merge holds JSON records: each mean over at most `records` values and within the range of its
// statistic on the layer's head (the largest head of the dump for overall and per-label means),
// totals within records x their per-head bound, per-layer and per-head records adding up to the
// paradigm's, labels among the dump's classes. Throws std::invalid_argument naming the place.
void checkSummaryStateBounds(const json& state, const json& report) {
    using detail::StatisticBound;
    const std::map<std::string, detail::HeadShape> shapes = layerShapes(report);
    detail::HeadShape largest;
    for (const auto& [name, shape] : shapes) {
        largest.queries = std::max(largest.queries, shape.queries);
        largest.keys = std::max(largest.keys, shape.keys);
    }
    if (shapes.empty() || std::any_of(shapes.begin(), shapes.end(),
                                      [](const auto& s) { return s.second.queries <= 0 || s.second.keys <= 0; }))
        largest = {};  // some layer's size unknown: no bound from sizes
    std::set<std::string> softmax;
    for (const json& p : report.value("paradigms", json::array()))
        if (p.is_object() && p.value("normalisation", json()) == "softmax" && p.contains("name") &&
            p["name"].is_string())
            softmax.insert(p["name"].get<std::string>());
    std::map<int, std::string> layerNames;
    for (const json& l : state.at("layer_names")) layerNames[l.at(0).get<int>()] = l.at(1).get<std::string>();
    const auto shapeOf = [&](int position) {
        const auto name = layerNames.find(position);
        const auto it = name == layerNames.end() ? shapes.end() : shapes.find(name->second);
        return it == shapes.end() ? detail::HeadShape{} : it->second;
    };
    std::int64_t classes = -1;
    if (report.contains("input") && report["input"].contains("dump") &&
        report["input"]["dump"].contains("class_names") && report["input"]["dump"]["class_names"].is_array())
        classes = std::int64_t(report["input"]["dump"]["class_names"].size());
    const auto label = [&](const json& value, const std::string& where) {
        const std::int64_t l = value.get<std::int64_t>();
        if (l < 0 || (classes >= 0 && l >= classes))
            throw std::invalid_argument(where + ": label " + std::to_string(l) + " is not one of the dump's " +
                                        std::to_string(classes) + " classes (input.dump.class_names)");
    };
    const auto fail = [](const std::string& where, const std::string& what) {
        throw std::invalid_argument(where + ": " + what);
    };
    // One aggregate of `shape`'s heads.
    const auto aggregate = [&](const json& a, const std::string& where, detail::HeadShape shape) {
        const std::int64_t records = a.at("records").get<std::int64_t>();
        if (records < 0) fail(where + ".records", std::to_string(records) + " is not a count");
        const auto mean = [&](const json& m, const std::string& at, detail::StatisticRange range) {
            const detail::FiniteMean f = detail::FiniteMean::fromState(m);
            if (f.n > records)
                fail(at, "a mean over " + std::to_string(f.n) + " values of " + std::to_string(records) +
                             " records (a record gives at most one)");
            if (f.n == 0) {
                if (f.sum != 0) fail(at, "a sum of no values must be 0");
                return;
            }
            const detail::AllowedInterval allowed = detail::allowedInterval(range, shape);
            if (!allowed.allows(f.mean()))
                fail(at,
                     "the mean " + shown(json(f.mean())) + " is impossible: " + allowed.because + " " + allowed.text());
        };
        const json& means = a.at("means");
        const json& perK = a.at("per_k");
        for (const StatisticBound& b : detail::statisticBounds()) {
            if (!b.stateKey) continue;
            if (b.where == StatisticBound::Mean && means.contains(b.stateKey)) {
                mean(means[b.stateKey], where + ".means." + b.stateKey, b.range);
            } else if (b.where == StatisticBound::PerK && perK.contains(b.stateKey)) {
                for (const auto& [k, m] : perK[b.stateKey].items())
                    mean(m, where + ".per_k." + b.stateKey + "." + k, b.range);
            } else if (b.where == StatisticBound::MagnitudeCurve && a.contains("magnitude") &&
                       a["magnitude"].contains(b.stateKey)) {
                const json& curve = a["magnitude"][b.stateKey];
                for (std::size_t i = 0; i < curve.size(); ++i)
                    mean(curve[i], where + ".magnitude." + b.stateKey + "[" + std::to_string(i) + "]", b.range);
            } else if (b.where == StatisticBound::RayProbe && a.contains("ray_probe") &&
                       a["ray_probe"].contains(b.stateKey)) {
                const json& v = a["ray_probe"][b.stateKey];
                if (v.is_array() && (v.empty() || v[0].is_array())) {  // a curve (per factor), maybe empty
                    for (std::size_t i = 0; i < v.size(); ++i)
                        mean(v[i], where + ".ray_probe." + b.stateKey + "[" + std::to_string(i) + "]", b.range);
                } else {
                    mean(v, where + ".ray_probe." + b.stateKey, b.range);
                }
            }
        }
        const auto total = [&](const char* key, detail::StatisticRange perHead) {
            const double v = a.at(key).get<double>();
            const detail::AllowedInterval head = detail::allowedInterval(perHead, shape);
            if (!(v >= 0 && v <= head.hi * double(records)))
                fail(where + "." + key, shown(a.at(key)) + " is impossible over " + std::to_string(records) +
                                            " records: " + head.because + " " + head.text() + " per record");
        };
        total("confused", detail::StatisticRange::Pairs);
        total("flagged", detail::StatisticRange::Rows);
        return records;
    };
    const std::vector<std::string> paradigms = state.at("paradigms").get<std::vector<std::string>>();
    for (std::size_t p = 0; p < paradigms.size(); ++p) {
        const std::string of = "[paradigm " + printableText(paradigms[p]) + "]";
        detail::HeadShape overallShape = largest;
        overallShape.softmax = softmax.count(paradigms[p]) > 0;
        const std::int64_t records = aggregate(state.at("overall")[p], "overall" + of, overallShape);
        std::int64_t layerRecords = 0;
        std::map<int, std::int64_t> perLayer, headsOfLayer;
        for (const json& e : state.at("per_layer")[p]) {
            const int position = e.at(0).get<int>();
            detail::HeadShape shape = shapeOf(position);
            shape.softmax = overallShape.softmax;
            const std::string where = "per_layer" + of + "[layer " + printableText(layerNames[position]) + "]";
            perLayer[position] = aggregate(e.at(1), where, shape);
            layerRecords += perLayer[position];
        }
        if (layerRecords != records)
            fail("per_layer" + of, "its layers count " + std::to_string(layerRecords) +
                                       " records where overall counts " + std::to_string(records));
        for (const json& e : state.at("per_head")[p]) {
            const int position = e.at(0).get<int>();
            detail::HeadShape shape = shapeOf(position);
            shape.softmax = overallShape.softmax;
            headsOfLayer[position] += aggregate(e.at(2),
                                                "per_head" + of + "[layer " + printableText(layerNames[position]) +
                                                    ", head " + std::to_string(e.at(1).get<int>()) + "]",
                                                shape);
        }
        if (!state.at("per_head")[p].empty() && headsOfLayer != perLayer)
            fail("per_head" + of, "its heads' records do not add up to their layers' (per_layer)");
        for (const json& e : state.at("per_label")[p]) {
            const std::string where = "per_label" + of + "[label " + shown(e.at(0)) + "]";
            label(e.at(0), where);
            aggregate(e.at(1), where, overallShape);
        }
    }
    for (const json& e : state.at("image_labels")) label(e.at(1), "image_labels[image " + shown(e.at(0)) + "]");
}

// Adds a report's summary_state to `into`, checked against its record_detail.
void addSummaryState(const json& report, const std::string& name, std::optional<ReportSummary>& into) {
    const json& d = report.contains("record_detail") ? report["record_detail"] : json();
    try {
        if (!d.is_object() || !d.contains("records") || !d["records"].is_number_integer())
            throw std::invalid_argument("a summary_state without record_detail.records");
        ReportSummary state = ReportSummary::fromStateJson(report["summary_state"]);
        checkSummaryStateBounds(report["summary_state"], report);
        if (state.records() != d["records"].get<std::int64_t>())
            throw std::invalid_argument("it counts " + std::to_string(state.records()) +
                                        " records where record_detail.records says " +
                                        std::to_string(d["records"].get<std::int64_t>()));
        if (into)
            into->merge(state);
        else
            into = std::move(state);
    } catch (const std::exception& e) {
        throwInput("merge: " + printableText(name) + ": summary_state: " + printableText(e.what(), 300) +
                   "; merge takes reports written by attnlens-cli analyze");
    }
}

}  // namespace

void foldSummaryState(nlohmann::json& report, const std::string& name, std::optional<ReportSummary>& into) {
    if (!report.is_object() || !report.contains("summary_state")) return;
    addSummaryState(report, name, into);
    report.erase("summary_state");
    report.erase("summary");
    report["summary_state_folded"] = true;
}

nlohmann::json mergeReports(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& names,
                            const ToolInfo& tool, std::optional<ReportSummary> folded,
                            const MergeCoverageOptions& coverageOptions) {
    if (reports.empty()) throwUsage("merge: no input reports");
    auto fail = [&](std::size_t i, const std::string& what) {
        throwInput("merge: " + printableText(names[i]) + ": " + what + " (differs from " + printableText(names[0]) +
                   ")");
    };
    std::vector<MergeInput> inputs;
    for (std::size_t i = 0; i < reports.size(); ++i) {
        const auto& r = reports[i];
        if (!r.is_object() || !r.contains("schema") || r["schema"] != "attnlens.analysis")
            throwInput("merge: " + printableText(names[i]) +
                       " is not an attnlens analysis report (no \"schema\": \"attnlens.analysis\")");
        if (!r.contains("schema_version") || r["schema_version"] != 1)
            throwInput("merge: " + printableText(names[i]) + ": schema_version " +
                       printableText(r.value("schema_version", json(nullptr)).dump(), 80) + " is not supported (1)");
        for (const char* key : {"input", "selection", "paradigms", "options", "results"})
            if (!r.contains(key)) throwInput("merge: " + printableText(names[i]) + ": missing \"" + key + "\"");
        inputs.push_back(checkMergeInput(r, names[i]));
    }
    // Reports without JSON records (analyze --records hdf5|none) merge by their summary states.
    const auto detailOf = [](const json& r) {
        return r.contains("record_detail") && r["record_detail"].is_object()
                   ? r["record_detail"].value("format", std::string("?"))
                   : std::string("json");
    };
    const std::string detail = detailOf(reports[0]);
    std::optional<ReportSummary> mergedState;
    std::int64_t detailRecords = 0;
    json imageLabels = json::array();
    for (std::size_t i = 0; i < reports.size(); ++i) {
        const json& r = reports[i];
        if (detailOf(r) != detail)
            fail(i, "records kept as " + printableText(detailOf(r), 20) + " where the first has them as " +
                        printableText(detail, 20) + " (merge reports written with one --records)");
        if (r.contains("image_labels")) {
            if (!r["image_labels"].is_array()) fail(i, "\"image_labels\" is not an array");
            for (const json& e : r["image_labels"]) {
                if (!e.is_object() || !e.contains("image") || !e["image"].is_number_integer() || !e.contains("label") ||
                    !e["label"].is_number_integer())
                    fail(i, "an \"image_labels\" entry is not {image, label} with integers: " + shown(e));
                imageLabels.push_back(e);
            }
        }
        if (detail == "json") continue;
        if (detail != "hdf5" && detail != "none")
            fail(i, "record_detail.format " + printableText(detail, 20) + " is not json, hdf5 or none");
        const json& d = r["record_detail"];
        if (!d.contains("records") || !d["records"].is_number_integer() || d["records"].get<std::int64_t>() < 0)
            fail(i, "record_detail.records is not a count");
        if (!r["results"].empty()) fail(i, "results listed beside record_detail " + detail);
        if (r.contains("summary_state")) {
            addSummaryState(r, names[i], mergedState);
        } else if (!r.value("summary_state_folded", false)) {
            fail(i, "no \"summary_state\" (needed to merge reports without records)");
        }
        detailRecords += d["records"].get<std::int64_t>();
    }
    std::map<RecordKey, std::size_t> seenRecords;  // -> the input that has it
    const json& first = reports[0];
    std::set<int> seenImages;
    json merged = first;
    merged["results"] = json::array();
    merged["non_finite"] = json::array();
    json skipped = json::array();
    json notes = json::array();
    json images = json::array();
    json sources = json::array();
    double seconds = 0;
    for (std::size_t i = 0; i < reports.size(); ++i) {
        const json& r = reports[i];
        const json& in = r["input"];
        const json& in0 = first["input"];
        const auto hashOf = [](const json& input) {
            return input.contains("sha256") && input["sha256"].is_string() ? input["sha256"].get<std::string>()
                                                                           : std::string();
        };
        if (!hashOf(in).empty() && !hashOf(in0).empty()) {
            if (hashOf(in) != hashOf(in0) || in.value("size_bytes", json()) != in0.value("size_bytes", json()))
                fail(i, "a different input dump (sha256 " + printableText(hashOf(in), 80) + ")");
            if (withoutPath(in["dump"]) != withoutPath(in0["dump"]))
                fail(i, "the same sha256 but a different dump description (input.dump)");
        } else if (in.value("path", json()) != in0.value("path", json()) ||
                   in.value("size_bytes", json()) != in0.value("size_bytes", json()) ||
                   in.value("dump", json()) != in0.value("dump", json())) {
            // Reports made with --no-hash: two different dumps of equal size must not merge, so
            // the same input path, size and dump description are asked for instead.
            throwInput("merge: " + printableText(names[i]) + ": input " +
                       printableText(in.value("path", json()).dump()) + " is not the input " +
                       printableText(in0.value("path", json()).dump()) + " of " + printableText(names[0]) +
                       " (or it changed between the runs), and without SHA-256 (analyze --no-hash) nothing "
                       "shows that they are the same dump");
        }
        if (r["paradigms"] != first["paradigms"]) fail(i, "different paradigms");
        if (r["options"] != first["options"]) fail(i, "different analysis options");
        if (r["selection"]["layers"] != first["selection"]["layers"]) fail(i, "different layers");
        if (r["selection"]["heads"] != first["selection"]["heads"]) fail(i, "different heads");
        for (const auto& img : r["selection"]["images"]) {
            const int b = img.get<int>();
            if (!seenImages.insert(b).second)
                throwInput("merge: image " + std::to_string(b) + " appears in more than one report (" +
                           printableText(names[i]) + "); merge needs disjoint image ranges");
            images.push_back(b);
        }
        // Each record lies in its report's selection (checkMergeInput), so disjoint selections
        // mean disjoint records; checked directly all the same.
        for (std::size_t k = 0; k < inputs[i].keys.size(); ++k) {
            const RecordKey& key = inputs[i].keys[k];
            const auto [it, inserted] = seenRecords.emplace(key, i);
            if (!inserted)
                throwInput("merge: " + printableText(names[i]) + ": results[" + std::to_string(k) + "] " +
                           describeKey(key, inputs[i].dump.layerNames[std::size_t(key.layerPosition)]) +
                           ": this record is also in " + printableText(names[it->second]) +
                           "; merge needs disjoint image ranges");
        }
        for (const auto& res : r["results"]) merged["results"].push_back(res);
        if (r.contains("non_finite"))
            for (const auto& nf : r["non_finite"]) merged["non_finite"].push_back(nf);
        if (r.contains("skipped"))
            for (const auto& entry : r["skipped"]) skipped.push_back(entry);
        if (r.contains("notes") && r["notes"].is_array())
            for (const auto& note : r["notes"])
                if (note.is_string()) notes.push_back(note);
        if (r.contains("timing") && r["timing"].contains("seconds") && r["timing"]["seconds"].is_number())
            seconds += r["timing"]["seconds"].get<double>();
        sources.push_back(
            {{"file", names[i]}, {"images", r["selection"]["images"]}, {"created_utc", r.value("created_utc", "")}});
    }
    std::vector<int> sorted(seenImages.begin(), seenImages.end());
    merged["selection"]["images"] = sorted;
    // Images are disjoint and every shard's own (checked above): now what they cover of the study.
    std::optional<StudyShard> study;
    const StudyCoverage coverage = checkMergeCoverage(reports, names, coverageOptions, study);
    if (study)
        merged["selection"]["study"] = studyJson(*study);
    else
        merged["selection"].erase("study");
    merged["coverage"] = coverageJson(coverage);
    auto& res = merged["results"];
    std::stable_sort(res.begin(), res.end(), [](const json& a, const json& b) {
        return std::make_tuple(a["image"].get<int>(), a["layer_position"].get<int>(), a["head"].get<int>()) <
               std::make_tuple(b["image"].get<int>(), b["layer_position"].get<int>(), b["head"].get<int>());
    });
    std::stable_sort(skipped.begin(), skipped.end(), [](const json& a, const json& b) {
        return std::make_tuple(a["image"].get<int>(), a["layer_position"].get<int>()) <
               std::make_tuple(b["image"].get<int>(), b["layer_position"].get<int>());
    });
    if (skipped.empty())
        merged.erase("skipped");
    else
        merged["skipped"] = std::move(skipped);
    if (notes.empty())
        merged.erase("notes");
    else
        merged["notes"] = std::move(notes);
    merged["tool"] = {{"name", tool.name}, {"version", tool.version}, {"command", tool.command}};
    merged["created_utc"] = utcNow();
    merged["merged_from"] = sources;
    merged["timing"] = {{"seconds", seconds}, {"threads", nullptr}, {"note", "sum of the merged runs' times"}};
    if (imageLabels.empty()) {
        merged.erase("image_labels");
    } else {
        std::stable_sort(imageLabels.begin(), imageLabels.end(),
                         [](const json& a, const json& b) { return a["image"].get<int>() < b["image"].get<int>(); });
        merged["image_labels"] = std::move(imageLabels);
    }
    if (folded) {
        if (mergedState)
            mergedState->merge(*folded);
        else
            mergedState = std::move(*folded);
    }
    merged.erase("summary_state_folded");
    if (detail != "json" && !mergedState) throwUsage("merge: the summary states of the reports were not given");
    if (mergedState) {
        merged["summary"] = mergedState->toJson();
        merged["summary_state"] = mergedState->stateJson();
        merged["record_detail"]["records"] = detailRecords;
    } else {
        merged["summary"] = summarize(merged);
    }
    return merged;
}

void mergeRecordTables(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& names,
                       nlohmann::json& merged, const std::string& outputReport, const std::string& outputTable,
                       const std::vector<std::string>& forbidden) {
    namespace fs = std::filesystem;
    if (!merged.contains("record_detail") || merged["record_detail"].value("format", "") != "hdf5") return;
    const json& detail = reports.at(0)["record_detail"];
    std::vector<RecordColumn> columns;
    try {
        for (const json& c : detail.at("columns"))
            columns.push_back({c.at("name").get<std::string>(), c.at("dtype").get<std::string>() == "int32",
                               c.at("width").get<std::uint64_t>(), c.value("definition", std::string())});
    } catch (const json::exception& e) {
        throwInput("merge: " + printableText(names[0]) + ": record_detail.columns: " + jsonErrorText(e));
    }
    std::vector<RecordTableInput> inputs;
    for (std::size_t i = 0; i < reports.size(); ++i) {
        if (reports[i]["record_detail"].value("columns", json()) != detail["columns"])
            throwInput("merge: " + printableText(names[i]) + ": other record table columns than " +
                       printableText(names[0]) + " (made with other options)");
        RecordTableInput in;
        in.file = recordTableOf(reports[i], names[i]);
        in.report = names[i];
        in.records = reports[i]["record_detail"]["records"].get<std::int64_t>();
        in.images = reports[i]["selection"]["images"].get<std::vector<int>>();
        inputs.push_back(std::move(in));
    }
    // In image order, so that shards of disjoint image ranges give a table ordered by image.
    std::stable_sort(inputs.begin(), inputs.end(), [](const RecordTableInput& a, const RecordTableInput& b) {
        const int ia = a.images.empty() ? INT_MAX : *std::min_element(a.images.begin(), a.images.end());
        const int ib = b.images.empty() ? INT_MAX : *std::min_element(b.images.begin(), b.images.end());
        return ia < ib;
    });
    RecordTableShape shape;
    const std::map<std::string, detail::HeadShape> shapes = layerShapes(merged);
    for (const json& layer : merged["input"]["dump"]["layers"]) {
        shape.layerHeads.push_back(layer["heads"].get<int>());
        const detail::HeadShape head = shapes.at(layer["name"].get<std::string>());
        shape.layerQueries.push_back(std::int64_t(head.queries));
        shape.layerKeys.push_back(std::int64_t(head.keys));
    }
    for (const json& p : merged["paradigms"])
        shape.softmaxParadigms.push_back(p.value("normalisation", json()) == "softmax");
    std::vector<std::string> tableForbidden = forbidden;
    tableForbidden.push_back(outputReport);
    for (const RecordTableInput& in : inputs) tableForbidden.push_back(in.file);
    concatenateRecordTables(inputs, columns, shape, outputTable, tableForbidden);
    const fs::path folder = fs::absolute(fs::path(outputReport)).parent_path();
    merged["record_detail"]["file"] = fs::absolute(fs::path(outputTable)).lexically_relative(folder).string();
}

std::string reportText(const nlohmann::json& report) {
    // Text from files and arguments is checked where it enters (attnlens/text.h); a file path
    // that is not UTF-8 (legal on Linux) is the one exception, and gets U+FFFD in the report.
    constexpr auto kReplaceInvalidUtf8 = json::error_handler_t::replace;
    if (!report.is_object()) return report.dump(1, ' ', false, kReplaceInvalidUtf8) + "\n";
    // Every record compact on its own line, serialised in parallel chunks.
    const json* results = report.contains("results") && report["results"].is_array() ? &report["results"] : nullptr;
    std::vector<std::string> lines(results ? results->size() : 0);
    if (results)
        detail::parallelForChunks(lines.size(), 256, detail::processorCount(), [&](std::size_t begin, std::size_t end) {
            for (std::size_t i = begin; i < end; ++i)
                lines[i] = (*results)[i].dump(-1, ' ', false, kReplaceInvalidUtf8);
        });
    std::size_t total = 4096;
    for (const auto& l : lines) total += l.size() + 4;
    std::string out;
    out.reserve(total);
    out += "{";
    bool first = true;
    for (const auto& [key, value] : report.items()) {
        out += first ? "\n " : ",\n ";
        first = false;
        out += json(key).dump();
        out += ": ";
        if (results && &value == results) {
            out += "[";
            for (std::size_t i = 0; i < lines.size(); ++i) {
                out += i ? ",\n  " : "\n  ";
                out += lines[i];
            }
            out += lines.empty() ? "]" : "\n ]";
            continue;
        }
        // Nested fields as dump(1) would indent them one level deeper.
        const std::string text = value.dump(1, ' ', false, kReplaceInvalidUtf8);
        for (char c : text) {
            out += c;
            if (c == '\n') out += ' ';
        }
    }
    out += "\n}\n";
    return out;
}

std::string formatSummary(const nlohmann::json& report) {
    std::ostringstream out;
    // A merge that covers less than its study says so first: every mean below is over what is there.
    if (report.contains("coverage") && report["coverage"].is_object() && !report["coverage"].value("complete", true)) {
        const json& c = report["coverage"];
        out << "PARTIAL: " << c.value("covered_count", json()).dump() << " of the "
            << c.value("intended_count", json()).dump() << " intended images (" << c.value("source", std::string("?"))
            << "); missing " << printableText(c.value("missing_images", std::string("?")), 200);
        if (c.contains("missing_shards") && c["missing_shards"].is_array() && !c["missing_shards"].empty()) {
            std::string shards;
            for (const json& k : c["missing_shards"]) shards += (shards.empty() ? "" : ", ") + k.dump();
            out << " (" << (c["missing_shards"].size() == 1 ? "shard " : "shards ") << printableText(shards, 200)
                << " of " << c.value("shards", json()).dump() << ")";
        }
        out << "; every figure below is over the covered images only\n";
    }
    const json& s = report.at("summary").at("per_paradigm");
    std::vector<int> ks;
    if (!s.empty())
        for (const auto& [k, v] : s[0]["local"].items()) ks.push_back(std::stoi(k));
    std::sort(ks.begin(), ks.end());
    auto col = [&](const std::string& text, int width) { out << std::left << std::setw(width) << text; };
    col("paradigm", 13);
    col("rank/bound", 11);
    col("eff.rank", 9);
    for (int k : ks) col("local" + std::to_string(k) + "x" + std::to_string(k) + " (x unif)", 19);
    col("H/log|S|", 9);
    col("max w", 8);
    col("neg rows", 9);
    col("neg w", 8);
    col("confused (far)", 16);
    col("flagged", 8);
    out << "\n";
    for (const auto& p : s) {
        col(p["paradigm"].get<std::string>(), 13);
        const json bound = p.value("rank_bound_mean", json());
        col(fmt(p["rank_mean"], 1) + (bound.is_number() ? "/" + fmt(bound, 0) : std::string()), 11);
        col(fmt(p["effective_rank_mean"], 1), 9);
        for (int k : ks) {
            const json& l = p["local"][std::to_string(k)];
            const json times = l.value("x_uniform", json());
            col(fmt(l["mean"]) + (times.is_number() ? " (" + fmt(times, 2) + "x)" : std::string(" (-)")), 19);
        }
        const json admissible = p.value("normalised_entropy_admissible_mean", json());
        col(fmt(admissible.is_number() ? admissible : p["normalised_entropy_mean"]), 9);
        col(fmt(p["max_weight_mean"]), 8);
        col(fmt(p["negative_row_fraction_mean"]), 9);
        col(fmt(p.value("negative_weight_fraction_mean", json())), 8);
        col(p["confused_pairs_total"].is_number()
                ? p["confused_pairs_total"].dump() + (p.value("confused_pairs_far_total", json()).is_number()
                                                          ? " (" + p["confused_pairs_far_total"].dump() + ")"
                                                          : std::string())
                : "-",
            16);
        col(p["flagged_rows_total"].dump(), 8);
        out << "\n";
    }
    if (!s.empty() && !ks.empty()) {
        // The baseline of each layer (uniform attention over the keys each row may attend to): one
        // line when every layer has the same, else one per layer; a single figure would be wrong.
        const auto baselines = [&](const json& entry) {
            std::string line;
            for (int k : ks) {
                const json& l = entry["local"][std::to_string(k)];
                const json b = l.value("admissible_baseline", json());
                line += " " + std::to_string(k) + "x" + std::to_string(k) + " " +
                        fmt(b.is_number() ? b : l["uniform_baseline"], 4);
            }
            return line;
        };
        std::vector<std::pair<std::string, std::string>> perLayer;
        if (s[0].contains("layers"))
            for (const auto& l : s[0]["layers"]) perLayer.emplace_back(l["layer"].get<std::string>(), baselines(l));
        const bool same = std::all_of(perLayer.begin(), perLayer.end(),
                                      [&](const auto& l) { return l.second == perLayer.front().second; });
        const char* what =
            " (mean over queries of |k x k window ∩ S_i| / |S_i|, S_i the keys row i may attend to: "
            "all N, the n reduced keys, or its window)\n";
        if (perLayer.empty() || same) {
            out << "uniform baseline:" << (perLayer.empty() ? baselines(s[0]) : perLayer.front().second) << what;
        } else {
            out << "uniform baseline per layer" << what;
            for (const auto& [name, line] : perLayer) out << "  " << printableText(name) << ":" << line << "\n";
        }
    }
    out << "means over " << (s.empty() ? 0 : s[0]["records"].get<std::int64_t>())
        << " (image, layer, head) records per paradigm; rank = numerical rank / the bound its algebra allows (d, d + 1 "
           "with a row offset, min(N, n) for softmax), local = k x k mass, x unif = mass "
           "over its uniform baseline (mean over records), H/log|S| = entropy over log of the admissible keys, "
           "neg rows / neg w = rows with a negative weight / negative weights, far = confused pairs whose queries are "
           "far apart";
    out << "\n";
    // Registered statistics (registered_statistics.h): one line per paradigm that has them.
    for (const auto& p : s)
        if (p.contains("registered_means")) {
            out << "registered, " << p["paradigm"].get<std::string>() << ":";
            for (const auto& [key, mean] : p["registered_means"].items()) out << " " << key << " " << fmt(mean, 4);
            out << "\n";
        }
    // The local branch beside the attention, per (paradigm, layer) that has one.
    bool header = false;
    for (const auto& p : s)
        for (const auto& l : p["layers"]) {
            if (!l.contains("local_branch")) continue;
            const json& b = l["local_branch"];
            if (!header) {
                out << "\nlocal branch: E_c = A + M_c per V channel (rank: A -> median over channels of E_c; "
                       "3x3: signed mass and share of |row|_1 in the window, A -> E_mean)\n";
                col("paradigm", 13);
                col("layer", 24);
                col("rank A", 8);
                col("rank E_c", 10);
                col("E_c min-max", 12);
                col("3x3 A", 8);
                col("3x3 E", 8);
                col("|3x3| A", 9);
                col("|3x3| E", 9);
                col("branch share", 12);
                out << "\n";
                header = true;
            }
            col(p["paradigm"].get<std::string>(), 13);
            col(l["layer"].get<std::string>(), 24);
            col(fmt(b.value("rank_without_mean", json()), 1), 8);
            col(fmt(b.value("rank_median_mean", json()), 1), 10);
            col(b.value("rank_min", json()).is_number() ? b["rank_min"].dump() + "-" + b["rank_max"].dump()
                                                        : std::string("-"),
                12);
            const json l3 = b["local"].contains("3") ? b["local"]["3"] : json::object();
            col(fmt(l3.value("without", json())), 8);
            col(fmt(l3.value("with", json())), 8);
            col(fmt(l3.value("abs_fraction_without", json())), 9);
            col(fmt(l3.value("abs_fraction_with", json())), 9);
            col(fmt(b["branch_share_mean"]), 12);
            out << "\n";
        }
    // Distance to the reference paradigm, per paradigm.
    header = false;
    for (const auto& p : s) {
        if (!p.contains("distance")) continue;
        const json& d = p["distance"];
        if (!header) {
            out << "\ndistance to " << printableText(d.value("reference", std::string())) << " on the same q, k, v "
                << "(means over records of the mean over queries; JS over the rows without a negative weight, "
                   "JS over = their share of the compared queries; O = A V, with branch: O + B)\n";
            col("paradigm", 13);
            col("TV", 8);
            col("JS", 8);
            col("JS over", 9);
            col("|dO|/|O|", 10);
            col("with branch", 12);
            col("cos(O)", 8);
            out << "\n";
            header = true;
        }
        col(p["paradigm"].get<std::string>(), 13);
        col(fmt(d["total_variation_mean"]), 8);
        col(fmt(d["jensen_shannon_mean"]), 8);
        const json coverage = d.value("jensen_shannon_coverage", json());
        col(coverage.is_number() ? fmt(coverage.get<double>() * 100, 1) + "%" : std::string("-"), 9);
        col(fmt(d["output_relative_error_mean"]), 10);
        col(fmt(d["output_relative_error_with_branch_mean"]), 12);
        col(fmt(d["output_cosine_mean"]), 8);
        out << "\n";
    }
    if (report.contains("skipped") && !report["skipped"].empty()) {
        out << "\nskipped (image, layer)s, unreadable (analyze --skip-unreadable); the means above leave them out:\n";
        for (const auto& entry : report["skipped"])
            out << "  image " << entry.value("image", json()).dump() << ", layer "
                << printableText(entry.value("layer", std::string())) << ": "
                << printableText(entry.value("message", std::string()), 400) << "\n";
    }
    return out.str();
}

void writeFileAtomically(const std::string& path, const std::string& contents,
                         const std::vector<std::string>& forbidden) {
    AtomicFileWriter file(path, forbidden);
    file.append(contents);
    file.commit();
}

}  // namespace attnlens
