#pragma once
// Every view of the desktop program, once: its id (render --view, export-all file names, session
// files, --view at start), its place in the window, what it draws, and how to make it. The main
// window's tabs, `attnlens render`, its help and its error messages all read this list, so a new
// view is one entry here plus its own file.
#include <QString>
#include <QStringList>
#include <functional>
#include <memory>
#include <vector>

namespace attnlens::gui {

class PlotView;
class Session;

enum class ViewPlace { MainTab, StatisticsTab };

struct ViewEntry {
    QString id;
    ViewPlace place = ViewPlace::MainTab;
    // Draws the selected head (an unreadable head makes `render` exit 3 unless asked otherwise).
    bool drawsSelectedHead = false;
    // Can draw a rollout instead of attention (Session::mapContentRow).
    bool drawsMapContent = false;
    // Draws a second dump beside the first (render: --second FILE); its tab comes after Statistics.
    bool needsSecondDump = false;
    // `second`: the dump shown beside the first (only the dump-pair view uses it).
    std::function<std::unique_ptr<PlotView>(Session* session, Session* second)> make;
};

// In tab order: the main tabs, then the Statistics tabs.
const std::vector<ViewEntry>& viewRegistry();
// nullptr when no view has that id.
const ViewEntry* findView(const QString& id);
// "tokenmap, compare, matrix, ..." for help texts and error messages.
QString viewIdList();

}  // namespace attnlens::gui
