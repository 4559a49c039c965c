#include "shell/view_options.h"

#include <QStringList>
#include <vector>

#include "attnlens/analysis/rollout.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/analysis/sweep.h"
#include "attnlens/dump/list_parser.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "document/preferences.h"
#include "views/compare_view.h"
#include "views/head_overview_view.h"
#include "views/layer_report_views.h"
#include "views/matrix_view.h"
#include "views/sweep_view.h"
#include "views/token_map_view.h"

namespace attnlens::gui {
namespace {

QCommandLineOption option(const char* name, const QString& description, const char* value = nullptr,
                          const QString& defaultValue = {}) {
    return QCommandLineOption(QString::fromLatin1(name), description, value ? QString::fromLatin1(value) : QString(),
                              defaultValue);
}

}  // namespace

ViewOptions::ViewOptions()
    : paradigms(option("paradigms", QStringLiteral("paradigms of compare and statistics (default: the eight presets)"),
                       "A,B")),
      scope(option("scope",
                   QStringLiteral("statistics over the selected 'image' or 'all' images (default: all for confusion, "
                                  "image for local and layers)"),
                   "S")),
      rolloutFusion(
          option("rollout-fusion", QStringLiteral("rollout: heads fused by mean (default), max or min"), "F")),
      rolloutWeights(
          option("rollout-weights", QStringLiteral("rollout: weights clipped (default), signed or absolute"), "W")),
      rolloutResidual(option("rollout-residual", QStringLiteral("rollout: residual w in [0, 1] (default 0.5)"), "R")),
      rolloutDiscard(option("rollout-discard", QStringLiteral("rollout: discard ratio in [0, 1) (default 0)"), "D")),
      opacity(option("opacity",
                     QStringLiteral("tokenmap: opacity of the input image's outlines drawn over the map, 0..100 "
                                    "(default %1; 0: no outlines)")
                         .arg(Preferences{}.imageOpacityPercent),
                     "PCT", QString::number(Preferences{}.imageOpacityPercent))),
      log(option("log", QStringLiteral("matrix: logarithmic colour scale"))),
      sharedRange(option("shared-range", QStringLiteral("compare: one colour range for all panels"))),
      diff(option("diff", QStringLiteral("compare: add the difference map A - B"), "A,B")),
      k(option("k", QStringLiteral("local view: window size (default 3)"), "K", QStringLiteral("3"))),
      timesUniform(
          option("x-uniform", QStringLiteral("local view: each head's mass over its uniform baseline on the keys its "
                                             "rows may attend to (1 = uniform), not the mass itself"))),
      headStatistic(
          option("head-statistic",
                 QStringLiteral("heads: the colour, by key or by the record's field it reads "
                                "(max-weight = entropy.max_weight), listed with their fields in "
                                "docs/DESKTOP.md \"The Heads view's statistics\":\n") +
                     // Broken between entries only: a help line holds 80 characters beside the indent (with the comma).
                     QString::fromStdString(headStatisticHelp(78)),
                 "S")),
      sweep(option("sweep",
                   QStringLiteral("sweep: the parameter and its values, as attnlens-cli sweep --param (p, scale, c, "
                                  "eps, shift, slope, qscale, alpha; RANGE LO:HI:POINTS or one value; default: the "
                                  "paradigm's telling one around the model's value)"),
                   "NAME=RANGE")),
      sweepParadigm(
          option("sweep-paradigm", QStringLiteral("sweep: the swept paradigm (default: the layer's own)"), "P")) {}

QList<QCommandLineOption> ViewOptions::all() const {
    return {paradigms, scope, rolloutFusion, rolloutWeights, rolloutResidual, rolloutDiscard, opacity, log, sharedRange,
            diff,      k,     timesUniform,  headStatistic,  sweep,           sweepParadigm};
}

void applySessionViewOptions(Session& session, const QCommandLineParser& p, const ViewOptions& o) {
    if (p.isSet(o.paradigms)) {
        std::vector<int> shown;
        for (const QString& n : p.value(o.paradigms).split(',', Qt::SkipEmptyParts))
            shown.push_back(paradigmOption(session, n, "--paradigms"));
        session.setShown(shown);
    }
    if (p.isSet(o.scope)) {
        const QString sc = p.value(o.scope);
        if (sc != QStringLiteral("image") && sc != QStringLiteral("all")) throwUsage("--scope: 'image' or 'all'");
        session.statistics().setScope(sc == QStringLiteral("all") ? StatsScope::AllImages : StatsScope::CurrentImage);
    }
    RolloutOptions ro = session.rollout().options();  // the session's, else the defaults
    if (p.isSet(o.rolloutFusion)) ro.fusion = parseHeadFusion(p.value(o.rolloutFusion).toStdString());
    if (p.isSet(o.rolloutWeights)) ro.weights = parseRolloutWeights(p.value(o.rolloutWeights).toStdString());
    if (p.isSet(o.rolloutResidual))
        ro.residual = parseNumber(p.value(o.rolloutResidual).toStdString(), "--rollout-residual");
    if (p.isSet(o.rolloutDiscard))
        ro.discardRatio = parseNumber(p.value(o.rolloutDiscard).toStdString(), "--rollout-discard");
    session.rollout().setOptions(ro);  // Error(Usage) naming the option out of range
}

namespace {

// The token map: the image's outlines and a held colour range.
void applyTokenMapOptions(TokenMapView& t, const QCommandLineParser& p, const ViewOptions& o, bool defaults,
                          const std::optional<SessionState>& saved) {
    if (saved && saved->imageOpacity >= 0 && !p.isSet(o.opacity))
        t.setImageOpacity(saved->imageOpacity);
    else if (defaults || p.isSet(o.opacity))
        t.setImageOpacity(intOption(p.value(o.opacity), 0, 100, "--opacity"));
    if (saved && saved->heldColourRange)
        t.holdColourRange(true, QCPRange(saved->heldColourRange->lower, saved->heldColourRange->upper));
}

// Compare paradigms: one colour range, and the difference panel (the session's, then --diff).
void applyCompareOptions(CompareView& c, Session& session, const QCommandLineParser& p, const ViewOptions& o,
                         bool defaults, const std::optional<SessionState>& saved) {
    if (defaults || p.isSet(o.sharedRange) || saved)
        c.setSharedRange(p.isSet(o.sharedRange) || (saved && saved->compareSharedRange));
    if (saved && saved->compareDifference && !p.isSet(o.diff)) {
        const int a = session.paradigmIndex(saved->compareDifference->first);
        const int b = session.paradigmIndex(saved->compareDifference->second);
        if (a < 0 || b < 0)
            throwInput("the session's difference panel names a paradigm that is not defined: " +
                       saved->compareDifference->first + ", " + saved->compareDifference->second);
        c.setDifference(a, b);
    }
    if (p.isSet(o.diff)) {
        const QStringList ab = p.value(o.diff).split(',');
        if (ab.size() != 2) throwUsage("--diff: expected A,B");
        c.setDifference(paradigmOption(session, ab[0], "--diff"), paradigmOption(session, ab[1], "--diff"));
    }
}

// The sweep view's parameter and range: the session's, then --sweep-paradigm and --sweep.
void applySweepOptions(SweepView& s, Session& session, const QCommandLineParser& p, const ViewOptions& o,
                       const std::optional<SessionState>& saved) {
    if (saved) s.restoreChoices(saved->sweepParadigm, saved->sweepParameter, saved->sweepRange);
    if (p.isSet(o.sweepParadigm))
        s.setSweepParadigm(paradigmOption(session, p.value(o.sweepParadigm), "--sweep-paradigm"));
    if (!p.isSet(o.sweep)) return;
    const QString text = p.value(o.sweep);
    const qsizetype eq = text.indexOf('=');
    if (eq < 0) throwUsage("--sweep: expected NAME=LO:HI:POINTS, e.g. p=1:8:15, got " + quotedText(text.toStdString()));
    try {
        s.setParameter(parseSweepParameter(text.left(eq).trimmed().toStdString()));
        s.setRange(text.mid(eq + 1));
    } catch (const Error& e) {
        throwUsage(std::string("--sweep: ") + e.what());
    }
}

// render: the options only one view takes, given for another.
void checkOptionsFitView(PlotView& v, const QCommandLineParser& p, const ViewOptions& o) {
    if ((p.isSet(o.sweep) || p.isSet(o.sweepParadigm)) && !dynamic_cast<SweepView*>(&v))
        throwUsage("--sweep, --sweep-paradigm: only with --view sweep");
    if (p.isSet(o.headStatistic) && !dynamic_cast<HeadOverviewView*>(&v))
        throwUsage("--head-statistic: only with --view heads");
    if (p.isSet(o.timesUniform) && !dynamic_cast<LocalMassView*>(&v)) throwUsage("--x-uniform: only with --view local");
}

}  // namespace

void applyViewOptions(PlotView& v, Session& session, const QCommandLineParser& p, const ViewOptions& o,
                      UnsetSelection unset, ViewFit fit, const std::optional<SessionState>& saved) {
    const bool defaults = unset == UnsetSelection::Defaults;
    if (fit == ViewFit::OnlyThisView) checkOptionsFitView(v, p, o);
    if (auto* t = dynamic_cast<TokenMapView*>(&v)) applyTokenMapOptions(*t, p, o, defaults, saved);
    if (auto* m = dynamic_cast<MatrixView*>(&v); m && (defaults || p.isSet(o.log))) m->setLogScale(p.isSet(o.log));
    if (auto* c = dynamic_cast<CompareView*>(&v)) applyCompareOptions(*c, session, p, o, defaults, saved);
    if (auto* h = dynamic_cast<HeadOverviewView*>(&v); h && p.isSet(o.headStatistic))
        h->setStatisticByKey(p.value(o.headStatistic).trimmed().toStdString());
    if (auto* s = dynamic_cast<SweepView*>(&v)) applySweepOptions(*s, session, p, o, saved);
    if (auto* l = dynamic_cast<LocalMassView*>(&v)) {
        if (defaults || p.isSet(o.k)) l->setK(intOption(p.value(o.k), kMinLocalK, kMaxLocalK, "--k"));
        if (defaults || p.isSet(o.timesUniform)) l->setTimesUniform(p.isSet(o.timesUniform));
    }
    if (auto* r = dynamic_cast<LayerReportView*>(&v); r && p.isSet(o.scope)) r->setScope(session.statistics().scope());
}

namespace {

constexpr int kHelpIndent = 20, kHelpWidth = 100;

// `lead` then the words of each line of `text`, wrapped at kHelpWidth under kHelpIndent (a line of
// text that fits stays whole: the head statistics' keys are broken between entries only).
QString wrapped(const QString& lead, const QString& text, int indent) {
    QString out, line = lead;
    bool lineHasWord = false;
    for (const QString& part : text.split(QLatin1Char('\n'))) {
        for (const QString& w : part.split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
            if (lineHasWord && line.size() + 1 + w.size() > kHelpWidth) {
                out += line + QLatin1Char('\n');
                line = QString(indent, QLatin1Char(' '));
                lineHasWord = false;
            }
            line += (lineHasWord ? QStringLiteral(" ") : QString()) + w;
            lineHasWord = true;
        }
        if (lineHasWord) {
            out += line + QLatin1Char('\n');
            line = QString(indent, QLatin1Char(' '));
            lineHasWord = false;
        }
    }
    if (!line.trimmed().isEmpty()) out += line + QLatin1Char('\n');
    return out;
}

}  // namespace

QString optionsHelp(const QList<QCommandLineOption>& options) {
    QString text;
    for (const QCommandLineOption& o : options) {
        QStringList names;
        // A one-letter name beside a long one is the short form (-o, --output); alone it is written
        // as the docs write it (--k).
        for (const QString& n : o.names())
            names << (n.size() == 1 && o.names().size() > 1 ? QStringLiteral("-") : QStringLiteral("--")) + n;
        QString head = QStringLiteral("  ") + names.join(QStringLiteral(", "));
        if (!o.valueName().isEmpty()) head += QLatin1Char(' ') + o.valueName();
        text += wrapped(head.size() + 2 <= kHelpIndent ? head.leftJustified(kHelpIndent) : head + QStringLiteral("  "),
                        o.description(), kHelpIndent);
    }
    return text;
}

QString helpParagraph(const QString& text) { return wrapped(QString(), text, 2); }

}  // namespace attnlens::gui
