#pragma once
// File > Export figure, all views: every view is refreshed so that it starts the background analyses
// it needs; when none waits any more (tryFinish after each finished job) one file per view is
// written, NAME-view.ext, at the size of the view on screen.
#include <QString>
#include <QStringList>
#include <optional>
#include <vector>

#include "shell/figure_export.h"

namespace attnlens::gui {

class PlotView;

class ExportAllFigures {
public:
    // What an export ended with: the files written, the error ("" for none) or the status message.
    struct Outcome {
        QStringList written;
        QString error;
        QString message;
    };

    // The format comes from basePath's extension (Error(Usage) when it names none); an empty
    // options.size takes the current view's.
    void start(const QString& basePath, const FigureOptions& options, const std::vector<PlotView*>& views,
               PlotView* current);
    bool active() const { return active_; }
    // Nothing while a view waits for an analysis that is still running (jobsBusy); otherwise the
    // outcome: the files, or why there are none (an analysis failed or was cancelled).
    std::optional<Outcome> tryFinish(const std::vector<PlotView*>& views, bool jobsBusy);
    // Stops waiting; true when an export was waiting.
    bool cancel();

private:
    bool active_ = false;
    QString basePath_;
    FigureOptions options_;
    FigureFormat format_ = FigureFormat::Png;
};

}  // namespace attnlens::gui
