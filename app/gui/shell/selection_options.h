#pragma once
// The selection on a command line, read one way by the desktop program (`attnlens FILE [options]`)
// and by `attnlens render` (issue 48 item 3: the two had drifted apart: --channel had two rules,
// --rollout off and --head existed only in render). One option object per option, one rule each.
#include <QCommandLineOption>
#include <QCommandLineParser>
#include <QList>
#include <QString>
#include <optional>

#include "document/session.h"

namespace attnlens::gui {

struct SelectionOptions {
    // Each description is the option's line in the help texts (view_options.h: optionsHelp).
    QCommandLineOption image{QStringLiteral("image"), QStringLiteral("image index (default 0)"), QStringLiteral("I")};
    QCommandLineOption layer{QStringLiteral("layer"), QStringLiteral("layer name or position (default 0)"),
                             QStringLiteral("L")};
    QCommandLineOption head{QStringLiteral("head"), QStringLiteral("head (default 0)"), QStringLiteral("H")};
    QCommandLineOption query{QStringLiteral("query"),
                             QStringLiteral("token index, \"y,x\" on the grid, or \"cls\" (default: grid centre)"),
                             QStringLiteral("Q")};
    QCommandLineOption paradigm{QStringLiteral("paradigm"),
                                QStringLiteral("paradigm of tokenmap/matrix/magnitude distribution (default: the "
                                               "layer's own `attention` when it names a paradigm, else softmax)"),
                                QStringLiteral("P")};
    QCommandLineOption localBranch{QStringLiteral("local-branch"),
                                   QStringLiteral("tokenmap, compare, matrix, spectrum: add the layer's local branch, "
                                                  "E_c = A + M_c (the layer must have a local_branch group)")};
    QCommandLineOption channel{QStringLiteral("channel"),
                               QStringLiteral("with --local-branch: V channel C of the head, or 'mean' (default)"),
                               QStringLiteral("C")};
    QCommandLineOption rollout{QStringLiteral("rollout"),
                               QStringLiteral("tokenmap, compare: the attention rollout of the query ('query') or of "
                                              "CLS ('cls') through the layer's model up to --layer, instead of the "
                                              "head's row ('off'); docs/DEFINITIONS.md \"Rollout\""),
                               QStringLiteral("OF")};

    QList<QCommandLineOption> all() const {
        return {image, layer, head, query, paradigm, localBranch, channel, rollout};
    }
};

// What an option left unset means: render draws image 0, layer 0, head 0 unless a session it
// restored says otherwise (Defaults); the desktop program keeps what it opened, e.g. the last
// session's selection (Kept).
enum class UnsetSelection { Defaults, Kept };

// Applies the options to an open session in the order a user would set them: image, layer, head,
// query, paradigm, the local branch and its channel. `restoredBranch`: a
// restored session showed the local branch (its weights must then be readable). Error(Usage) naming
// the option for a value that cannot be followed, Error(Input) for branch weights that cannot be read.
void applySelectionOptions(Session& session, const QCommandLineParser& parser, const SelectionOptions& options,
                           UnsetSelection unset, bool restoredBranch);
// --rollout: what the maps show (query, cls or off); after the rollout's own options are set.
void applyMapContentOption(Session& session, const QCommandLineParser& parser, const SelectionOptions& options);

// The paradigm of `session` named `name`; Error(Usage) "OPTION: unknown paradigm 'NAME' (known: ...)".
int paradigmOption(const Session& session, const QString& name, const char* option);
// An integer option in [min, max], by the parser of attnlens-cli (list_parser.h).
int intOption(const QString& text, int min, int max, const char* option);

}  // namespace attnlens::gui
