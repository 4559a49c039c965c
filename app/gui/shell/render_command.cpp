#include "shell/render_command.h"

#include <QCommandLineParser>
#include <QLayout>
#include <QTextStream>
#include <memory>
#include <optional>

#include "attnlens/dump/list_parser.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "document/session.h"
#include "shell/export_dialog.h"
#include "shell/figure_export.h"
#include "shell/selection_options.h"
#include "shell/session_file.h"
#include "shell/view_options.h"
#include "views/dump_pair_view.h"
#include "views/view_registry.h"

namespace attnlens::gui {
namespace {

std::unique_ptr<PlotView> makeView(const ViewEntry& entry, Session* s, Session* second) {
    if (entry.needsSecondDump && !second->isOpen())
        throwUsage("--view " + entry.id.toStdString() + ": needs --second FILE (the dump shown beside FILE)");
    return entry.make(s, second);
}

}  // namespace

namespace {

// The options of `attnlens render` that are its own (the selection's and the views' are shared with
// the desktop program: selection_options.h, view_options.h), by what they set.
struct RenderFlags {
    static QCommandLineOption opt(const QStringList& names, const QString& description, const QString& value = {},
                                  const QString& def = {}) {
        return QCommandLineOption(names, description, value, def);
    }
    // What is drawn and where
    QCommandLineOption
        view = opt({"view"}, viewIdList() + QStringLiteral(" (locality over every image, dumps with --second)"), "V",
                   "tokenmap"),
        output = opt({"o", "output"}, QStringLiteral("the figure: .png, .svg or .pdf"), "OUT"),
        size = opt({"size"}, QStringLiteral("canvas in logical pixels (default 1100x800)"), "WxH", "1100x800"),
        dpi = opt({"dpi"}, QStringLiteral("PNG resolution (default 96: one pixel per logical pixel)"), "D", "96"),
        define = opt({"define"}, QStringLiteral("add or replace a paradigm, NAME:key=value,... (repeatable)"), "SPEC"),
        secondFile = opt({"second"},
                         QStringLiteral("dumps: the second dump, shown beside FILE at the same image, "
                                        "head and query place, on the layer of the same name (else "
                                        "the same position)"),
                         "FILE"),
        secondLayer = opt({"second-layer"}, QStringLiteral("dumps: the second dump's layer, name or position"), "L"),
        sameParadigm = opt({"same-paradigm"}, QStringLiteral("dumps: the second map in FILE's paradigm instead of its "
                                                             "layer's own"));
    SelectionOptions selection;  // shared with the desktop program's command line
    ViewOptions settings;        // the same
    QCommandLineOption sessionFile = opt({"session", kSessionOptionAlias},
                                         QStringLiteral("a session saved by the desktop program (File > Save "
                                                        "session): its dump, selection, paradigms, view, scope, "
                                                        "opacity and held colour range; the options above change it"),
                                         "JSON"),
                       unreadable = opt({"render-unreadable"},
                                        QStringLiteral("draw the figure even when the selected head cannot be read "
                                                       "(its panels say NOT SHOWN and why) or the view's statistics "
                                                       "failed (it says FAILED and why); a warning goes to stderr. "
                                                       "Without it such a figure is not written and the exit code "
                                                       "is 3")),
                       help = opt({"h", "help"}, QStringLiteral("this text"));

    QList<QCommandLineOption> drawn() const {
        return {view, output, size, dpi, define, secondFile, secondLayer, sameParadigm};
    }
    void addTo(QCommandLineParser& p) const {
        p.addOptions(drawn());
        p.addOptions(selection.all());
        p.addOptions(settings.all());
        p.addOptions({sessionFile, unreadable, help});
    }
};

}  // namespace

QString renderUsage() {
    const RenderFlags f;
    return QStringLiteral(
               "Usage: attnlens render FILE --view VIEW -o OUT.png|OUT.svg|OUT.pdf [options]\n"
               "       attnlens render --session SESSION.json -o OUT.png|OUT.svg|OUT.pdf [options]\n"
               "Draws one view of the GUI without a window (same code and pixels as File > Export figure).\n") +
           optionsHelp(f.drawn()) + QStringLiteral("The selection (as the desktop program's command line):\n") +
           optionsHelp(f.selection.all()) + QStringLiteral("The views' settings (as the desktop program's):\n") +
           optionsHelp(f.settings.all()) + optionsHelp({f.sessionFile, f.unreadable, f.help}) +
           helpParagraph(QStringLiteral("Exit codes: %1.").arg(QString::fromStdString(exitCodeText())));
}

namespace {

// Image, layer, head, query, paradigm and the local branch (selection_options.h), then the
// paradigms shown, the scope, the rollout and what the maps show (view_options.h): the session's
// (applySelection), then the options'.
void applySelectionOptions(Session& session, const QCommandLineParser& p, const RenderFlags& f,
                           const std::optional<SessionState>& saved) {
    applySelectionOptions(session, p, f.selection, saved ? UnsetSelection::Kept : UnsetSelection::Defaults,
                          saved && saved->localBranch);
    applySessionViewOptions(session, p, f.settings);
    applyMapContentOption(session, p, f.selection);
}

// A figure of data that cannot be had (a rollout that cannot be computed, a head that cannot be
// read) is an input error, unless --render-unreadable asks for the figure that says why.
void checkDrawable(Session& session, const ViewEntry& entry, const QCommandLineParser& p, const RenderFlags& f,
                   QTextStream& err) {
    const bool rolloutMap = session.selection().rolloutShown() && entry.drawsMapContent;
    if (rolloutMap) {
        // A rollout that cannot be computed (an unreadable layer on the way, stages of different
        // sizes, no CLS) is an input error, not a figure without a map.
        std::vector<int> drawn = entry.id == QStringLiteral("tokenmap") ? std::vector<int>{session.selection().paradigm}
                                                                        : session.selection().shown;
        for (int para : drawn)
            if (const QString e = session.mapContentRow(para).error; !e.isEmpty()) throwInput(e.toStdString());
    }
    // Views of the selected head cannot show a head that cannot be read (a damaged chunk): a
    // figure script must notice, so that is an input error unless --render-unreadable asks
    // for the figure that says NOT SHOWN. Rollout maps were checked above.
    if (entry.drawsSelectedHead && !rolloutMap) {
        if (const QString e = session.currentHeadError(); !e.isEmpty()) {
            const Selection& sel = session.selection();
            const std::string what = "image " + std::to_string(sel.image) + ", layer " + session.layerInfo().name +
                                     ", head " + std::to_string(sel.head) + " cannot be read: " + e.toStdString();
            if (!p.isSet(f.unreadable))
                throwInput(what + " (nothing written; --render-unreadable draws the figure with NOT SHOWN)");
            err << "attnlens render: warning: " << QString::fromStdString(what)
                << " (drawn as NOT SHOWN, --render-unreadable)\n";
        }
    }
}

// The session file (--session) or nothing (FILE), checked against the positional arguments.
std::optional<SessionState> savedSession(const QCommandLineParser& p, const RenderFlags& f) {
    if (p.isSet(f.sessionFile)) {
        if (!p.positionalArguments().isEmpty()) throwUsage("render: give either FILE or --session, not both");
        return readSessionFile(p.value(f.sessionFile));
    }
    if (p.positionalArguments().size() != 1) throwUsage("render: expected one FILE (see attnlens render --help)");
    return std::nullopt;
}

QSize canvasSize(const QCommandLineParser& p, const RenderFlags& f) {
    const QStringList wh = p.value(f.size).toLower().split('x');
    if (wh.size() != 2) throwUsage("--size: expected WxH, e.g. 1100x800");
    return QSize(intOption(wh[0], kMinFigureSide, kMaxFigureSide, "--size"),
                 intOption(wh[1], kMinFigureSide, kMaxFigureSide, "--size"));
}

// The paradigms: the session's definitions, then --define's; Error(Usage) naming a bad one.
Preferences renderPreferences(const QCommandLineParser& p, const RenderFlags& f,
                              const std::optional<SessionState>& saved) {
    Preferences prefs;
    if (saved) prefs.paradigmSpecs = saved->paradigmDefinitions;
    prefs.paradigmSpecs += p.values(f.define);
    QStringList problems;
    prefs.paradigms(&problems);
    if (!problems.isEmpty()) throwUsage(problems.join("; ").toStdString());
    return prefs;
}

// The view: --view, else the session's.
const ViewEntry& renderedView(const QCommandLineParser& p, const RenderFlags& f,
                              const std::optional<SessionState>& saved) {
    const QString viewId = saved && !saved->view.isEmpty() && !p.isSet(f.view) ? saved->view : p.value(f.view);
    const ViewEntry* entry = findView(viewId);
    if (!entry)
        throwUsage("--view: unknown view \"" + viewId.toStdString() + "\" (" + viewIdList().toStdString() + ")");
    return *entry;
}

// The second dump of "Compare dumps": --second, else the session's; only for that view.
void openSecondDump(Session& second, const ViewEntry& entry, const QCommandLineParser& p, const RenderFlags& f,
                    const std::optional<SessionState>& saved) {
    second.jobs().setSynchronous(true);
    const QString secondPath = p.isSet(f.secondFile) ? p.value(f.secondFile) : saved ? saved->secondDump : QString();
    const bool dumps = entry.id == QStringLiteral("dumps");
    if ((p.isSet(f.secondLayer) || p.isSet(f.sameParadigm)) && !dumps)
        throwUsage("--second-layer, --same-paradigm: only with --view dumps");
    if (dumps && !secondPath.isEmpty()) second.open(secondPath);
}

// Whole-dump statistics that failed (data that cannot be read, a dump too large for this
// machine) would be a figure that says FAILED: as for an unreadable head, an input error.
void checkAnalysisDrawn(PlotView& v, const QCommandLineParser& p, const RenderFlags& f, QTextStream& err) {
    v.refreshNow();
    const QString failure = v.analysisFailure();
    if (failure.isEmpty()) return;
    if (!p.isSet(f.unreadable))
        throwInput(failure.toStdString() + " (nothing written; --render-unreadable draws the figure with FAILED)");
    err << "attnlens render: warning: " << failure << " (drawn as FAILED, --render-unreadable)\n";
}

// The figure the parsed options ask for, written to -o.
void renderFigure(const QCommandLineParser& p, const RenderFlags& f, QTextStream& out, QTextStream& err) {
    const std::optional<SessionState> saved = savedSession(p, f);
    if (!p.isSet(f.output)) throwUsage("render: -o OUT.png|svg|pdf is required");
    const QString outPath = p.value(f.output);
    figureFormatFromPath(outPath);  // usage error before any work
    const QSize canvas = canvasSize(p, f);
    const Preferences prefs = renderPreferences(p, f, saved);

    Session session(prefs);
    session.jobs().setSynchronous(true);
    session.open(saved ? saved->dump : p.positionalArguments().front());
    if (saved) applySelection(session, *saved);
    applySelectionOptions(session, p, f, saved);
    const ViewEntry& entry = renderedView(p, f, saved);
    Session second(prefs);
    openSecondDump(second, entry, p, f, saved);
    std::unique_ptr<PlotView> v = makeView(entry, &session, &second);
    if (auto* d = dynamic_cast<DumpPairView*>(v.get())) {
        if (p.isSet(f.secondLayer))
            d->setSecondLayer(parseLayer(p.value(f.secondLayer).toStdString(), second.info(), "--second-layer"));
        d->setSameParadigm(p.isSet(f.sameParadigm));
    }
    checkDrawable(session, entry, p, f, err);
    v->resize(canvas);
    // The view is never shown: without this its layout would keep the plot at its default size
    // until the export, and views that arrange their panels by the plot's size (the heads
    // view's columns) would arrange them for that size instead of the figure's.
    if (QLayout* layout = v->layout()) layout->activate();
    applyViewOptions(*v, session, p, f.settings, UnsetSelection::Defaults, ViewFit::OnlyThisView, saved);
    checkAnalysisDrawn(*v, p, f, err);
    FigureOptions fo;
    fo.size = canvas;
    fo.dpi = intOption(p.value(f.dpi), 24, 1200, "--dpi");
    exportFigure(*v, outPath, fo);
    out << "wrote " << outPath << "\n";
}

}  // namespace

int runRender(const QStringList& args, QTextStream& out, QTextStream& err) {
    QCommandLineParser p;
    p.setSingleDashWordOptionMode(QCommandLineParser::ParseAsLongOptions);
    const RenderFlags f;
    f.addTo(p);
    try {
        if (!p.parse(QStringList{QStringLiteral("attnlens-render")} + args))
            throwUsage("render: " + p.errorText().toStdString());
        if (p.isSet(f.help)) {
            out << renderUsage();
            return 0;
        }
        renderFigure(p, f, out, err);
        return 0;
    } catch (const Error& e) {
        err << "attnlens render: " << e.what() << "\n";
        return exitCodeFor(e.kind());
    } catch (const std::exception& e) {
        err << "attnlens render: " << e.what() << "\n";
        return kExitInternal;  // as attnlens-cli's
    }
}

}  // namespace attnlens::gui
