#include "shell/export_all.h"

#include "attnlens/analysis/report.h"

#include <QDir>
#include <QFileInfo>

#include "attnlens/io/atomic_file.h"
#include "attnlens/io/error.h"
#include "views/plot_view.h"

namespace attnlens::gui {

void ExportAllFigures::start(const QString& basePath, const FigureOptions& options, const std::vector<PlotView*>& views,
                             PlotView* current) {
    format_ = figureFormatFromPath(basePath);
    // A folder that does not exist fails now, not after every analysis has run.
    const QFileInfo base(basePath);
    if (!base.dir().exists())
        throwOutput("cannot write " + basePath.toStdString() + ": the folder " + base.dir().path().toStdString() +
                    " does not exist");
    active_ = true;
    basePath_ = basePath;
    options_ = options;
    // Every view at the size of the one on screen, so the files look like the window.
    if (options_.size.isEmpty() && current) options_.size = current->plot()->size();
    for (PlotView* v : views) v->refreshNow();  // starts the analyses they need
}

std::optional<ExportAllFigures::Outcome> ExportAllFigures::tryFinish(const std::vector<PlotView*>& views,
                                                                     bool jobsBusy) {
    if (!active_) return std::nullopt;
    bool waiting = false;
    for (PlotView* v : views) {
        v->refreshNow();
        waiting |= v->waitingForResults();
    }
    if (waiting && jobsBusy) return std::nullopt;  // the next finished job calls again
    active_ = false;
    Outcome outcome;
    if (waiting) {
        outcome.error = QStringLiteral("export of all views stopped: an analysis failed or was cancelled");
        return outcome;
    }
    const QFileInfo base(basePath_);
    const QString stem = base.dir().filePath(base.completeBaseName());
    QStringList skipped;
    try {
        for (PlotView* v : views) {
            if (!v->hasFigure()) {
                skipped << v->viewTitle();
                continue;
            }
            const QString path = QStringLiteral("%1-%2.%3").arg(stem, v->viewId(), figureExtension(format_));
            writeFileAtomically(path.toStdString(), renderFigure(*v, format_, options_).toStdString());
            outcome.written << path;
        }
    } catch (const Error& e) {
        outcome.error = QString::fromStdString(e.what());
        return outcome;
    }
    outcome.message =
        QStringLiteral("wrote %1 figures (%2-*.%3)").arg(outcome.written.size()).arg(stem, figureExtension(format_)) +
        (skipped.isEmpty() ? QString()
                           : QStringLiteral("; nothing to draw in: %1").arg(skipped.join(QStringLiteral(", "))));
    return outcome;
}

bool ExportAllFigures::cancel() {
    const bool was = active_;
    active_ = false;
    return was;
}

}  // namespace attnlens::gui
