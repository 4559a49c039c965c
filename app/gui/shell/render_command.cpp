#include "shell/render_command.h"

#include <QCommandLineParser>
#include <QLayout>
#include <QTextStream>
#include <memory>
#include <optional>

#include "attnlens/analysis/registered_statistics.h"
#include "attnlens/dump/list_parser.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "document/session.h"
#include "shell/export_dialog.h"
#include "shell/figure_export.h"
#include "shell/selection_options.h"
#include "shell/session_file.h"
#include "views/compare_view.h"
#include "views/confused_pairs_view.h"
#include "views/dump_pair_view.h"
#include "views/head_overview_view.h"
#include "views/locality_view.h"
#include "views/matrix_view.h"
#include "views/stats_views.h"
#include "views/sweep_view.h"
#include "views/token_map_view.h"
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

// The Heads view's statistics (head_overview_view.h's table, registered ones after), indented as
// the help's other continuation lines.
QString headStatisticsHelp() {
    return QString::fromStdString(headStatisticHelp(74))
        .replace(QStringLiteral("\n"), QStringLiteral("\n                    "));
}

}  // namespace

QString renderUsage() {
    return QStringLiteral(
               "Usage: attnlens render FILE --view VIEW -o OUT.png|OUT.svg|OUT.pdf [options]\n"
               "       attnlens render --session SESSION.json -o OUT.png|OUT.svg|OUT.pdf [options]\n"
               "Draws one view of the GUI without a window (same code and pixels as File > Export figure).\n"
               "  --view V          %1\n"
               "                    (locality over every image, dumps with --second)\n"
               "  --image I         image index (default 0)\n"
               "  --layer L         layer name or position (default 0)\n"
               "  --head H          head (default 0)\n"
               "  --query Q         token index, \"y,x\" on the grid, or \"cls\" (default: grid centre)\n"
               "  --paradigm P      paradigm of tokenmap/matrix/magnitude distribution (default: the\n"
               "                    layer's own `attention` when it names a paradigm, else softmax)\n"
               "  --paradigms A,B   paradigms of compare and statistics (default: the eight presets)\n"
               "  --define SPEC     add or replace a paradigm, NAME:key=value,... (repeatable)\n"
               "  --size WxH        canvas in logical pixels (default 1100x800)\n"
               "  --dpi D           PNG resolution (default 96: one pixel per logical pixel)\n"
               "  --log             matrix: logarithmic colour scale\n"
               "  --shared-range    compare: one colour range for all panels\n"
               "  --diff A,B        compare: add the difference map A - B\n"
               "  --scope S         statistics over the selected 'image' or 'all' images\n"
               "                    (default: all for confusion, image for local and layers)\n"
               "  --k K             local view: window size (default 3)\n"
               "  --x-uniform       local view: each head's mass over its uniform baseline on the keys\n"
               "                    its rows may attend to (1 = uniform), not the mass itself\n"
               "  --opacity PCT     tokenmap: opacity of the input image's outlines drawn over the map,\n"
               "                    0..100 (default 60, as the desktop program; 0: no outlines)\n"
               "  --local-branch    tokenmap, compare, matrix, spectrum: add the layer's local branch,\n"
               "                    E_c = A + M_c (the layer must have a local_branch group)\n"
               "  --channel C       with --local-branch: V channel C of the head, or 'mean' (default)\n"
               "  --second FILE     dumps: the second dump, shown beside FILE at the same image, head and\n"
               "                    query place, on the layer of the same name (else the same position)\n"
               "  --second-layer L  dumps: the second dump's layer, name or position\n"
               "  --same-paradigm   dumps: the second map in FILE's paradigm instead of its layer's own\n"
               "  --rollout OF      tokenmap, compare: the attention rollout of the query ('query') or of CLS\n"
               "                    ('cls') through the layer's model up to --layer, instead of the head's\n"
               "                    row ('off'); docs/DEFINITIONS.md \"Rollout\"\n"
               "  --rollout-fusion F   heads fused by mean (default), max or min\n"
               "  --rollout-weights W  clipped (default), signed or absolute\n"
               "  --rollout-residual R residual w in [0, 1] (default 0.5)\n"
               "  --rollout-discard D  discard ratio in [0, 1) (default 0)\n"
               "  --sweep NAME=RANGE  sweep: the parameter and its values, as attnlens-cli sweep --param\n"
               "                    (p, scale, c, eps, shift, slope, qscale, alpha; RANGE LO:HI:POINTS or one\n"
               "                    value; default: the paradigm's telling one around the model's value)\n"
               "  --sweep-paradigm P  sweep: the swept paradigm (default: the layer's own)\n"
               "  --head-statistic S  heads: the colour, by key or by the record's field it reads\n"
               "                    (max-weight = entropy.max_weight), listed with their fields in\n"
               "                    docs/DESKTOP.md \"The Heads view's statistics\":\n"
               "                    %3\n"
               "  --session S       a session saved by the desktop program (File > Save session): its dump,\n"
               "                    selection, paradigms, view, scope, opacity and held colour range; the\n"
               "                    options above change it\n"
               "  --render-unreadable  draw the figure even when the selected head cannot be read (its\n"
               "                    panels say NOT SHOWN and why) or the view's statistics failed (it says\n"
               "                    FAILED and why); a warning goes to stderr. Without it such a figure\n"
               "                    is not written and the exit code is 3\n"
               "Exit codes: %2.\n")
        .arg(viewIdList(), QString::fromStdString(exitCodeText()), headStatisticsHelp());
}

namespace {

// The options of `attnlens render` (renderUsage), by what they set.
struct RenderFlags {
    static QCommandLineOption opt(const QStringList& names, const QString& value = {}, const QString& def = {}) {
        return QCommandLineOption(names, QString(), value, def);
    }
    // What is drawn and where
    QCommandLineOption view = opt({"view"}, "V", "tokenmap"), output = opt({"o", "output"}, "OUT"),
                       size = opt({"size"}, "WxH", "1100x800"), dpi = opt({"dpi"}, "D", "96"),
                       sessionFile = opt({"session", kSessionOptionAlias}, "JSON"), help = opt({"h", "help"}),
                       unreadable = opt({"render-unreadable"});
    // The selection
    SelectionOptions selection;  // shared with the desktop program's command line
    QCommandLineOption paradigms = opt({"paradigms"}, "LIST"), define = opt({"define"}, "SPEC"),
                       scope = opt({"scope"}, "S");
    // Rollout
    QCommandLineOption rolloutFusion = opt({"rollout-fusion"}, "F"), rolloutWeights = opt({"rollout-weights"}, "W"),
                       rolloutResidual = opt({"rollout-residual"}, "R"), rolloutDiscard = opt({"rollout-discard"}, "D");
    // One view's own settings
    QCommandLineOption log = opt({"log"}), shared = opt({"shared-range"}), diff = opt({"diff"}, "A,B"),
                       k = opt({"k"}, "K", "3"), timesUniform = opt({"x-uniform"}),
                       opacity = opt({"opacity"}, "PCT", QString::number(Preferences{}.imageOpacityPercent)),
                       secondFile = opt({"second"}, "FILE"), secondLayer = opt({"second-layer"}, "L"),
                       sameParadigm = opt({"same-paradigm"}), headStatistic = opt({"head-statistic"}, "S"),
                       sweep = opt({"sweep"}, "NAME=RANGE"), sweepParadigm = opt({"sweep-paradigm"}, "P");

    void addTo(QCommandLineParser& p) const {
        p.addOptions({view,
                      output,
                      size,
                      dpi,
                      sessionFile,
                      help,
                      unreadable,
                      paradigms,
                      define,
                      scope,
                      rolloutFusion,
                      rolloutWeights,
                      rolloutResidual,
                      rolloutDiscard,
                      log,
                      shared,
                      diff,
                      k,
                      timesUniform,
                      opacity,
                      secondFile,
                      secondLayer,
                      sameParadigm,
                      headStatistic,
                      sweep,
                      sweepParadigm});
        p.addOptions(selection.all());
    }
};

// Image, layer, head, query, paradigm and the local branch (selection_options.h), and the paradigms
// shown: the session's (applySelection), then the options'.
void applySelectionOptions(Session& session, const QCommandLineParser& p, const RenderFlags& f,
                           const std::optional<SessionState>& saved) {
    applySelectionOptions(session, p, f.selection, saved ? UnsetSelection::Kept : UnsetSelection::Defaults,
                          saved && saved->localBranch);
    if (p.isSet(f.paradigms)) {
        std::vector<int> shown;
        for (const QString& n : p.value(f.paradigms).split(',', Qt::SkipEmptyParts))
            shown.push_back(paradigmOption(session, n, "--paradigms"));
        session.setShown(shown);
    }
}

void applyRollout(Session& session, const QCommandLineParser& p, const RenderFlags& f) {
    RolloutOptions ro = session.rollout().options();  // the session's, else the defaults
    if (p.isSet(f.rolloutFusion)) ro.fusion = parseHeadFusion(p.value(f.rolloutFusion).toStdString());
    if (p.isSet(f.rolloutWeights)) ro.weights = parseRolloutWeights(p.value(f.rolloutWeights).toStdString());
    if (p.isSet(f.rolloutResidual))
        ro.residual = parseNumber(p.value(f.rolloutResidual).toStdString(), "--rollout-residual");
    if (p.isSet(f.rolloutDiscard))
        ro.discardRatio = parseNumber(p.value(f.rolloutDiscard).toStdString(), "--rollout-discard");
    session.rollout().setOptions(ro);  // Error(Usage) naming the option out of range
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

// The sweep view's parameter and range: the session's, then --sweep-paradigm and --sweep.
void configureSweep(SweepView* s, Session& session, const QCommandLineParser& p, const RenderFlags& f,
                    const std::optional<SessionState>& saved) {
    if (s && saved) s->restoreChoices(saved->sweepParadigm, saved->sweepParameter, saved->sweepRange);
    if (!p.isSet(f.sweep) && !p.isSet(f.sweepParadigm)) return;
    if (!s) throwUsage("--sweep, --sweep-paradigm: only with --view sweep");
    if (p.isSet(f.sweepParadigm))
        s->setSweepParadigm(paradigmOption(session, p.value(f.sweepParadigm), "--sweep-paradigm"));
    if (!p.isSet(f.sweep)) return;
    const QString text = p.value(f.sweep);
    const qsizetype eq = text.indexOf('=');
    if (eq < 0) throwUsage("--sweep: expected NAME=LO:HI:POINTS, e.g. p=1:8:15, got " + quotedText(text.toStdString()));
    try {
        s->setParameter(parseSweepParameter(text.left(eq).trimmed().toStdString()));
        s->setRange(text.mid(eq + 1));
    } catch (const Error& e) {
        throwUsage(std::string("--sweep: ") + e.what());
    }
}

// The view's own settings: the session's, then the options'.
void configureView(PlotView* v, Session& session, const QCommandLineParser& p, const RenderFlags& f,
                   const std::optional<SessionState>& saved) {
    if (auto* t = dynamic_cast<TokenMapView*>(v)) {
        t->setImageOpacity(saved && saved->imageOpacity >= 0 && !p.isSet(f.opacity)
                               ? saved->imageOpacity
                               : intOption(p.value(f.opacity), 0, 100, "--opacity"));
        if (saved && saved->heldColourRange)
            t->holdColourRange(true, QCPRange(saved->heldColourRange->lower, saved->heldColourRange->upper));
    }
    if (auto* m = dynamic_cast<MatrixView*>(v)) m->setLogScale(p.isSet(f.log));
    if (auto* c = dynamic_cast<CompareView*>(v)) {
        c->setSharedRange(p.isSet(f.shared) || (saved && saved->compareSharedRange));
        if (saved && saved->compareDifference && !p.isSet(f.diff)) {
            const int a = session.paradigmIndex(saved->compareDifference->first);
            const int b = session.paradigmIndex(saved->compareDifference->second);
            if (a < 0 || b < 0)
                throwInput("the session's difference panel names a paradigm that is not defined: " +
                           saved->compareDifference->first + ", " + saved->compareDifference->second);
            c->setDifference(a, b);
        }
        if (p.isSet(f.diff)) {
            const QStringList ab = p.value(f.diff).split(',');
            if (ab.size() != 2) throwUsage("--diff: expected A,B");
            c->setDifference(paradigmOption(session, ab[0], "--diff"), paradigmOption(session, ab[1], "--diff"));
        }
    }
    if (p.isSet(f.headStatistic)) {
        auto* h = dynamic_cast<HeadOverviewView*>(v);
        if (!h) throwUsage("--head-statistic: only with --view heads");
        h->setStatisticByKey(p.value(f.headStatistic).trimmed().toStdString());
    }
    configureSweep(dynamic_cast<SweepView*>(v), session, p, f, saved);
    if (auto* l = dynamic_cast<LocalMassView*>(v)) {
        l->setK(intOption(p.value(f.k), kMinLocalK, kMaxLocalK, "--k"));
        l->setTimesUniform(p.isSet(f.timesUniform));
    } else if (p.isSet(f.timesUniform)) {
        throwUsage("--x-uniform: only with --view local");
    }
    if (auto* r = dynamic_cast<LayerReportView*>(v); r && p.isSet(f.scope)) r->setScope(session.statistics().scope());
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
        std::optional<SessionState> saved;
        if (p.isSet(f.sessionFile)) {
            if (!p.positionalArguments().isEmpty()) throwUsage("render: give either FILE or --session, not both");
            saved = readSessionFile(p.value(f.sessionFile));
        } else if (p.positionalArguments().size() != 1) {
            throwUsage("render: expected one FILE (see attnlens render --help)");
        }
        if (!p.isSet(f.output)) throwUsage("render: -o OUT.png|svg|pdf is required");
        const QString outPath = p.value(f.output);
        figureFormatFromPath(outPath);  // usage error before any work
        const QStringList wh = p.value(f.size).toLower().split('x');
        if (wh.size() != 2) throwUsage("--size: expected WxH, e.g. 1100x800");
        const QSize canvas(intOption(wh[0], kMinFigureSide, kMaxFigureSide, "--size"),
                           intOption(wh[1], kMinFigureSide, kMaxFigureSide, "--size"));

        Preferences prefs;
        if (saved) prefs.paradigmSpecs = saved->paradigmDefinitions;
        prefs.paradigmSpecs += p.values(f.define);
        QStringList problems;
        prefs.paradigms(&problems);
        if (!problems.isEmpty()) throwUsage(problems.join("; ").toStdString());

        Session session(prefs);
        session.jobs().setSynchronous(true);
        session.open(saved ? saved->dump : p.positionalArguments().front());
        if (saved) applySelection(session, *saved);
        applySelectionOptions(session, p, f, saved);
        applyRollout(session, p, f);
        const QString sc = p.value(f.scope);
        if (p.isSet(f.scope) && sc != QStringLiteral("image") && sc != QStringLiteral("all"))
            throwUsage("--scope: 'image' or 'all'");
        if (p.isSet(f.scope))
            session.statistics().setScope(sc == QStringLiteral("all") ? StatsScope::AllImages
                                                                      : StatsScope::CurrentImage);

        const QString viewId = saved && !saved->view.isEmpty() && !p.isSet(f.view) ? saved->view : p.value(f.view);
        const ViewEntry* entry = findView(viewId);
        if (!entry)
            throwUsage("--view: unknown view \"" + viewId.toStdString() + "\" (" + viewIdList().toStdString() + ")");
        // The second dump of "Compare dumps": --second, else the session's.
        Session second(prefs);
        second.jobs().setSynchronous(true);
        const QString secondPath = p.isSet(f.secondFile) ? p.value(f.secondFile)
                                   : saved               ? saved->secondDump
                                                         : QString();
        if ((p.isSet(f.secondLayer) || p.isSet(f.sameParadigm)) && viewId != QStringLiteral("dumps"))
            throwUsage("--second-layer, --same-paradigm: only with --view dumps");
        if (viewId == QStringLiteral("dumps") && !secondPath.isEmpty()) second.open(secondPath);
        std::unique_ptr<PlotView> v = makeView(*entry, &session, &second);
        if (auto* d = dynamic_cast<DumpPairView*>(v.get())) {
            if (p.isSet(f.secondLayer))
                d->setSecondLayer(parseLayer(p.value(f.secondLayer).toStdString(), second.info(), "--second-layer"));
            d->setSameParadigm(p.isSet(f.sameParadigm));
        }
        checkDrawable(session, *entry, p, f, err);
        v->resize(canvas);
        // The view is never shown: without this its layout would keep the plot at its default size
        // until the export, and views that arrange their panels by the plot's size (the heads
        // view's columns) would arrange them for that size instead of the figure's.
        if (QLayout* layout = v->layout()) layout->activate();
        configureView(v.get(), session, p, f, saved);
        // Whole-dump statistics that failed (data that cannot be read, a dump too large for this
        // machine) would be a figure that says FAILED: as for an unreadable head, an input error.
        v->refreshNow();
        if (const QString failure = v->analysisFailure(); !failure.isEmpty()) {
            if (!p.isSet(f.unreadable))
                throwInput(failure.toStdString() +
                           " (nothing written; --render-unreadable draws the figure with FAILED)");
            err << "attnlens render: warning: " << failure << " (drawn as FAILED, --render-unreadable)\n";
        }
        FigureOptions fo;
        fo.size = canvas;
        fo.dpi = intOption(p.value(f.dpi), 24, 1200, "--dpi");
        exportFigure(*v, outPath, fo);
        out << "wrote " << outPath << "\n";
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
