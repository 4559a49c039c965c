#include "shell/selection_options.h"

#include "attnlens/dump/list_parser.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"

namespace attnlens::gui {

int intOption(const QString& text, int min, int max, const char* option) {
    return parseInt(text.toStdString(), min, max, option);
}

int paradigmOption(const Session& session, const QString& name, const char* option) {
    const std::string wanted = name.trimmed().toStdString();
    const int i = session.paradigmIndex(wanted);
    if (i < 0) {
        std::string known;
        for (const auto& p : session.paradigms()) known += (known.empty() ? "" : ", ") + p.name;
        throwUsage(std::string(option) + ": unknown paradigm " + quotedText(wanted) + " (known: " + known + ")");
    }
    return i;
}

namespace {

// --local-branch and --channel: the channel only with the branch, the branch only on a layer that
// has one, the channel among the head's V channels.
void applyLocalBranch(Session& session, const QCommandLineParser& p, const SelectionOptions& o, bool restoredBranch) {
    if (p.isSet(o.channel) && !p.isSet(o.localBranch)) throwUsage("--channel: only with --local-branch");
    if (!p.isSet(o.localBranch)) {
        // A restored session's branch and channel stand; its weights must be readable.
        if (restoredBranch && session.branch().inLayer())
            if (const QString e = session.branch().error(); !e.isEmpty()) throwInput(e.toStdString());
        return;
    }
    if (!session.branch().inLayer())
        throwUsage("--local-branch: layer " + session.layerInfo().name + " has no local branch" +
                   (session.branch().inDump() ? "" : " (no layer of this dump has one)"));
    int channel = -1;
    const QString c = p.value(o.channel).trimmed().toLower();
    if (p.isSet(o.channel) && c != QStringLiteral("mean"))
        channel = intOption(c, 0, session.layerInfo().valueDim - 1, "--channel");
    session.setLocalChannel(channel);
    session.setLocalBranch(true);
    // Damaged or non-finite weights: an input error, not a figure that silently lacks the branch.
    if (const QString e = session.branch().error(); !e.isEmpty()) throwInput(e.toStdString());
}

}  // namespace

void applySelectionOptions(Session& session, const QCommandLineParser& p, const SelectionOptions& o,
                           UnsetSelection unset, bool restoredBranch) {
    const DumpInfo& info = session.info();
    const bool defaults = unset == UnsetSelection::Defaults;
    const auto valueOr0 = [&](const QCommandLineOption& option) {
        return p.isSet(option) ? p.value(option) : QStringLiteral("0");
    };
    if (defaults || p.isSet(o.image)) session.setImage(intOption(valueOr0(o.image), 0, info.images - 1, "--image"));
    if (defaults || p.isSet(o.layer)) session.setLayer(parseLayer(valueOr0(o.layer).toStdString(), info, "--layer"));
    if (defaults || p.isSet(o.head))
        session.setHead(intOption(valueOr0(o.head), 0, session.layerInfo().heads - 1, "--head"));
    if (p.isSet(o.query))
        session.setQuery(Index(parseQueryToken(p.value(o.query).toStdString(), session.layout(), "--query")));
    if (p.isSet(o.paradigm)) session.setParadigm(paradigmOption(session, p.value(o.paradigm), "--paradigm"));
    applyLocalBranch(session, p, o, restoredBranch);
}

void applyMapContentOption(Session& session, const QCommandLineParser& p, const SelectionOptions& o) {
    if (!p.isSet(o.rollout)) return;
    const QString of = p.value(o.rollout).trimmed().toLower();
    if (of == QStringLiteral("query"))
        session.setMapContent(MapContent::RolloutOfQuery);
    else if (of == QStringLiteral("cls"))
        session.setMapContent(MapContent::RolloutOfCls);
    else if (of == QStringLiteral("off"))
        session.setMapContent(MapContent::Attention);
    else
        throwUsage("--rollout: 'query', 'cls' or 'off', got " + quotedText(of.toStdString()));
}

}  // namespace attnlens::gui
