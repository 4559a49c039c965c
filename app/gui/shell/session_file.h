#pragma once
// A researcher's session as a small JSON file (File > Save session / Open session, `attnlens
// --session FILE`, `attnlens render --session FILE`, and the automatic last session restored on the
// next start): the dump, the selection by name (image, layer, head, query, paradigm, paradigms
// shown, local branch, what the maps show and the rollout's options), the paradigm definitions, the view, the
// statistics scope, the colour range held, the image opacity and the window layout. Names rather than positions, so a
// session still means the same thing after the paradigm list or the layer order changed, and a clear error when it
// cannot (a layer or paradigm that no longer exists). Format: docs/DESKTOP.md "Sessions".
#include <QByteArray>
#include <QString>
#include <QStringList>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnlens/analysis/rollout.h"
#include "attnlens/math/tensor.h"

namespace attnlens::gui {

class Session;

inline constexpr const char* kSessionFormat = "attnlens.session";
inline constexpr int kSessionVersion = 1;

struct ColourRange {
    double lower = 0, upper = 1;
};

struct SessionState {
    QString dump;        // absolute path of the dump
    QString secondDump;  // "Compare dumps": the second dump's absolute path, "" when none
    int image = 0;
    std::string layer;  // layer name
    int head = 0;
    Index query = 0;  // token index (prefix tokens first)
    std::string paradigm;
    bool paradigmFollowsLayer = true;
    std::vector<std::string> shown;
    bool localBranch = false;
    int localChannel = -1;
    std::string map = "attention";         // MapContent: "attention", "rollout-query" or "rollout-cls"
    RolloutOptions rollout;                // docs/DEFINITIONS.md "Rollout"
    QStringList paradigmDefinitions;       // Preferences::paradigmSpecs ("NAME:key=value,...")
    std::string statsModel;                // "" = statistics over every layer
    bool statsModelFollowsLayer = true;    // the statistics cover the selected layer's model
    std::vector<std::string> statsLayers;  // hand-picked layers by name (overrides the model); empty = none
    QString view;                          // view id ("tokenmap", "local", ...); "" = keep
    QString statsScope;                    // "image" or "all"; "" = keep
    int imageOpacity = -1;                 // percent; -1 = keep
    std::optional<ColourRange> heldColourRange;
    // "Compare paradigms": the difference panel A - B by paradigm name (none when empty) and the
    // shared colour range.
    std::optional<std::pair<std::string, std::string>> compareDifference;
    bool compareSharedRange = false;
    // Statistics > Sweep: the swept paradigm by name, the parameter ("p", "alpha", ...) and the
    // range text; "" where the view follows its defaults (the layer's paradigm, the paradigm's
    // parameter, the parameter's range).
    std::string sweepParadigm, sweepParameter;
    QString sweepRange;
    QByteArray windowGeometry, windowState;  // QMainWindow::saveGeometry / saveState
};

nlohmann::json sessionToJson(const SessionState& state);
// Error(Input) naming the file (`where`) and the field for anything missing, of the wrong type or
// out of range; fields not known are ignored (later versions may add some).
SessionState sessionFromJson(const nlohmann::json& j, const std::string& where);
// Reads a session file (at most 1 MiB; Error(Input) naming the path otherwise).
SessionState readSessionFile(const QString& path);
// Atomically (temporary file, then rename); Error(Output) on failure.
void writeSessionFile(const QString& path, const SessionState& state);

// The selection of an open session by name (dump, image ... local branch, statistics model).
SessionState captureSelection(const Session& session);
// Applies the selection to `session`, whose dump must be the state's: Error(Input) naming the field
// when the layer, head, query, paradigm or image does not exist in it. The paradigm definitions are
// applied by the caller (they belong to the preferences) before this.
void applySelection(Session& session, const SessionState& state);

}  // namespace attnlens::gui
