// MainWindow's files: opening dumps (in the background, the second dump, the examples, recent files,
// drag and drop), errors, and sessions saved and restored (main_window.h).
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
namespace {

constexpr int kMaxRecentFiles = 10;

}  // namespace

// ---- opening ------------------------------------------------------------------------------------

bool MainWindow::openFile(const QString& path) {
    try {
        session_->open(path);
    } catch (const Error& e) {
        showError(QStringLiteral("Cannot open dump"), QString::fromStdString(e.what()));
        return false;
    } catch (const std::exception& e) {
        showError(QStringLiteral("Cannot open dump"),
                  QStringLiteral("%1: %2").arg(path, QString::fromStdString(e.what())));
        return false;
    }
    fileOpened(path);
    return true;
}

void MainWindow::openFileInBackground(const QString& path) {
    // The window stays usable while the file is checked and opened; the progress bar says so and
    // Cancel (Esc) drops the result. A newer open supersedes an older one (same job slot).
    statusBar()->showMessage(QStringLiteral("opening %1…").arg(QFileInfo(path).fileName()));
    session_->jobs().submit<std::shared_ptr<const DumpReader>>(
        JobSlot{JobKind::OpenDump}, QStringLiteral("opening %1").arg(QFileInfo(path).fileName()),
        [path](const JobContext&) { return openDumpReader(path); },
        [this, path](std::shared_ptr<const DumpReader>& reader) {
            session_->adopt(std::move(reader), path);
            fileOpened(path);
            statusBar()->clearMessage();
            Q_EMIT openFinished(path, true);
        },
        [this, path](const JobFailure& f) {
            statusBar()->clearMessage();
            if (f.cancelled()) return;  // Cancel (Esc) keeps the dump that was open, without a word
            showError(QStringLiteral("Cannot open dump"), f.message);
            Q_EMIT openFinished(path, false);
        });
}

bool MainWindow::openSecondFile(const QString& path) {
    try {
        second_->open(path);
    } catch (const Error& e) {
        showError(QStringLiteral("Cannot open the second dump"), QString::fromStdString(e.what()));
        return false;
    }
    showView(pair_->viewId());
    return true;
}

void MainWindow::openSecondDialog() {
    const QString dir = session_->isOpen() ? QFileInfo(session_->path()).absolutePath() : QString();
    const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Open second dump for comparison"), dir,
                                                      QStringLiteral("AttnLens dumps (*.h5 *.hdf5);;All files (*)"));
    if (path.isEmpty()) return;
    // Checked and opened on a worker like the first dump; the view shows it when it lands.
    session_->jobs().submit<std::shared_ptr<const DumpReader>>(
        JobSlot{JobKind::OpenSecondDump}, QStringLiteral("opening %1").arg(QFileInfo(path).fileName()),
        [path](const JobContext&) { return openDumpReader(path); },
        [this, path](std::shared_ptr<const DumpReader>& reader) {
            second_->adopt(std::move(reader), path);
            showView(pair_->viewId());
        },
        [this](const JobFailure& f) {
            if (!f.cancelled()) showError(QStringLiteral("Cannot open the second dump"), f.message);
        });
}

void MainWindow::fileOpened(const QString& path) {
    lastError_.clear();
    addRecentFile(QFileInfo(path).absoluteFilePath());
    setWindowTitle(QStringLiteral("%1 — AttnLens").arg(QFileInfo(path).fileName()));
}

bool MainWindow::openExample() {
    QString error;
    const QString path = findOrCreateExampleDump(&error);
    if (path.isEmpty()) {
        showError(QStringLiteral("No example dump"),
                  QStringLiteral("Could not find or create the example dump: %1").arg(error));
        return false;
    }
    return openFile(path);
}

bool MainWindow::openHierarchicalExample() {
    QString error;
    const QString path = findHierarchicalExampleDump(&error);
    if (path.isEmpty()) {
        showError(QStringLiteral("No hierarchical example"), error);
        return false;
    }
    return openFile(path);
}

void MainWindow::openDialog() {
    const QString dir = session_->isOpen() ? QFileInfo(session_->path()).absolutePath() : QString();
    const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Open attention dump"), dir,
                                                      QStringLiteral("AttnLens dumps (*.h5 *.hdf5);;All files (*)"));
    if (!path.isEmpty()) openFileInBackground(path);
}

void MainWindow::showError(const QString& title, const QString& text) {
    showError(title, text, Issue{IssueKind::Error, text});
}

void MainWindow::showExportError(const QString& text) {
    // About the open dump's figures or statistics: its entry goes when another dump is opened.
    showError(QStringLiteral("Export failed"), text,
              Issue{IssueKind::Error, text, session_->isOpen() ? session_->path() : QString(), session_->dumpEpoch()});
}

void MainWindow::showError(const QString& title, const QString& text, const Issue& issue) {
    lastError_ = text;
    addIssue(issue);
    // Non-modal: the window stays usable and tests are not blocked.
    auto* box = new QMessageBox(QMessageBox::Warning, title, text, QMessageBox::Ok, this);
    box->setObjectName(QStringLiteral("errorBox"));
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->setModal(false);
    box->show();
}

QStringList MainWindow::recentFiles() const { return QSettings().value(QStringLiteral("recentFiles")).toStringList(); }

void MainWindow::addRecentFile(const QString& path) {
    QSettings settings;
    QStringList files = settings.value(QStringLiteral("recentFiles")).toStringList();
    files.removeAll(path);
    files.prepend(path);
    while (files.size() > kMaxRecentFiles) files.removeLast();
    settings.setValue(QStringLiteral("recentFiles"), files);
}

void MainWindow::rebuildRecentMenu() {
    recentMenu_->clear();
    const QStringList files = recentFiles();
    for (const QString& f : files) recentMenu_->addAction(f, this, [this, f]() { openFileInBackground(f); });
    if (files.isEmpty()) recentMenu_->addAction(QStringLiteral("(none)"))->setEnabled(false);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
    if (e->mimeData()->hasUrls())
        for (const QUrl& u : e->mimeData()->urls())
            if (u.isLocalFile()) {
                e->acceptProposedAction();
                return;
            }
}

void MainWindow::dropEvent(QDropEvent* e) {
    for (const QUrl& u : e->mimeData()->urls())
        if (u.isLocalFile()) {
            e->acceptProposedAction();
            openFileInBackground(u.toLocalFile());
            return;
        }
}

void MainWindow::closeEvent(QCloseEvent* e) {
    // The session is restored on the next start (main.cpp, when no file is given).
    if (session_->isOpen()) {
        try {
            QDir().mkpath(QFileInfo(lastSessionPath()).absolutePath());
            writeSessionFile(lastSessionPath(), sessionState());
        } catch (const Error&) {
            // Not being able to remember the session must not stop the program from closing.
        }
    }
    QSettings settings;
    settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
    settings.setValue(QStringLiteral("window/state"), saveState());
    Preferences p = session_->preferences();
    savePreferences(p);
    session_->jobs().cancelAll();
    QMainWindow::closeEvent(e);
}

// The preferences plus the view state kept with them (image opacity, local branch toggle and channel).
void MainWindow::savePreferences(Preferences& p) {
    p.imageOpacityPercent = tokenMap_->imageOpacity();
    p.localBranch = session_->selection().localBranch;
    p.localBranchChannel = session_->selection().localChannel;
    QSettings settings;
    p.save(settings);
}

// ---- sessions -------------------------------------------------------------------------------------

QString MainWindow::lastSessionPath() {
    return QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation))
        .filePath(QStringLiteral("last-session.json"));
}

SessionState MainWindow::sessionState() const {
    SessionState s = captureSelection(*session_);
    if (PlotView* v = currentView()) s.view = v->viewId();
    if (second_->isOpen()) s.secondDump = QFileInfo(second_->path()).absoluteFilePath();
    s.imageOpacity = tokenMap_->imageOpacity();
    if (tokenMap_->colourRangeHeld())
        s.heldColourRange = ColourRange{tokenMap_->heldColourRange().lower, tokenMap_->heldColourRange().upper};
    if (const auto [a, b] = compare_->difference(); a >= 0 && b >= 0)
        s.compareDifference =
            std::make_pair(session_->paradigms()[std::size_t(a)].name, session_->paradigms()[std::size_t(b)].name);
    s.compareSharedRange = compare_->sharedRange();
    if (auto* sweep = qobject_cast<SweepView*>(view(QStringLiteral("sweep")))) {
        s.sweepParadigm = sweep->chosenParadigm();
        s.sweepParameter = sweep->chosenParameter();
        s.sweepRange = sweep->chosenRange();
    }
    s.windowGeometry = saveGeometry();
    s.windowState = saveState();
    return s;
}

bool MainWindow::restoreSession(const SessionState& state, bool withWindow) {
    try {
        if (state.paradigmDefinitions != session_->preferences().paradigmSpecs) {
            // The session's paradigms replace the preferences' for this run (saved with them on exit),
            // so that names in the session mean the definitions they were saved with.
            Preferences p = session_->preferences();
            p.paradigmSpecs = state.paradigmDefinitions;
            QStringList problems;
            p.paradigms(&problems);
            if (!problems.isEmpty()) throwInput("session paradigm definitions: " + problems.join("; ").toStdString());
            session_->setPreferences(p);
            second_->setPreferences(p);
        }
        const bool sameDump = session_->isOpen() && QFileInfo(session_->path()).absoluteFilePath() ==
                                                        QFileInfo(state.dump).absoluteFilePath();
        if (!sameDump && !openFile(state.dump)) return false;
        applySelection(*session_, state);
    } catch (const Error& e) {
        showError(QStringLiteral("Cannot restore session"), QString::fromStdString(e.what()));
        return false;
    }
    // The comparison's second dump: not restoring it is worth an issue, not a failed session.
    if (!state.secondDump.isEmpty() && !(second_->isOpen() && second_->path() == state.secondDump)) {
        try {
            second_->open(state.secondDump);
        } catch (const Error& e) {
            addIssue(Issue{
                IssueKind::Error,
                QStringLiteral("the session's second dump was not opened: %1").arg(QString::fromStdString(e.what()))});
        }
    }
    if (state.imageOpacity >= 0) tokenMap_->setImageOpacity(state.imageOpacity);
    if (state.heldColourRange)
        tokenMap_->holdColourRange(true, QCPRange(state.heldColourRange->lower, state.heldColourRange->upper));
    else
        tokenMap_->holdColourRange(false);
    compare_->setSharedRange(state.compareSharedRange);
    if (auto* sweep = qobject_cast<SweepView*>(view(QStringLiteral("sweep")))) {
        try {
            sweep->restoreChoices(state.sweepParadigm, state.sweepParameter, state.sweepRange);
        } catch (const Error& e) {
            addIssue(Issue{
                IssueKind::Error,
                QStringLiteral("the session's sweep was not restored: %1").arg(QString::fromStdString(e.what()))});
        }
    }
    compare_->setDifference(-1, -1);
    if (state.compareDifference) {
        const int a = session_->paradigmIndex(state.compareDifference->first);
        const int b = session_->paradigmIndex(state.compareDifference->second);
        if (a >= 0 && b >= 0)
            compare_->setDifference(a, b);
        else
            addIssue(Issue{IssueKind::Error,
                           QStringLiteral("the session's difference panel %1 - %2 names a paradigm that is not defined")
                               .arg(QString::fromStdString(state.compareDifference->first),
                                    QString::fromStdString(state.compareDifference->second))});
    }
    if (!state.view.isEmpty()) showView(state.view);
    if (withWindow) {
        if (!state.windowGeometry.isEmpty()) restoreGeometry(state.windowGeometry);
        if (!state.windowState.isEmpty()) restoreState(state.windowState);
    }
    return true;
}

bool MainWindow::openSession(const QString& path) {
    try {
        return restoreSession(readSessionFile(path), true);
    } catch (const Error& e) {
        showError(QStringLiteral("Cannot open session"), QString::fromStdString(e.what()));
        return false;
    }
}

bool MainWindow::saveSession(const QString& path, QString* error) {
    if (!session_->isOpen()) {
        if (error) *error = QStringLiteral("no dump open");
        return false;
    }
    try {
        writeSessionFile(path, sessionState());
    } catch (const Error& e) {
        showError(QStringLiteral("Cannot save session"), QString::fromStdString(e.what()));
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
    statusBar()->showMessage(QStringLiteral("wrote %1").arg(path), 5000);
    return true;
}

bool MainWindow::restoreLastSession() {
    const QString path = lastSessionPath();
    if (!QFileInfo(path).isFile()) return false;
    try {
        const SessionState state = readSessionFile(path);
        if (!QFileInfo(state.dump).isFile()) {
            addIssue(
                Issue{IssueKind::Error,
                      QStringLiteral("the last session's dump %1 no longer exists; not restored").arg(state.dump)});
            return false;
        }
        return restoreSession(state, true);
    } catch (const Error& e) {
        addIssue(Issue{IssueKind::Error,
                       QStringLiteral("last session not restored: %1").arg(QString::fromStdString(e.what()))});
        return false;
    }
}

void MainWindow::openSessionDialog() {
    const QString path =
        QFileDialog::getOpenFileName(this, QStringLiteral("Open session"), lastExportFolder(session_->path()),
                                     QStringLiteral("AttnLens sessions (*.json);;All files (*)"));
    if (!path.isEmpty()) openSession(path);
}

void MainWindow::saveSessionDialog() {
    if (!session_->isOpen()) return;
    const QString path = QFileDialog::getSaveFileName(
        this, QStringLiteral("Save session"),
        QDir(lastExportFolder(session_->path())).filePath(selectionFileName(QStringLiteral("session")) + ".json"),
        QStringLiteral("AttnLens sessions (*.json)"));
    if (path.isEmpty()) return;
    rememberExportFolder(path);
    saveSession(path);
}

// "attnlens-example-mala.block0-h0-q7_7-tokenmap": the dump, layer, head and query of the selection
// and what is exported, as a file name (characters a file system may refuse become '_').
QString MainWindow::selectionFileName(const QString& what) const {
    if (!session_->isOpen()) return QStringLiteral("attnlens-") + what;
    const Selection& sel = session_->selection();
    const TokenLayout& l = session_->layout();
    const QString query = l.isSpatial(sel.query) ? QStringLiteral("q%1_%2").arg(l.row(sel.query)).arg(l.col(sel.query))
                                                 : QStringLiteral("q%1").arg(sel.query);
    QString name = QStringLiteral("%1-img%2-%3-h%4-%5-%6")
                       .arg(QFileInfo(session_->path()).completeBaseName())
                       .arg(sel.image)
                       .arg(QString::fromStdString(session_->layerInfo().name))
                       .arg(sel.head)
                       .arg(query, what);
    for (QChar& c : name)
        if (!(c.isLetterOrNumber() || c == '-' || c == '_' || c == '.')) c = '_';
    return name;
}

}  // namespace attnlens::gui
