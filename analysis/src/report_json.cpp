// The attnlens.analysis report as JSON: provenance, records and outcome written, records read back.
#include "attnlens/analysis/report.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attnlens/io/error.h"
#include "attnlens/math/blas.h"
#include "parallel.h"
#include "report_internal.h"

namespace attnlens {

namespace {

using nlohmann::json;
using report_detail::meanBranchShare;
using report_detail::utcNow;

json finiteOrNull(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json vectorJson(const std::vector<double>& v) {
    json a = json::array();
    for (double x : v) a.push_back(finiteOrNull(x));
    return a;
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

json spectrumJson(const SpectrumResult& sp) {
    json j = {{"rank", sp.rank},
              {"effective_rank", finiteOrNull(sp.effectiveRank)},
              {"size", sp.size},
              {"relative_tolerance", sp.relativeTolerance},
              {"tolerance", finiteOrNull(sp.tolerance)},
              {"method", sp.method},
              {"singular_values", vectorJson(sp.singularValues)}};
    if (!sp.windowRanks.empty()) j["window_ranks"] = sp.windowRanks;
    if (sp.bound > 0) {
        j["bound"] = sp.bound;
        j["bound_rule"] = sp.boundRule;
    }
    return j;
}

json localMassJson(const std::vector<LocalMassResult>& local, bool perQuery) {
    json a = json::array();
    for (const auto& l : local) {
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
    return a;
}

json entropyJson(const EntropyResult& f) {
    return {{"mean_entropy", finiteOrNull(f.meanEntropy)},
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

json confusionJson(const ConfusionResult& c) {
    return {{"confused_pairs", c.confusedPairs},
            {"identical_query_pairs", c.identicalQueryPairs},
            {"tau", c.tau},
            {"query_tolerance", c.queryTolerance},
            {"confused_pairs_far", c.confusedPairsFar},
            {"query_relative_floor", c.queryRelativeFloor},
            {"method", c.method}};
}

json rayProbeJson(const RayProbe& p) {
    return {{"factors", p.factors},
            {"total_variation_mean", vectorJson(p.totalVariationMean)},
            {"equal_fraction", finiteOrNull(p.equalFraction)},
            {"queries", p.queries}};
}

json magnitudeJson(const MagnitudeCurve& m) {
    return {{"factors", m.factors},
            {"max_weight", vectorJson(m.maxWeight)},
            {"entropy", vectorJson(m.entropy)},
            {"top_mass", vectorJson(m.topMass)},
            {"ratio", vectorJson(m.ratio)},
            {"spread", vectorJson(m.spread)},
            {"queries_averaged", m.queriesAveraged}};
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
    if (s.spectrum) j["rank"] = spectrumJson(*s.spectrum);
    if (!s.local.empty()) j["local"] = localMassJson(s.local, perQuery);
    if (s.entropy) j["entropy"] = entropyJson(*s.entropy);
    if (s.confusion) j["confusion"] = confusionJson(*s.confusion);
    if (s.rayProbe) j["ray_probe"] = rayProbeJson(*s.rayProbe);
    if (s.magnitude) j["magnitude"] = magnitudeJson(*s.magnitude);
    if (s.localBranch) j["local_branch"] = localBranchJson(*s.localBranch, s, ks);
    if (s.distance) j["distance"] = distanceJson(*s.distance);
    return j;
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
    // Records are independent: built in parallel chunks of 256, each into its own entry, on the
    // threads the analysis had.
    detail::parallelForChunks(entries.size(), 256, report.request.threads.count(),
                              [&](std::size_t begin, std::size_t end) {
                                  for (std::size_t i = begin; i < end; ++i)
                                      entries[i] = recordJson(report, report.records[i]);
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

namespace {

LocalMassResult localMassFromJson(const json& l) {
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
    return m;
}

EntropyResult entropyFromJson(const json& e) {
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
    return f;
}

ConfusionResult confusionFromJson(const json& c) {
    ConfusionResult f;
    f.confusedPairs = c.at("confused_pairs").get<std::int64_t>();
    f.identicalQueryPairs = c.value("identical_query_pairs", std::int64_t(0));
    f.tau = numberOrNaN(c.value("tau", json()));
    f.queryTolerance = numberOrNaN(c.value("query_tolerance", json()));
    f.method = c.value("method", std::string());
    f.confusedPairsFar = c.value("confused_pairs_far", std::int64_t(0));
    f.queryRelativeFloor = numberOrNaN(c.value("query_relative_floor", json()));
    return f;
}

RayProbe rayProbeFromJson(const json& p) {
    RayProbe probe;
    probe.factors = numbersOrNaN(p.at("factors"));
    probe.totalVariationMean = numbersOrNaN(p.at("total_variation_mean"));
    probe.equalFraction = numberOrNaN(p.at("equal_fraction"));
    probe.queries = p.value("queries", Index(0));
    return probe;
}

MagnitudeCurve magnitudeFromJson(const json& m) {
    MagnitudeCurve c;
    c.factors = numbersOrNaN(m.at("factors"));
    c.maxWeight = numbersOrNaN(m.at("max_weight"));
    c.entropy = numbersOrNaN(m.at("entropy"));
    c.topMass = numbersOrNaN(m.at("top_mass"));
    c.ratio = numbersOrNaN(m.at("ratio"));
    if (m.contains("spread")) c.spread = numbersOrNaN(m["spread"]);
    c.queriesAveraged = m.value("queries_averaged", Index(0));
    return c;
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
        for (const json& l : r["local"]) s.local.push_back(localMassFromJson(l));
    if (r.contains("entropy")) s.entropy = entropyFromJson(r["entropy"]);
    if (r.contains("confusion")) s.confusion = confusionFromJson(r["confusion"]);
    if (r.contains("ray_probe")) s.rayProbe = rayProbeFromJson(r["ray_probe"]);
    if (r.contains("magnitude")) s.magnitude = magnitudeFromJson(r["magnitude"]);
    if (r.contains("local_branch")) s.localBranch = localBranchFromJson(r["local_branch"]);
    if (r.contains("distance")) s.distance = distanceFromJson(r["distance"]);
    if (r.contains("registered"))
        for (const auto& [key, value] : r["registered"].items()) s.registered.emplace_back(key, numberOrNaN(value));
    return record;
}

}  // namespace attnlens
