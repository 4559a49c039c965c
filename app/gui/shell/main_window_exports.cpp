// MainWindow's exports: figures, all figures, statistics, and the preferences dialog (main_window.h).
#include "shell/main_window.h"

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QShortcut>
#include <QSpinBox>
#include <QStandardPaths>
#include <QStatusBar>
#include <QStyle>
#include <QTabWidget>
#include <QTextBrowser>
#include <QTimer>
#include <QToolButton>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "attnlens/analysis/report.h"
#include "attnlens/io/atomic_file.h"
#include "attnlens/io/error.h"
#include "document/example_dump.h"
#include "document/session.h"
#include "plot/elided_label.h"
#include "plot/eliding_combo_box.h"
#include "shell/export_dialog.h"
#include "shell/preferences_dialog.h"
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

// ---- exports --------------------------------------------------------------------------------------

bool MainWindow::exportCurrentFigure(const QString& path, const FigureOptions& options, QString* error) {
    PlotView* v = currentView();
    try {
        if (!v) throwUsage("no view is shown");
        exportFigure(*v, path, options);
        statusBar()->showMessage(QStringLiteral("wrote %1").arg(path), 5000);
        return true;
    } catch (const Error& e) {
        showExportError(QString::fromStdString(e.what()));
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
}

void MainWindow::exportAllFigures(const QString& basePath, const FigureOptions& options) {
    try {
        exportAll_.start(basePath, options, views_, currentView());
    } catch (const Error& e) {
        showExportError(QString::fromStdString(e.what()));
        Q_EMIT exportFinished({}, QString::fromStdString(e.what()));
        return;
    }
    statusBar()->showMessage(QStringLiteral("exporting all views: waiting for analyses…"));
    tryFinishExportAll();
}

void MainWindow::tryFinishExportAll() {
    const auto outcome = exportAll_.tryFinish(views_, session_->jobs().busy());
    if (!outcome) return;
    if (outcome->error.isEmpty()) {
        statusBar()->showMessage(outcome->message, 8000);
    } else {
        statusBar()->clearMessage();  // not "waiting for analyses" any more
        showExportError(outcome->error);
    }
    Q_EMIT exportFinished(outcome->written, outcome->error);
}

void MainWindow::exportStatistics(const QString& path, bool wholeDump) {
    if (!session_->isOpen()) {
        Q_EMIT exportFinished({}, QStringLiteral("no dump open"));
        return;
    }
    const Selection& sel = session_->selection();
    AnalyzeRequest req;
    for (int p : sel.shown) req.paradigms.push_back(session_->paradigms()[std::size_t(p)]);
    if (req.paradigms.empty()) req.paradigms.push_back(session_->paradigms()[std::size_t(sel.paradigm)]);
    if (!wholeDump) {
        req.layers = {sel.layer};
        req.heads = {sel.head};
        req.images = {sel.image};
    }
    req.options = session_->preferences().analysis;
    // A damaged chunk leaves its (image, layer) out of a whole-dump export, listed in the report's
    // "skipped" (as `attnlens-cli analyze --skip-unreadable`); the selection's export fails instead.
    req.skipUnreadable = wholeDump;
    const QString dumpPath = session_->path();
    const QString command = QStringLiteral("attnlens (GUI) export statistics %1 of %2")
                                .arg(wholeDump ? QStringLiteral("of the whole dump")
                                               : QStringLiteral("image %1, layer %2, head %3")
                                                     .arg(sel.image)
                                                     .arg(QString::fromStdString(session_->layerInfo().name))
                                                     .arg(sel.head),
                                     dumpPath);
    session_->statistics().runAnalysis(
        req, wholeDump ? QStringLiteral("statistics of the whole dump") : QStringLiteral("statistics of the selection"),
        [this, path, dumpPath, command](std::shared_ptr<const AnalysisReport> report) {
            try {
                ToolInfo tool;
                tool.name = "attnlens";
                tool.command = command.toStdString();
                const nlohmann::json j = reportToJson(*report, tool);
                writeFileAtomically(path.toStdString(), reportText(j), {dumpPath.toStdString()});
            } catch (const std::exception& e) {
                showExportError(QString::fromStdString(e.what()));
                Q_EMIT exportFinished({}, QString::fromStdString(e.what()));
                return;
            }
            if (report->skipped.empty()) {
                statusBar()->showMessage(QStringLiteral("wrote %1").arg(path), 8000);
            } else {
                // A summary box: the report is complete but lacks what could not be read.
                auto* box = new QMessageBox(
                    QMessageBox::Warning, QStringLiteral("Statistics exported with gaps"),
                    QStringLiteral("wrote %1\n%2 (image, layer) could not be read and are listed in the report's "
                                   "\"skipped\" (details in the Issues list).")
                        .arg(path)
                        .arg(report->skipped.size()),
                    QMessageBox::Ok, this);
                box->setObjectName(QStringLiteral("exportSummaryBox"));
                box->setAttribute(Qt::WA_DeleteOnClose);
                box->setModal(false);
                box->show();
            }
            Q_EMIT exportFinished({path}, QString());
        },
        [this](const JobFailure& f) {
            if (f.cancelled()) {
                Q_EMIT exportFinished({}, QStringLiteral("export cancelled"));
                return;
            }
            showExportError(f.message);
            Q_EMIT exportFinished({}, f.message);
        });
}

void MainWindow::exportFigureDialog() {
    PlotView* v = currentView();
    ExportFigureDialog dialog(v ? v->viewTitle() : QString(),
                              selectionFileName(v ? v->viewId() : QStringLiteral("figure")), session_->path(), this);
    if (dialog.exec() != QDialog::Accepted) return;
    if (dialog.allViews())
        exportAllFigures(dialog.path(), dialog.options());
    else
        exportCurrentFigure(dialog.path(), dialog.options());
}

void MainWindow::exportStatisticsDialog(bool wholeDump) {
    const QString path = QFileDialog::getSaveFileName(
        this,
        wholeDump ? QStringLiteral("Export statistics of the whole dump")
                  : QStringLiteral("Export statistics of the selection"),
        QDir(lastExportFolder(session_->path()))
            .filePath((wholeDump ? QFileInfo(session_->path()).completeBaseName() + QStringLiteral("-statistics")
                                 : selectionFileName(QStringLiteral("statistics"))) +
                      QStringLiteral(".json")),
        QStringLiteral("JSON (*.json)"));
    if (path.isEmpty()) return;
    rememberExportFolder(path);
    exportStatistics(path, wholeDump);
}

void MainWindow::preferencesDialog() {
    PreferencesDialog dialog(session_->preferences(), this);
    if (dialog.exec() != QDialog::Accepted) return;
    Preferences p = dialog.preferences();
    savePreferences(p);
    session_->setPreferences(p);
    second_->setPreferences(p);
}

}  // namespace attnlens::gui
