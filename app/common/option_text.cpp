#include "option_text.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "attnlens/analysis/claims.h"
#include "attnlens/analysis/execution.h"
#include "attnlens/dump/list_parser.h"
#include "attnlens/io/error.h"
#include "attnlens/io/json_message.h"
#include "attnlens/io/text.h"

namespace attnlens {

using nlohmann::json;

bool OptionText::flag(const std::string& name) const {
    return std::find(flags.begin(), flags.end(), name) != flags.end();
}

std::optional<std::string> OptionText::get(const std::string& name) const {
    const auto it = options.find(name);
    if (it == options.end()) return std::nullopt;
    return it->second;
}

namespace {

// "is not valid JSON: ..." with a hint when the file is an HDF5 dump.
std::string jsonParseProblem(const std::string& file, const json::exception& e) {
    std::ifstream in(file, std::ios::binary);
    char magic[8] = {};
    in.read(magic, sizeof magic);
    if (in.gcount() == 8 && std::memcmp(magic, "\x89HDF\r\n\x1a\n", 8) == 0)
        return quotedText(file) + " is an HDF5 file, not a JSON report";
    return quotedText(file) + " is not valid JSON: " + jsonErrorText(e);
}

}  // namespace

json readJsonFile(const std::string& file, const std::string& context) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(file, ec)) throwInput(context + ": " + quotedText(file) + " is a directory, not a JSON file");
    std::ifstream in(file, std::ios::binary);
    if (!in) throwInput(context + ": cannot open " + quotedText(file) + ": " + std::strerror(errno));
    try {
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (in.bad()) throw std::ios_base::failure(std::strerror(errno));
        if (const auto at = jsonNestingBeyond(text))
            throwInput(context + ": " + quotedText(file) + " nests arrays and objects more than " +
                       std::to_string(kMaxJsonNesting) + " deep (at byte " + std::to_string(*at) +
                       "); AttnLens's JSON files nest about ten deep");
        return json::parse(text);
    } catch (const Error&) {
        throw;
    } catch (const json::exception& e) {
        throwInput(context + ": " + jsonParseProblem(file, e));
    } catch (const std::exception& e) {  // the stream's own read error (std::ios_base::failure)
        throwInput(context + ": cannot read " + quotedText(file) + ": " + printableText(e.what()));
    }
}

std::vector<std::string> splitParadigmList(const std::string& text) {
    // Commas separate paradigms, but a custom paradigm's own key=value list uses commas too: an item
    // with '=' and no ':' continues the previous paradigm.
    std::vector<std::string> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) throwUsage("--paradigms: empty item in " + quotedText(text));
        if (item.find('=') != std::string::npos && item.find(':') == std::string::npos && !out.empty())
            out.back() += "," + item;
        else
            out.push_back(item);
    }
    return out;
}

AnalysisOptions analysisOptionsFromText(const OptionText& a) {
    AnalysisOptions o;
    if (auto s = a.get("--stats")) o.stats = StatSelection::parse(*s);
    if (auto s = a.get("--rank-tol")) o.spectrum.relativeTolerance = parseNumber(*s, "--rank-tol");
    o.spectrum.spatialOnly = a.flag("--spatial-only");
    if (auto s = a.get("--local-k")) o.localK = parseIntList(*s, kMinLocalK, kMaxLocalK, "--local-k");
    if (auto s = a.get("--tau")) o.confusion.tau = parseNumber(*s, "--tau");
    if (auto s = a.get("--confusion-floor")) o.confusion.queryRelativeFloor = parseNumber(*s, "--confusion-floor");
    if (auto s = a.get("--magnitude")) {
        std::stringstream ss(*s);
        std::string lo, hi, n;
        if (!std::getline(ss, lo, ':') || !std::getline(ss, hi, ':') || !std::getline(ss, n))
            throwUsage("--magnitude: expected LOG2MIN:LOG2MAX:POINTS, e.g. -2:4:13, got " + quotedText(*s));
        o.magnitude.log2Min = parseNumber(lo, "--magnitude");
        o.magnitude.log2Max = parseNumber(hi, "--magnitude");
        o.magnitude.points = parseInt(n, MagnitudeOptions::kMinPoints, MagnitudeOptions::kMaxPoints, "--magnitude");
    }
    if (auto s = a.get("--distance-ref")) {
        try {
            o.distance.reference = Paradigm::parse(*s);
        } catch (const Error& e) {
            throwUsage(std::string("--distance-ref: ") + e.what());
        }
    }
    o.perQueryMaps = a.flag("--per-query-maps");
    if (auto s = a.get("--local-branch")) {
        if (*s == "own")
            o.localBranch.allParadigms = false;
        else if (*s == "all")
            o.localBranch.allParadigms = true;
        else if (*s == "off")
            o.localBranch.enabled = false;
        else
            throwUsage("--local-branch: expected own, all or off, got " + quotedText(*s));
    }
    validate(o);
    return o;
}

void localBranchChannelsFromText(const OptionText& a, const DumpInfo& info, LocalBranchOptions& o) {
    int channels = 0;
    for (const auto& l : info.layers)
        if (l.localBranch) channels = std::max(channels, l.valueDim);
    for (const char* option : {"--local-channels", "--local-spectra"}) {
        if (!a.get(option)) continue;
        if (!o.enabled) throwUsage(std::string(option) + " has no effect with --local-branch off");
        if (channels == 0) throwUsage(std::string(option) + ": " + info.path + " has no layer with a local branch");
    }
    if (auto s = a.get("--local-channels")) o.channels = parseIndexList(*s, channels, "--local-channels");
    if (auto s = a.get("--local-spectra")) {
        if (*s == "all")
            o.spectrumChannels.reset();
        else if (*s == "none")
            o.spectrumChannels = std::vector<int>{};
        else
            o.spectrumChannels = parseIndexList(*s, channels, "--local-spectra");
    }
}

std::vector<int> modelLayers(const std::string& text, const DumpInfo& info, const std::vector<int>& selected) {
    const std::vector<LayerModel> models = layerModels(info);
    std::string known;
    for (const LayerModel& m : models)
        if (!m.name.empty()) known += (known.empty() ? "" : ", ") + printableText(m.name);
    std::vector<char> chosen(info.layers.size(), 0);
    std::stringstream items(text);
    std::string name;
    while (std::getline(items, name, ',')) {
        const auto it = std::find_if(models.begin(), models.end(),
                                     [&](const LayerModel& m) { return !m.name.empty() && m.name == name; });
        if (it == models.end())
            throwUsage(
                "--model: " + quotedText(name) + " is not a model of " + printableText(info.path) +
                (known.empty() ? " (its layer names name no model: <model>.<block>)" : " (its models: " + known + ")"));
        for (int l : it->layers) chosen[std::size_t(l)] = 1;
    }
    if (text.empty() || text.back() == ',') throwUsage("--model: empty item in " + quotedText(text));
    std::vector<int> layers;
    if (selected.empty()) {
        for (std::size_t l = 0; l < chosen.size(); ++l)
            if (chosen[l]) layers.push_back(int(l));
    } else {
        for (int l : selected)
            if (chosen[std::size_t(l)]) layers.push_back(l);
        if (layers.empty()) throwUsage("--model " + printableText(text) + " and --layers select no layer in common");
    }
    return layers;
}

std::vector<Paradigm> paradigmsFromText(const OptionText& a) {
    std::vector<Paradigm> out;
    if (auto s = a.get("--paradigms"))
        for (const auto& spec : splitParadigmList(*s)) out.push_back(Paradigm::parse(spec));
    if (auto cfg = a.get("--config")) {
        const json j = readJsonFile(*cfg, "--config");
        if (!j.is_object() || !j.contains("paradigms") || !j["paradigms"].is_array())
            throwInput("--config: " + quotedText(*cfg) + " needs {\"paradigms\": [...]}");
        for (std::size_t i = 0; i < j["paradigms"].size(); ++i) {
            const json& p = j["paradigms"][i];
            try {
                if (p.is_string())
                    out.push_back(Paradigm::parse(p.get<std::string>()));
                else
                    out.push_back(Paradigm::fromJson(p));
            } catch (const Error& e) {  // the file and the entry, then what is wrong with it
                throw Error(e.kind(),
                            "--config: " + quotedText(*cfg) + ": paradigms[" + std::to_string(i) + "]: " + e.what());
            } catch (const json::exception& e) {
                throwUsage("--config: " + quotedText(*cfg) + ": paradigms[" + std::to_string(i) +
                           "]: " + jsonErrorText(e));
            }
        }
    }
    for (std::size_t i = 0; i < out.size(); ++i)
        for (std::size_t k = 0; k < i; ++k)
            if (out[i].name == out[k].name) throwUsage("paradigm name " + quotedText(out[i].name) + " is used twice");
    return out;
}

std::vector<int> layersFromText(const OptionText& a, const DumpInfo& info, bool emptyMeansAll) {
    std::vector<int> layers;
    if (auto s = a.get("--layers")) layers = parseLayerList(*s, info, "--layers");
    if (auto s = a.get("--model")) layers = modelLayers(*s, info, layers);
    if (layers.empty() && emptyMeansAll) {
        layers.resize(info.layers.size());
        for (std::size_t l = 0; l < layers.size(); ++l) layers[l] = int(l);
    }
    return layers;
}

bool CommandOptions::isFlag(const std::string& name) const {
    return std::find(flags.begin(), flags.end(), name) != flags.end();
}

bool CommandOptions::has(const std::string& name) const {
    return isFlag(name) || std::find(values.begin(), values.end(), name) != values.end();
}

std::vector<std::string> CommandOptions::names() const {
    std::vector<std::string> all = values;
    all.insert(all.end(), flags.begin(), flags.end());
    return all;
}

CommandOptions CommandOptions::with(const CommandOptions& more) const {
    CommandOptions both = *this;
    both.values.insert(both.values.end(), more.values.begin(), more.values.end());
    both.flags.insert(both.flags.end(), more.flags.begin(), more.flags.end());
    return both;
}

const CommandOptions& analyzeOptions() {
    static const CommandOptions options{
        {"--paradigms", "--config", "--layers", "--heads", "--images", "--stats", "--threads", "--rank-tol",
         "--local-k", "--tau", "--magnitude", "--local-branch", "--local-channels", "--local-spectra", "--model",
         "--distance-ref"},
        {"--spatial-only", "--per-query-maps", "--skip-unreadable"}};
    return options;
}

const CommandOptions& claimsOptions() {
    static const CommandOptions options{{"--layers", "--model", "--heads", "--images", "--threads"}, {}};
    return options;
}

const CommandOptions& localityOptions() {
    static const CommandOptions options{
        {"--paradigms", "--config", "--layers", "--model", "--images", "--threads", "--offset-radius"},
        {"--no-labels", "--skip-unreadable"}};
    return options;
}

const CommandOptions& rolloutOptions() {
    static const CommandOptions options{{"--layers", "--model", "--paradigms", "--config", "--residual", "--fusion",
                                         "--discard", "--weights", "--threads"},
                                        {}};
    return options;
}

const CommandOptions& sweepOptions() {
    static const CommandOptions options{
        {"--layers", "--heads", "--images", "--stats", "--threads", "--rank-tol", "--local-k", "--tau",
         "--local-branch", "--local-channels", "--local-spectra", "--model", "--distance-ref"},
        {"--spatial-only", "--skip-unreadable"}};
    return options;
}

ThreadBudget threadBudgetFromText(const OptionText& text) {
    if (auto t = text.get("--threads")) return ThreadBudget(parseInt(*t, 1, 256, "--threads"));
    return {};  // every processor
}

AnalyzeRequest analyzeRequestFromText(const OptionText& a) {
    AnalyzeRequest req;
    req.options = analysisOptionsFromText(a);
    req.paradigms = paradigmsFromText(a);
    req.threads = threadBudgetFromText(a);
    req.skipUnreadable = a.flag("--skip-unreadable");
    return req;
}

AnalyzeRequest claimsRequestFromText(const OptionText& text) {
    AnalyzeRequest req = claimsAnalyzeRequest();
    req.threads = threadBudgetFromText(text);
    return req;
}

SweepRequest sweepRequestFromText(const OptionText& text) {
    const std::optional<std::string> paradigm = text.get("--paradigm");
    if (!paradigm) throwUsage("sweep: --paradigm P is required (a preset or a custom paradigm)");
    const std::optional<std::string> param = text.get("--param");
    if (!param) throwUsage("sweep: --param NAME=LO:HI:POINTS is required, e.g. p=1:8:15");
    const std::size_t eq = param->find('=');
    if (eq == std::string::npos)
        throwUsage("--param: expected NAME=LO:HI:POINTS, e.g. p=1:8:15, got " + quotedText(*param));
    SweepRequest request;
    try {
        request.paradigm = Paradigm::parse(*paradigm);
    } catch (const Error& e) {
        throwUsage(std::string("--paradigm: ") + e.what());
    }
    request.parameter = parseSweepParameter(param->substr(0, eq));
    request.values = parseSweepRange(param->substr(eq + 1), "--param");
    // The magnitude curves are curves themselves: a sweep follows the other statistics by default,
    // and the mean attention distance ("locality", attnlens-cli locality's), which analyze has not.
    OptionText analysis = text;
    std::string kept;
    std::stringstream list(text.get("--stats").value_or("rank,local,entropy,confusion,distance,locality"));
    request.meanDistance = false;
    for (std::string item; std::getline(list, item, ',');) {
        if (item == "locality" || item == "all") request.meanDistance = true;
        if (item != "locality") kept += (kept.empty() ? "" : ",") + item;
    }
    if (kept.empty()) throwUsage("--stats: 'locality' needs at least one of analyze's statistics beside it");
    analysis.options["--stats"] = kept;
    request.analysis = analyzeRequestFromText(analysis);
    if (request.parameter == SweepParameter::BranchWeight && !request.analysis.options.localBranch.enabled)
        throwUsage("--param alpha: the local branch is off (--local-branch off)");
    for (double v : request.values) withSweepParameter(request.paradigm, request.parameter, v);  // refuse early
    return request;
}

void sweepSelectionFromText(const OptionText& text, const DumpInfo& info, SweepRequest& request) {
    analyzeSelectionFromText(text, info, request.analysis);
    if (request.parameter == SweepParameter::BranchWeight &&
        std::none_of(info.layers.begin(), info.layers.end(), [](const LayerInfo& l) { return l.localBranch; }))
        throwUsage("--param alpha: " + printableText(info.path) + " has no layer with a local branch");
}

namespace {

// --images, planned before its list is made: a range over a dump that declares 2^31 images would
// otherwise allocate gigabytes before the analysis plans its memory (issue 47 item 4).
std::vector<int> imagesFromText(const OptionText& a, const DumpInfo& info, const std::vector<int>& layers) {
    const auto s = a.get("--images");
    if (!s) return {};
    checkSelectionFits(info, indexListSize(*s, info.images, "--images"),
                       layers.empty() ? info.layers.size() : layers.size());
    return parseIndexList(*s, info.images, "--images");
}

}  // namespace

void analyzeSelectionFromText(const OptionText& a, const DumpInfo& info, AnalyzeRequest& req) {
    req.layers = layersFromText(a, info, false);
    req.images = imagesFromText(a, info, req.layers);
    localBranchChannelsFromText(a, info, req.options.localBranch);
    if (auto s = a.get("--heads")) {
        int maxHeads = 0;
        for (const auto& l : info.layers) maxHeads = std::max(maxHeads, l.heads);
        req.heads = parseIndexList(*s, maxHeads, "--heads");
    }
}

LocalityRequest localityRequestFromText(const OptionText& a, int& radius) {
    LocalityRequest req;
    req.paradigms = paradigmsFromText(a);
    req.perLabel = !a.flag("--no-labels");
    req.skipUnreadable = a.flag("--skip-unreadable");
    req.threads = threadBudgetFromText(a);
    radius = 3;
    if (auto r = a.get("--offset-radius")) radius = *r == "full" ? -1 : parseInt(*r, 0, 100000, "--offset-radius");
    return req;
}

void localitySelectionFromText(const OptionText& a, const DumpInfo& info, LocalityRequest& req) {
    req.layers = layersFromText(a, info, false);
    req.images = imagesFromText(a, info, req.layers);
}

RolloutRequest rolloutRequestFromText(const OptionText& a) {
    RolloutRequest req;
    if (auto v = a.get("--residual")) req.options.residual = parseNumber(*v, "--residual");
    if (auto v = a.get("--discard")) req.options.discardRatio = parseNumber(*v, "--discard");
    if (auto v = a.get("--fusion")) req.options.fusion = parseHeadFusion(*v);
    if (auto v = a.get("--weights")) req.options.weights = parseRolloutWeights(*v);
    validate(req.options);
    req.threads = threadBudgetFromText(a);
    req.paradigms = paradigmsFromText(a);
    if (req.paradigms.empty()) req.paradigms = presetParadigms();  // as analyze and locality do
    return req;
}

std::string withFlagNames(const std::string& message) {
    // The library's words for its options (analysis_options.cpp, dump_analysis.cpp, report_stream.cpp)
    // and their flags.
    static const std::pair<const char*, const char*> kFlags[] = {
        {"rank tolerance: ", "--rank-tol: "},     {"local mass window sizes: ", "--local-k: "},
        {"confusion threshold tau: ", "--tau: "}, {"confusion query floor: ", "--confusion-floor: "},
        {"magnitude factors: ", "--magnitude: "}, {"local-branch channels: ", "--local-channels: "},
        {"record detail: ", "--records: "},       {"unknown record detail ", "--records: unknown record detail "},
    };
    for (const auto& [words, flag] : kFlags)
        if (message.rfind(words, 0) == 0) return flag + message.substr(std::strlen(words));
    return message;
}

}  // namespace attnlens
