#include "shell/session_file.h"

#include <QFile>
#include <QFileInfo>
#include <cmath>
#include <limits>

#include "attnlens/analysis/report.h"
#include "attnlens/analysis/sweep.h"
#include "attnlens/io/atomic_file.h"
#include "attnlens/io/error.h"
#include "attnlens/io/json_message.h"
#include "attnlens/io/text.h"
#include "document/session.h"

namespace attnlens::gui {
namespace {

constexpr qint64 kMaxSessionBytes = 1 << 20;

using nlohmann::json;

// One field of the session object, type-checked, with messages that name the file and the field.
class FieldReader {
public:
    FieldReader(const json& j, const std::string& where) : j_(j), where_(where) {}

    const json* find(const char* key) const {
        const auto it = j_.find(key);
        return it == j_.end() || it->is_null() ? nullptr : &*it;
    }
    [[noreturn]] void fail(const char* key, const std::string& what) const {
        throwInput(where_ + ": session field \"" + key + "\" " + what);
    }
    std::string text(const char* key, bool required = false) const {
        const json* v = find(key);
        if (!v) {
            if (required) fail(key, "is missing");
            return {};
        }
        if (!v->is_string()) fail(key, "must be a string");
        const auto s = v->get<std::string>();
        if (const auto problem = textProblem(s)) fail(key, "is not usable text: " + *problem);
        return s;
    }
    long long integer(const char* key, long long lo, long long hi, long long fallback) const {
        const json* v = find(key);
        if (!v) return fallback;
        if (!v->is_number_integer()) fail(key, "must be an integer");
        const auto n = v->get<long long>();
        if (n < lo || n > hi)
            fail(key, "is " + std::to_string(n) + "; expected " + std::to_string(lo) + ".." + std::to_string(hi));
        return n;
    }
    double number(const char* key, double lo, double hi, double fallback) const {
        const json* v = find(key);
        if (!v) return fallback;
        if (!v->is_number()) fail(key, "must be a number");
        const double x = v->get<double>();
        if (!(x >= lo && x <= hi))
            fail(key, "is " + std::to_string(x) + "; expected " + std::to_string(lo) + ".." + std::to_string(hi));
        return x;
    }
    bool boolean(const char* key, bool fallback) const {
        const json* v = find(key);
        if (!v) return fallback;
        if (!v->is_boolean()) fail(key, "must be true or false");
        return v->get<bool>();
    }
    std::vector<std::string> texts(const char* key) const {
        std::vector<std::string> out;
        const json* v = find(key);
        if (!v) return out;
        if (!v->is_array() || v->size() > 1000) fail(key, "must be a list of at most 1000 strings");
        for (const json& e : *v) {
            if (!e.is_string()) fail(key, "must hold strings only");
            if (const auto problem = textProblem(e.get<std::string>()))
                fail(key, "holds text that is not usable: " + *problem);
            out.push_back(e.get<std::string>());
        }
        return out;
    }
    const json& object(const char* key) const {
        static const json empty = json::object();
        const json* v = find(key);
        if (!v) return empty;
        if (!v->is_object()) fail(key, "must be an object");
        return *v;
    }

private:
    const json& j_;
    const std::string& where_;
};

QByteArray fromBase64(const FieldReader& r, const char* key) {
    const std::string s = r.text(key);
    if (s.empty()) return {};
    const auto decoded = QByteArray::fromBase64Encoding(QByteArray::fromStdString(s));
    if (!decoded) r.fail(key, "is not base64");
    return *decoded;
}

}  // namespace

json sessionToJson(const SessionState& s) {
    json j;
    j["format"] = kSessionFormat;
    j["version"] = kSessionVersion;
    j["dump"] = s.dump.toStdString();
    if (!s.secondDump.isEmpty()) j["second_dump"] = s.secondDump.toStdString();
    j["image"] = s.image;
    j["layer"] = s.layer;
    j["head"] = s.head;
    j["query"] = s.query;
    j["paradigm"] = s.paradigm;
    j["paradigm_follows_layer"] = s.paradigmFollowsLayer;
    j["shown"] = s.shown;
    j["local_branch"] = {{"on", s.localBranch}, {"channel", s.localChannel}};
    j["map"] = s.map;
    j["rollout"] = {{"fusion", std::string(toString(s.rollout.fusion))},
                    {"weights", std::string(toString(s.rollout.weights))},
                    {"residual", s.rollout.residual},
                    {"discard_ratio", s.rollout.discardRatio}};
    json defs = json::array();
    for (const QString& d : s.paradigmDefinitions) defs.push_back(d.toStdString());
    j["paradigm_definitions"] = defs;
    j["statistics_model"] = s.statsModel;
    j["statistics_model_follows_layer"] = s.statsModelFollowsLayer;
    if (!s.statsLayers.empty()) j["statistics_layers"] = s.statsLayers;
    if (!s.view.isEmpty()) j["view"] = s.view.toStdString();
    if (!s.statsScope.isEmpty()) j["statistics_scope"] = s.statsScope.toStdString();
    if (s.imageOpacity >= 0) j["image_opacity"] = s.imageOpacity;
    j["colour_range"] =
        s.heldColourRange
            ? json{{"held", true}, {"lower", s.heldColourRange->lower}, {"upper", s.heldColourRange->upper}}
            : json{{"held", false}};
    j["compare"] = {
        {"difference",
         s.compareDifference ? json::array({s.compareDifference->first, s.compareDifference->second}) : json(nullptr)},
        {"shared_range", s.compareSharedRange}};
    // Always written (each "" while the view follows its default), so a reader sees where the choice lives.
    j["sweep"] = {
        {"paradigm", s.sweepParadigm}, {"parameter", s.sweepParameter}, {"range", s.sweepRange.toStdString()}};
    if (!s.windowGeometry.isEmpty() || !s.windowState.isEmpty())
        j["window"] = {{"geometry", s.windowGeometry.toBase64().toStdString()},
                       {"state", s.windowState.toBase64().toStdString()}};
    return j;
}

namespace {

// What the maps show ("map") and the rollout's options.
void readMapAndRollout(const FieldReader& r, const std::string& where, SessionState& s) {
    s.map = r.text("map");
    if (s.map.empty()) s.map = "attention";
    try {
        parseMapContent(s.map);
    } catch (const Error&) {
        r.fail("map", "must be \"attention\", \"rollout-query\" or \"rollout-cls\"");
    }
    const json& rollout = r.object("rollout");
    const FieldReader ro(rollout, where);
    try {
        if (const std::string f = ro.text("fusion"); !f.empty()) s.rollout.fusion = parseHeadFusion(f);
        if (const std::string w = ro.text("weights"); !w.empty()) s.rollout.weights = parseRolloutWeights(w);
    } catch (const Error& e) {
        r.fail("rollout", e.what());
    }
    s.rollout.residual = ro.number("residual", 0, 1, s.rollout.residual);
    s.rollout.discardRatio = ro.number("discard_ratio", 0, 1, s.rollout.discardRatio);
    try {
        validate(s.rollout);  // the library's ranges: the discard ratio must stay below 1
    } catch (const Error& e) {
        r.fail("rollout", e.what());
    }
}

// The views' own choices: the held colour range, the compare view's, the sweep's.
void readViewChoices(const FieldReader& r, const std::string& where, SessionState& s) {
    const json& range = r.object("colour_range");
    const FieldReader c(range, where);
    if (c.boolean("held", false)) {
        const json* lo = c.find("lower");
        const json* hi = c.find("upper");
        if (!lo || !hi || !lo->is_number() || !hi->is_number())
            r.fail("colour_range", "holds no numeric lower and upper");
        ColourRange cr{lo->get<double>(), hi->get<double>()};
        if (!std::isfinite(cr.lower) || !std::isfinite(cr.upper) || !(cr.lower < cr.upper))
            r.fail("colour_range", "must have finite lower < upper");
        s.heldColourRange = cr;
    }
    const json& compare = r.object("compare");
    const FieldReader cmp(compare, where);
    if (const json* d = cmp.find("difference"); d && !d->is_null()) {
        if (!d->is_array() || d->size() != 2 || !(*d)[0].is_string() || !(*d)[1].is_string() ||
            (*d)[0].get<std::string>().empty() || (*d)[1].get<std::string>().empty())
            r.fail("compare", "difference must be two paradigm names [A, B] or null");
        s.compareDifference = std::make_pair((*d)[0].get<std::string>(), (*d)[1].get<std::string>());
    }
    s.compareSharedRange = cmp.boolean("shared_range", false);
    const FieldReader sweep(r.object("sweep"), where);
    s.sweepParadigm = sweep.text("paradigm");
    s.sweepParameter = sweep.text("parameter");
    s.sweepRange = QString::fromStdString(sweep.text("range"));
    try {
        if (!s.sweepParameter.empty()) parseSweepParameter(s.sweepParameter);
        if (!s.sweepRange.isEmpty()) parseSweepRange(s.sweepRange.toStdString(), "range");
    } catch (const Error& e) {
        r.fail("sweep", e.what());
    }
}

}  // namespace

SessionState sessionFromJson(const json& j, const std::string& where) {
    if (!j.is_object()) throwInput(where + ": not an AttnLens session (expected a JSON object)");
    const FieldReader r(j, where);
    if (r.text("format", true) != kSessionFormat)
        throwInput(where + ": not an AttnLens session (format is " + quotedText(r.text("format")) + ", expected '" +
                   kSessionFormat + "')");
    const long long version = r.integer("version", 1, 1000000, 0);
    if (version == 0) r.fail("version", "is missing");
    if (version > kSessionVersion)
        throwInput(where + ": session version " + std::to_string(version) + " is newer than this AttnLens reads (" +
                   std::to_string(kSessionVersion) + ")");
    SessionState s;
    s.dump = QString::fromStdString(r.text("dump", true));
    s.secondDump = QString::fromStdString(r.text("second_dump"));
    s.image = int(r.integer("image", 0, std::numeric_limits<int>::max(), 0));
    s.layer = r.text("layer");
    s.head = int(r.integer("head", 0, std::numeric_limits<int>::max(), 0));
    s.query = Index(r.integer("query", 0, std::numeric_limits<int>::max(), 0));
    s.paradigm = r.text("paradigm");
    s.paradigmFollowsLayer = r.boolean("paradigm_follows_layer", true);
    s.shown = r.texts("shown");
    const json& branch = r.object("local_branch");
    const FieldReader b(branch, where);
    s.localBranch = b.boolean("on", false);
    s.localChannel = int(b.integer("channel", -1, 1 << 20, -1));
    readMapAndRollout(r, where, s);
    for (const std::string& d : r.texts("paradigm_definitions")) s.paradigmDefinitions << QString::fromStdString(d);
    s.statsModel = r.text("statistics_model");
    s.statsModelFollowsLayer = r.boolean("statistics_model_follows_layer", true);
    s.statsLayers = r.texts("statistics_layers");
    s.view = QString::fromStdString(r.text("view"));
    s.statsScope = QString::fromStdString(r.text("statistics_scope"));
    if (!s.statsScope.isEmpty() && s.statsScope != QStringLiteral("image") && s.statsScope != QStringLiteral("all"))
        r.fail("statistics_scope", "must be \"image\" or \"all\"");
    s.imageOpacity = int(r.integer("image_opacity", 0, 100, -1));
    readViewChoices(r, where, s);
    const json& window = r.object("window");
    const FieldReader w(window, where);
    s.windowGeometry = fromBase64(w, "geometry");
    s.windowState = fromBase64(w, "state");
    return s;
}

SessionState readSessionFile(const QString& path) {
    const std::string where = path.toStdString();
    QFile f(path);
    if (!QFileInfo(path).isFile()) throwInput(where + ": no such session file");
    if (f.size() > kMaxSessionBytes)
        throwInput(where + ": " + std::to_string(f.size()) + " bytes is too large for a session file (at most " +
                   std::to_string(kMaxSessionBytes) + ")");
    if (!f.open(QIODevice::ReadOnly)) throwInput(where + ": cannot read: " + f.errorString().toStdString());
    const QByteArray bytes = f.read(kMaxSessionBytes + 1);
    if (const auto at = jsonNestingBeyond(std::string_view(bytes.constData(), std::size_t(bytes.size()))))
        throwInput(where + ": nests arrays and objects more than " + std::to_string(kMaxJsonNesting) +
                   " deep (at byte " + std::to_string(*at) + "); a session file nests about five deep");
    json j;
    try {
        j = json::parse(bytes.constData(), bytes.constData() + bytes.size());
    } catch (const std::exception& e) {
        throwInput(where + ": not valid JSON: " + jsonErrorText(e));
    }
    return sessionFromJson(j, where);
}

void writeSessionFile(const QString& path, const SessionState& state) {
    writeFileAtomically(path.toStdString(), sessionToJson(state).dump(2) + "\n");
}

SessionState captureSelection(const Session& session) {
    SessionState s;
    if (!session.isOpen()) return s;
    const Selection& sel = session.selection();
    const auto& paradigms = session.paradigms();
    s.dump = QFileInfo(session.path()).absoluteFilePath();
    s.image = sel.image;
    s.layer = session.layerInfo().name;
    s.head = sel.head;
    s.query = sel.query;
    s.paradigm = paradigms[std::size_t(sel.paradigm)].name;
    s.paradigmFollowsLayer = sel.paradigmFollowsLayer;
    for (int i : sel.shown) s.shown.push_back(paradigms[std::size_t(i)].name);
    s.localBranch = sel.localBranch;
    s.localChannel = sel.localChannel;
    s.map = std::string(toString(sel.map));
    s.rollout = session.rollout().options();
    s.paradigmDefinitions = session.preferences().paradigmSpecs;
    s.statsModel = session.statistics().model();
    s.statsModelFollowsLayer = session.statistics().modelFollowsLayer();
    for (int l : session.statistics().layers()) s.statsLayers.push_back(session.info().layers[std::size_t(l)].name);
    s.statsScope =
        session.statistics().scope() == StatsScope::AllImages ? QStringLiteral("all") : QStringLiteral("image");
    return s;
}

void applySelection(Session& session, const SessionState& s) {
    const DumpInfo& info = session.info();
    const std::string where = "session of " + printableText(info.path);
    if (s.image >= info.images)
        throwInput(where + ": image " + std::to_string(s.image) + " does not exist (the dump has " +
                   std::to_string(info.images) + ")");
    auto layerNamed = [&info](const std::string& name) {
        for (std::size_t i = 0; i < info.layers.size(); ++i)
            if (info.layers[i].name == name) return int(i);
        return -1;
    };
    int layer = 0;
    if (!s.layer.empty()) {
        layer = layerNamed(s.layer);
        if (layer < 0) throwInput(where + ": layer " + quotedText(s.layer) + " does not exist in the dump");
    }
    const LayerInfo& l = info.layers[std::size_t(layer)];
    if (s.head >= l.heads)
        throwInput(where + ": head " + std::to_string(s.head) + " does not exist in layer " + quotedText(l.name) +
                   " (" + std::to_string(l.heads) + " heads)");
    if (s.query >= l.layout.tokens())
        throwInput(where + ": query token " + std::to_string(s.query) + " does not exist in layer " +
                   quotedText(l.name) + " (N = " + std::to_string(l.layout.tokens()) + ")");
    auto paradigmOf = [&](const std::string& name) {
        const int i = session.paradigmIndex(name);
        if (i < 0) throwInput(where + ": paradigm " + quotedText(name) + " is not defined");
        return i;
    };
    const int paradigm = s.paradigm.empty() ? -1 : paradigmOf(s.paradigm);
    std::vector<int> shown;
    for (const std::string& n : s.shown) shown.push_back(paradigmOf(n));
    std::vector<int> statsLayers;
    for (const std::string& name : s.statsLayers) {
        const int at = layerNamed(name);
        if (at < 0) throwInput(where + ": statistics layer " + quotedText(name) + " does not exist in the dump");
        statsLayers.push_back(at);
    }
    if (!s.statsModelFollowsLayer) session.statistics().setModel(s.statsModel);  // checks the name

    session.setImage(s.image);
    session.setLayer(layer);
    session.setHead(s.head);
    session.setQuery(s.query);
    if (paradigm >= 0) session.setParadigm(paradigm);
    session.setParadigmFollowsLayer(s.paradigmFollowsLayer);
    if (!s.shown.empty()) session.setShown(shown);
    session.setLocalChannel(s.localChannel);
    session.setLocalBranch(s.localBranch);
    session.rollout().setOptions(s.rollout);
    session.setMapContent(parseMapContent(s.map));
    if (s.statsModelFollowsLayer) session.statistics().setModelFollowsLayer(true);
    if (!statsLayers.empty()) session.statistics().setLayers(statsLayers);
    if (!s.statsScope.isEmpty())
        session.statistics().setScope(s.statsScope == QStringLiteral("all") ? StatsScope::AllImages
                                                                            : StatsScope::CurrentImage);
}

}  // namespace attnlens::gui
