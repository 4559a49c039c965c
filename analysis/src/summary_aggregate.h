#pragma once
// The means and totals behind a report's summary (ReportSummary's per-paradigm, per-layer, per-head,
// per-label and per-model cells): adding records, merging aggregates exactly, and their state.
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/report.h"
#include "report_internal.h"
#include "statistic_parts.h"

namespace attnlens::report_detail {

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

    // A record: its own counts, then each statistic's part (statistic_parts.h: summarise).
    void add(const HeadStatistics& s) {
        ++records;
        flagged += s.flaggedRows;
        for (const auto& [key, value] : s.registered) registered[key].add(value);
        for (const StatisticParts* parts : statisticTable()) (this->*parts->summarise)(s);
    }

    // Each statistic's part of add (statistic_parts.h: summarise), in its own file
    // (statistic_<name>.cpp): nothing when the record has no such result.
    void addSpectrum(const HeadStatistics& s);
    void addLocal(const HeadStatistics& s);
    void addEntropy(const HeadStatistics& s);
    void addConfusion(const HeadStatistics& s);  // and its ray probe
    void addMagnitude(const HeadStatistics& s);
    void addDistance(const HeadStatistics& s);
    void addBranch(const HeadStatistics& s);  // beside A's own rank and local mass

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
    // The state's "means" (fromState).
    static void readMeans(Aggregate& a, const json& m) {
        a.rank = FiniteMean::fromState(m.at("rank"));
        a.effectiveRank = FiniteMean::fromState(m.at("effective_rank"));
        a.entropy = FiniteMean::fromState(m.at("entropy"));
        a.normalisedEntropy = FiniteMean::fromState(m.at("normalised_entropy"));
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
    }

    // The state's "per_k": every window size of the local mass in each of its per-k means.
    static void readPerK(Aggregate& a, const json& k) {
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
    }

    // The state's magnitude curves, each as long as its factors (none in states without them).
    static void readMagnitude(Aggregate& a, const json& j) {
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
    }

    static Aggregate fromState(const json& j) {
        Aggregate a;
        a.records = j.at("records").get<std::int64_t>();
        const json& m = j.at("means");
        // States written before the admissible keys: those means are unknown for these records.
        a.yardsticksIncomplete =
            j.value("yardsticks_incomplete", false) || !m.contains("normalised_entropy_admissible");
        readMeans(a, m);
        readPerK(a, j.at("per_k"));
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
        readMagnitude(a, j);
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

    // toJson's parts: the local mass per k beside its baselines, the branch, the distance, the curves.
    json localJson() const {
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
        return l;
    }

    json branchJson() const {
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
        return b;
    }

    json distanceJson() const {
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
        return d;
    }

    json magnitudeJson() const {
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
        return m;
    }

    json toJson() const {
        json j;
        j["records"] = records;
        j["rank_mean"] = rank.value();
        j["effective_rank_mean"] = effectiveRank.value();
        // Mean of the records' bounds, over those that have one (rank_bound_records of rank's records).
        j["rank_bound_mean"] = rankBound.value();
        j["rank_bound_records"] = rankBound.n;
        j["local"] = localJson();
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
        if (branchRecords > 0) j["local_branch"] = branchJson();
        if (distanceRecords > 0) j["distance"] = distanceJson();
        if (!magMax.empty()) j["magnitude_mean"] = magnitudeJson();
        if (!registered.empty()) {
            json r = json::object();
            for (const auto& [key, mean] : registered) r[key] = mean.value();
            j["registered_means"] = r;
        }
        return j;
    }
};

}  // namespace attnlens::report_detail
