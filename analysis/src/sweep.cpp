// Sweeps of one parameter (sweep.h): analyzeDump per point, its records folded into per-(layer,
// head) curves as they stream, never held.
#include "attnlens/analysis/sweep.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "attnlens/analysis/registered_statistics.h"
#include "attnlens/dump/list_parser.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "finite_mean.h"

namespace attnlens {
namespace {

using detail::FiniteMean;
using nlohmann::json;

struct ParameterInfo {
    SweepParameter parameter;
    std::string_view name;
    std::string_view field;  // Paradigm::toJson key ("" for alpha)
    std::string_view meaning;
};

constexpr std::array<ParameterInfo, 8> kParameters{{
    {SweepParameter::FocusingPower, "p", "focus_p", "the focused kernel's power p (FLatten Eq. 6, Fig. 4)"},
    {SweepParameter::SoftmaxScale, "scale", "softmax_scale", "the softmax logit scale (1 / temperature)"},
    {SweepParameter::C, "c", "c", "the scale c of D in subtract and magnitude normalisation (InLine Eq. 4, MALA)"},
    {SweepParameter::Eps, "eps", "eps", "eps of divide (N eps in the denominator) and magnitude normalisation"},
    {SweepParameter::FocusingShift, "shift", "focus_shift", "the shift of the focused kernel, ReLU(x) + shift"},
    {SweepParameter::LeakySlope, "slope", "leaky_slope", "the leaky ReLU kernel's negative slope"},
    {SweepParameter::QueryScale, "qscale", "",
     "the queries' magnitude factor a, every query scaled as in the magnitude curves (MALA Sec. 3.2): softmax "
     "scales the transformed query, kernel paradigms phi(q_i); the reference and the confusion's query "
     "comparison keep the model's queries (1: the model)"},
    {SweepParameter::BranchWeight, "alpha", "",
     "the local branch's weight: E_c = A + alpha M_c, output O + alpha B (1: the model's branch, 0: none)"},
}};

const ParameterInfo& infoOf(SweepParameter p) {
    for (const ParameterInfo& i : kParameters)
        if (i.parameter == p) return i;
    return kParameters[0];
}

// The per-record numbers a sweep follows, by JSON name (NaN: not in this record).
std::vector<std::pair<std::string, double>> sweptValues(const HeadStatistics& s) {
    std::vector<std::pair<std::string, double>> out;
    if (s.spectrum) {
        out.emplace_back("rank", double(s.spectrum->rank));
        out.emplace_back("effective_rank", s.spectrum->effectiveRank);
    }
    for (const LocalMassResult& l : s.local) {
        out.emplace_back("local_mass_k" + std::to_string(l.k), l.mean);
        out.emplace_back("local_x_uniform_k" + std::to_string(l.k), timesUniform(l.mean, l.admissibleBaseline));
        if (l.outputShare) out.emplace_back("local_output_share_k" + std::to_string(l.k), *l.outputShare);
    }
    if (s.entropy) {
        out.emplace_back("entropy", s.entropy->meanEntropy);
        out.emplace_back("normalised_entropy", s.entropy->meanNormalisedEntropy);
        out.emplace_back("normalised_entropy_admissible", s.entropy->meanAdmissibleNormalisedEntropy);
        out.emplace_back("max_weight", s.entropy->meanMaxWeight);
        out.emplace_back("negative_row_fraction", s.entropy->negativeRowFraction);
    }
    if (s.confusion) out.emplace_back("confused_pairs", double(s.confusion->confusedPairs));
    if (s.distance) {
        const DistanceResult& d = *s.distance;
        out.emplace_back("total_variation", d.totalVariation.mean);
        out.emplace_back("jensen_shannon", d.jensenShannon.mean);
        if (d.hasOutput) {
            out.emplace_back("output_relative_error", d.outputRelativeError);
            out.emplace_back("output_cosine", d.outputCosine.mean);
            if (d.outputRelativeErrorWithBranch)
                out.emplace_back("output_relative_error_with_branch", *d.outputRelativeErrorWithBranch);
        }
    }
    if (s.localBranch) {
        const LocalBranchResult& b = *s.localBranch;
        if (b.mean && b.mean->spectrum) {
            out.emplace_back("branch_rank_median", b.rankMedian);
            out.emplace_back("branch_rank_mean_channel", double(b.mean->spectrum->rank));
        }
        if (b.mean)
            for (std::size_t i = 0; i < b.mean->localMass.size() && i < s.local.size(); ++i)
                out.emplace_back("branch_local_mass_k" + std::to_string(s.local[i].k), b.mean->localMass[i]);
        if (b.mean) out.emplace_back("branch_share", b.mean->branchShare);
    }
    for (const auto& [key, value] : s.registered) out.emplace_back("registered_" + key, value);
    return out;
}

const std::map<std::string, std::string>& statisticDefinitions() {
    static const std::map<std::string, std::string> d{
        {"rank", "numerical rank of A (options.rank)"},
        {"effective_rank", "effective rank of A"},
        {"local_mass_k<k>", "mean k x k mass of A (options.local)"},
        {"local_x_uniform_k<k>",
         "local_mass_k<k> over its uniform baseline on the admissible keys (options.local.x_uniform)"},
        {"local_output_share_k<k>", "the window's share of the output rows (options.local.output_share)"},
        {"entropy", "mean row entropy in nats (options.entropy)"},
        {"normalised_entropy", "mean row entropy / log n"},
        {"normalised_entropy_admissible",
         "mean row entropy / log |S_i| (options.entropy.normalised_entropy_admissible)"},
        {"max_weight", "mean max weight of a row"},
        {"negative_row_fraction", "fraction of rows with a negative weight"},
        {"confused_pairs", "confused query pairs of the head (options.confusion)"},
        {"mean_distance",
         "the head's mean attention distance in grid cells over the selected images' spatial queries with ok rows "
         "(pooled over the images, as attnlens-cli locality computes it; README Locality)"},
        {"total_variation", "mean over queries of the total variation to the reference (options.distance)"},
        {"jensen_shannon", "mean over queries of the Jensen-Shannon divergence to the reference"},
        {"output_relative_error", "||O - O_ref||_F / ||O_ref||_F"},
        {"output_relative_error_with_branch", "||O - O_ref||_F / ||O_ref + B||_F"},
        {"output_cosine", "mean over queries of cos(O_i, O_ref_i)"},
        {"branch_rank_median", "median over V channels of rank(E_c), E_c = A + alpha M_c (options.local_branch)"},
        {"branch_rank_mean_channel", "rank of E_mean = A + alpha mean_c M_c"},
        {"branch_local_mass_k<k>", "k x k mass of E_mean"},
        {"branch_share", "E_mean's branch share, |alpha M row|_1 / (|A row|_1 + |alpha M row|_1)"},
    };
    return d;
}

}  // namespace

SweepParameter parseSweepParameter(std::string_view name) {
    std::string known;
    for (const ParameterInfo& i : kParameters) {
        if (name == i.name) return i.parameter;
        known += (known.empty() ? "" : ", ") + std::string(i.name);
    }
    throwUsage("unknown sweep parameter '" + printableText(name) + "' (known: " + known + ")");
}

std::string_view sweepParameterName(SweepParameter p) { return infoOf(p).name; }

std::vector<double> parseSweepRange(const std::string& text, const std::string& option) {
    std::vector<std::string> parts;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ':')) parts.push_back(item);
    if (parts.size() == 1) return {parseNumber(parts[0], option)};
    if (parts.size() != 3)
        throwUsage(option + ": expected LO:HI:POINTS (e.g. 1:8:15) or one value, got " + quotedText(text));
    const double lo = parseNumber(parts[0], option), hi = parseNumber(parts[1], option);
    const int n = parseInt(parts[2], 2, 1000, option);
    std::vector<double> values(static_cast<std::size_t>(n));
    // hi - lo can overflow (-1e308:1e308), and 0 * inf would make the first point NaN: then
    // lo (1 - t) + hi t, which cannot.
    const double span = hi - lo;
    for (int i = 0; i < n; ++i) {
        const double t = double(i) / double(n - 1);
        values[std::size_t(i)] = i + 1 == n ? hi : std::isfinite(span) ? lo + span * t : lo * (1 - t) + hi * t;
    }
    return values;
}

namespace {
// A value as the user would write it: %g, with "inf"/"nan" spelled out (std::to_string gives "-nan").
std::string shownSweepValue(double v) {
    if (std::isnan(v)) return "not a number (NaN)";
    if (std::isinf(v)) return v > 0 ? "infinity" : "-infinity";
    char text[32];
    std::snprintf(text, sizeof text, "%g", v);
    return text;
}
}  // namespace

std::string sweepParameterInaction(const Paradigm& paradigm, SweepParameter parameter) {
    const Normalisation n = paradigm.normalisation;
    const bool kernel = n != Normalisation::Softmax;
    switch (parameter) {
        case SweepParameter::FocusingPower:
        case SweepParameter::FocusingShift:
            return kernel && paradigm.kernel == Kernel::Focused ? ""
                                                                : "it belongs to the focused kernel (kernel focused)";
        case SweepParameter::LeakySlope:
            return kernel && paradigm.kernel == Kernel::LeakyRelu
                       ? ""
                       : "it belongs to the leaky ReLU kernel (kernel leaky_relu)";
        case SweepParameter::SoftmaxScale:
            return n == Normalisation::Softmax ? "" : "it scales softmax's logits (normalisation softmax)";
        case SweepParameter::C:
            return n == Normalisation::Subtract || n == Normalisation::Magnitude
                       ? ""
                       : "it scales D in subtract and magnitude normalisation";
        case SweepParameter::Eps:
            return n == Normalisation::Divide || n == Normalisation::Magnitude
                       ? ""
                       : "it is the eps of divide and magnitude normalisation";
        case SweepParameter::QueryScale:
        case SweepParameter::BranchWeight:
            return "";
    }
    return "";
}

std::string sweepParametersActingOn(const Paradigm& paradigm) {
    std::string names;
    for (const ParameterInfo& i : kParameters)
        if (sweepParameterInaction(paradigm, i.parameter).empty())
            names += (names.empty() ? "" : ", ") + std::string(i.name);
    return names;
}

Paradigm withSweepParameter(const Paradigm& paradigm, SweepParameter parameter, double value) {
    const ParameterInfo& info = infoOf(parameter);
    auto fail = [&](const char* rule) {
        throwUsage("sweep of " + std::string(info.name) + ": " + rule + ", got " + shownSweepValue(value));
    };
    if (const std::string why = sweepParameterInaction(paradigm, parameter); !why.empty())
        throwUsage("sweep of " + std::string(info.name) + ": it does not act on paradigm '" +
                   printableText(paradigm.name) + "' (" + why +
                   "), so every curve would be flat; parameters that "
                   "act on it: " +
                   sweepParametersActingOn(paradigm));
    if (!std::isfinite(value)) fail("every value must be finite");
    if ((parameter == SweepParameter::FocusingPower || parameter == SweepParameter::SoftmaxScale ||
         parameter == SweepParameter::QueryScale) &&
        !(value > 0))
        fail("every value must be > 0");
    if (info.field.empty()) return paradigm;
    if (parameter == SweepParameter::C && value == 0) fail("every value must be non-zero");
    if ((parameter == SweepParameter::Eps || parameter == SweepParameter::FocusingShift) && value < 0)
        fail("every value must be >= 0");
    json j = paradigm.toJson();
    j[std::string(info.field)] = value;
    return Paradigm::fromJson(j);  // the paradigm's own rules as well
}

nlohmann::json trainedSweepValue(const Paradigm& paradigm, SweepParameter parameter) {
    switch (parameter) {
        case SweepParameter::FocusingPower:
            return paradigm.focusingPower;
        case SweepParameter::SoftmaxScale:
            return paradigm.softmaxScale ? json(*paradigm.softmaxScale) : json(nullptr);
        case SweepParameter::C:
            return paradigm.c ? json(*paradigm.c) : json(nullptr);
        case SweepParameter::Eps:
            return paradigm.eps;
        case SweepParameter::FocusingShift:
            return paradigm.focusingShift;
        case SweepParameter::LeakySlope:
            return paradigm.leakySlope;
        case SweepParameter::QueryScale:
        case SweepParameter::BranchWeight:
            return 1.0;
    }
    return nullptr;
}

double trainedSweepValue(const Paradigm& paradigm, SweepParameter parameter, const LayerInfo& layer, int head) {
    if (parameter != SweepParameter::SoftmaxScale && parameter != SweepParameter::C)
        return trainedSweepValue(paradigm, parameter).get<double>();
    const double sequence =
        layer.window ? double(layer.window->ruleOf(head).windowTokens()) : double(layer.keyTokens());
    const HeadConstants constants = headConstants(paradigm, layer.scale, layer.dim, sequence);
    return parameter == SweepParameter::SoftmaxScale ? constants.softmaxScale : constants.c;
}

namespace {

// What the points of a sweep gather: (layer position, head) -> statistic -> one mean per point, and
// what the notes and the document's head need.
struct SweepState {
    std::map<std::pair<int, int>, std::map<std::string, std::vector<FiniteMean>>> curves;
    std::map<int, std::string> layerNames;
    std::vector<int> kernelAppliedLayers;  // where a kernel parameter cannot act
    json provenance;
    std::vector<double> pointSeconds;
    bool localityWanted = false;
    std::string localityFailure;
    std::vector<std::string> skippedNotes;
};

// The mean attention distance of one point, as attnlens-cli locality computes it, into the curves.
void addMeanDistances(const DumpReader& reader, const AnalyzeRequest& req, const AnalysisReport& report, int point,
                      int points, std::int64_t analysisTotal, const SweepProgressFn& progress, CancelToken cancel,
                      SweepState& st) {
    LocalityRequest locality;
    locality.paradigms = req.paradigms;
    locality.layers = report.request.layers;
    locality.images = report.request.images;
    locality.perLabel = false;
    locality.threads = report.request.threads;
    locality.queryScale = req.queryScale;
    // What analyze skipped, the locality skips too (the same (image, layer)s, already noted).
    locality.skipUnreadable = req.skipUnreadable;
    // The point's analysis is done: its steps stay full while the locality reads the images again.
    const ProgressFn localityProgress = [&](const AnalysisProgress& p) {
        const AnalysisProgress whole{
            analysisTotal, analysisTotal,
            "mean attention distance, image " + std::to_string(p.done) + " of " + std::to_string(p.total)};
        if (progress) progress(SweepProgress{point, points, whole});
    };
    try {
        const LocalityReport distances = localityOverDump(reader, locality, localityProgress, cancel);
        for (const LocalityCell& c : distances.groups.front().cells) {
            if (c.images == 0) continue;  // every image of its layer skipped: no curve, as the others
            std::vector<FiniteMean>& curve = st.curves[{c.layer, c.head}]["mean_distance"];
            curve.resize(std::size_t(points));
            curve[std::size_t(point)].add(c.sums.meanDistance());
        }
    } catch (const Error& e) {
        // Anything else the locality cannot read (it skips what analyze skipped): the
        // curve is left out and the notes say why.
        if (!req.skipUnreadable || e.kind() != ErrorKind::Input) throw;
        st.localityWanted = false;
        st.localityFailure = e.what();
    }
}

// One point: analyze (and the locality) with the parameter at values[point].
void sweepPoint(const DumpReader& reader, const SweepRequest& request, const ToolInfo& tool,
                const std::vector<Paradigm>& paradigms, int point, const SweepProgressFn& progress, CancelToken cancel,
                SweepState& st) {
    const int points = int(request.values.size());
    const auto pointStart = std::chrono::steady_clock::now();
    AnalyzeRequest req = request.analysis;
    req.paradigms = {paradigms[std::size_t(point)]};
    if (request.parameter == SweepParameter::BranchWeight)
        req.options.localBranch.weight = request.values[std::size_t(point)];
    if (request.parameter == SweepParameter::QueryScale) req.queryScale = request.values[std::size_t(point)];
    RecordSink sink;
    sink.begin = [&](const AnalysisReport& header) {
        if (point == 0) {
            st.provenance = reportProvenanceJson(header, tool);
            for (int l : header.request.layers) {
                st.layerNames[l] = header.dump.layers[std::size_t(l)].name;
                if (header.dump.layers[std::size_t(l)].kernelApplied) st.kernelAppliedLayers.push_back(l);
            }
        }
    };
    sink.write = [&](std::vector<HeadRecord>&& records) {
        for (const HeadRecord& r : records)
            for (const auto& [name, value] : sweptValues(r.stats)) {
                std::vector<FiniteMean>& curve = st.curves[{r.layer, r.head}][name];
                curve.resize(std::size_t(points));
                curve[std::size_t(point)].add(value);
            }
    };
    std::atomic<std::int64_t> analysisTotal = 0;  // the point's steps (progress may come from workers)
    const ProgressFn analysisProgress = [&](const AnalysisProgress& p) {
        analysisTotal = p.total;
        if (progress) progress(SweepProgress{point, points, p});
    };
    const AnalysisReport report = analyzeDump(reader, req, analysisProgress, cancel, &sink);
    if (st.localityWanted)
        addMeanDistances(reader, req, report, point, points, analysisTotal.load(), progress, cancel, st);
    if (point == 0) {
        st.provenance["input"] = reportOutcomeJson(report)["input"];
        st.provenance["input"].erase("sha256");
        st.provenance["timing_threads"] = report.request.threads.count();
        // What skipUnreadable left out is the same at every point (the data, not the parameter).
        for (const SkippedLayer& skip : report.skipped)
            st.skippedNotes.push_back("image " + std::to_string(skip.image) + ", layer " +
                                      report.dump.layers[std::size_t(skip.layer)].name +
                                      " is left out of every point (unreadable): " + skip.message);
    }
    st.pointSeconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - pointStart).count());
}

json sweepDefinitions(const SweepRequest& request) {
    json definitions;
    definitions["curve"] =
        "value at point i: the mean over the selected images of the head's statistic in analyze's record with the "
        "parameter at values[i] (null where no image has a finite value); the point at the trained value is "
        "analyze's own number";
    definitions["per_layer"] = "mean over the layer's heads of their curves' values at each point (finite ones)";
    definitions["trained_value"] =
        "heads[].trained_value: the value the head's model uses (the paradigm's own; unset c and scale as their "
        "rules give them for the head: scale = the layer's, c = 1 / (sqrt(d) n) with n its keys or its window's "
        "tokens); layers[].trained_value: the heads' common value, null when they differ";
    definitions["statistics"] = statisticDefinitions();
    for (const std::string& key : request.analysis.options.stats.registered)
        if (const RegisteredStatistic* r = findRegisteredStatistic(key))
            definitions["statistics"]["registered_" + key] = r->definition;
    return definitions;
}

json sweepLayers(const DumpReader& reader, const SweepRequest& request, SweepState& st) {
    const int points = int(request.values.size());
    json layers = json::array();
    for (const auto& [position, name] : st.layerNames) {
        json layer;
        layer["layer"] = name;
        layer["layer_position"] = position;
        const LayerInfo& layerInfo = reader.info().layers[std::size_t(position)];
        std::optional<double> common;
        bool differ = false;
        std::map<std::string, std::vector<FiniteMean>> perLayer;
        json heads = json::array();
        for (const auto& [key, statistics] : st.curves) {
            if (key.first != position) continue;
            json head;
            head["head"] = key.second;
            const double trained = trainedSweepValue(request.paradigm, request.parameter, layerInfo, key.second);
            head["trained_value"] = trained;
            differ |= common && *common != trained;
            common = trained;
            json values = json::object();
            for (const auto& [statistic, curve] : statistics) {
                json v = json::array();
                std::vector<FiniteMean>& layerCurve = perLayer[statistic];
                layerCurve.resize(std::size_t(points));
                for (int i = 0; i < points; ++i) {
                    v.push_back(curve[std::size_t(i)].value());
                    if (curve[std::size_t(i)].n > 0)
                        layerCurve[std::size_t(i)].add(curve[std::size_t(i)].sum / double(curve[std::size_t(i)].n));
                }
                values[statistic] = std::move(v);
            }
            head["statistics"] = std::move(values);
            heads.push_back(std::move(head));
        }
        json meanValues = json::object();
        for (const auto& [statistic, curve] : perLayer) {
            json v = json::array();
            for (const FiniteMean& m : curve) v.push_back(m.value());
            meanValues[statistic] = std::move(v);
        }
        layer["trained_value"] = common && !differ ? json(*common) : json(nullptr);
        layer["statistics"] = std::move(meanValues);
        layer["heads"] = std::move(heads);
        layers.push_back(std::move(layer));
    }
    return layers;
}

json sweepNotes(const SweepRequest& request, SweepState& st) {
    const ParameterInfo& info = infoOf(request.parameter);
    // A kernel parameter does nothing where q and k already hold the model's kernel (every paradigm
    // uses the identity kernel there): flat curves that must not read as a finding.
    const bool kernelParameter = request.parameter == SweepParameter::FocusingPower ||
                                 request.parameter == SweepParameter::FocusingShift ||
                                 request.parameter == SweepParameter::LeakySlope;
    json notes = json::array();
    if (kernelParameter && !st.kernelAppliedLayers.empty()) {
        std::string names;
        for (int l : st.kernelAppliedLayers) names += (names.empty() ? "" : ", ") + st.layerNames[l];
        notes.push_back("layers " + names +
                        " hold q and k after the model's kernel (kernel_applied): no kernel is "
                        "applied there, so " +
                        std::string(info.name) +
                        " does not act and their curves are flat; sweep it on layers with raw q and k");
    }
    // Division cancels the query's scale up to N eps: flat curves are the finding (MALA Sec. 3.2),
    // not a failure to sweep; said so that they are not taken for one.
    if (request.parameter == SweepParameter::QueryScale && request.paradigm.normalisation == Normalisation::Divide)
        notes.push_back("qscale scales phi(q), which division-normalised attention (" +
                        printableText(request.paradigm.name) +
                        ") cancels up to its N eps: flat curves here are MALA's point (Sec. 3.2, Eq. 7), not a "
                        "failed sweep");
    for (const std::string& note : st.skippedNotes) notes.push_back(note);
    if (!st.localityFailure.empty())
        notes.push_back("mean_distance is left out: the locality cannot skip unreadable data (" + st.localityFailure +
                        ")");
    return notes;
}

}  // namespace

nlohmann::json sweepDump(const DumpReader& reader, const SweepRequest& request, const ToolInfo& tool,
                         const SweepProgressFn& progress, CancelToken cancel) {
    if (request.values.empty()) throwUsage("sweep: no values");
    const auto start = std::chrono::steady_clock::now();
    const ParameterInfo& info = infoOf(request.parameter);
    const int points = int(request.values.size());
    // Every point's paradigm first: a bad value is refused before any work.
    std::vector<Paradigm> paradigms;
    for (double v : request.values) paradigms.push_back(withSweepParameter(request.paradigm, request.parameter, v));
    SweepState st;
    st.localityWanted = request.meanDistance && request.parameter != SweepParameter::BranchWeight;
    for (int point = 0; point < points; ++point)
        sweepPoint(reader, request, tool, paradigms, point, progress, cancel, st);
    json j;
    j["schema"] = "attnlens.sweep";
    j["schema_version"] = 1;
    j["tool"] = st.provenance["tool"];
    j["created_utc"] = st.provenance["created_utc"];
    j["input"] = st.provenance["input"];
    j["selection"] = st.provenance["selection"];
    j["paradigm"] = request.paradigm.toJson();
    j["parameter"] = {{"name", std::string(info.name)},
                      {"meaning", std::string(info.meaning)},
                      {"values", request.values},
                      {"trained_value", trainedSweepValue(request.paradigm, request.parameter)}};
    json options = st.provenance["options"];
    if (request.parameter == SweepParameter::BranchWeight) options["local_branch"]["weight"] = "swept";
    if (request.parameter == SweepParameter::QueryScale) options["query_scale"] = "swept";
    j["options"] = options;
    j["definitions"] = sweepDefinitions(request);
    j["layers"] = sweepLayers(reader, request, st);
    j["notes"] = sweepNotes(request, st);
    j["timing"] = {{"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()},
                   {"seconds_per_point", st.pointSeconds},
                   {"threads", st.provenance["timing_threads"]}};
    return j;
}

}  // namespace attnlens
