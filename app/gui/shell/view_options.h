#pragma once
// What a command line sets beyond the selection (selection_options.h): the paradigms shown, the
// statistics' scope, the rollout's options and each view's own settings (--log, --diff, --k, ...).
// Read one way by the desktop program (`attnlens FILE [options]`, onto each of its views) and by
// `attnlens render` (onto the one view it draws): issue 48 item 3, where only render knew them.
// Each option's description is its line in the help texts, which are made from these objects
// (optionsHelp): an option is written down once.
#include <QCommandLineOption>
#include <QCommandLineParser>
#include <QList>
#include <QString>
#include <optional>

#include "shell/selection_options.h"
#include "shell/session_file.h"

namespace attnlens::gui {

class PlotView;

struct ViewOptions {
    ViewOptions();
    // The session's
    QCommandLineOption paradigms, scope;
    // The rollout's (what the maps show is --rollout, a selection option)
    QCommandLineOption rolloutFusion, rolloutWeights, rolloutResidual, rolloutDiscard;
    // One view's own
    QCommandLineOption opacity, log, sharedRange, diff, k, timesUniform, headStatistic, sweep, sweepParadigm;

    QList<QCommandLineOption> all() const;
};

// --paradigms, --scope and the rollout's options, onto the session (before applyMapContentOption:
// a rollout is computed with the options given).
void applySessionViewOptions(Session& session, const QCommandLineParser& parser, const ViewOptions& options);

// How a view meets the options: render draws the one view asked for, and an option of another
// view is a usage error there ("--x-uniform: only with --view local"); the desktop program has every
// view and gives each option to the view it belongs to.
enum class ViewFit { OnlyThisView, AnyView };

// One view's settings: a restored session's first (render's --session; the desktop program has
// restored its own), then the options'. unset: Defaults gives an option left unset its default
// (render's --k 3, --opacity 60), Kept leaves the view's own (the desktop program's preferences).
// Error(Usage) naming the option for a value that cannot be followed.
void applyViewOptions(PlotView& view, Session& session, const QCommandLineParser& parser, const ViewOptions& options,
                      UnsetSelection unset, ViewFit fit, const std::optional<SessionState>& saved = std::nullopt);

// "  --name VALUE      description" ("  -o, --output OUT ...") for each option, the description wrapped under itself,
// for help texts.
QString optionsHelp(const QList<QCommandLineOption>& options);
// A paragraph of a help text, wrapped as optionsHelp wraps (continuation lines indented by 2).
QString helpParagraph(const QString& text);

}  // namespace attnlens::gui
