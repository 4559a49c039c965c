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

struct ShortcutDoc {
    const char* keys;
    const char* what;
};
const ShortcutDoc kShortcuts[] = {
    {"Ctrl+O", "open a dump (also: drag a .h5 file onto the window)"},
    {"Ctrl+E", "export figure(s) to PNG / SVG / PDF"},
    {"Ctrl+S / Ctrl+Shift+O", "save / open a session (dump, selection, view, colour range, window)"},
    {"Ctrl+J", "export statistics of the current selection to JSON"},
    {"Ctrl+,", "preferences"},
    {"PgDown / PgUp", "next / previous layer of the same model (the Model box picks the model)"},
    {"Ctrl+PgDown / Ctrl+PgUp", "next / previous layer across models"},
    {"] / [", "next / previous head"},
    {". / ,", "next / previous image"},
    {"P / Shift+P", "next / previous paradigm (token map, matrix)"},
    {"B", "local branch on / off: the views show E_c = A + M_c (layers that have one)"},
    {"Shift+B", "next local-branch channel (mean over channels, channel 0, 1, ...)"},
    {"Arrow keys", "move the query token on the grid (when a view has focus)"},
    {"Home", "select the first prefix token (CLS) as the query"},
    {"R", "maps show the rollout of the query / the head's attention"},
    {"Ctrl+1 … Ctrl+5", "token map, comparison, matrix, statistics, two dumps side by side"},
    {"Esc", "cancel running analyses"},
    {"Click", "token map / comparison: make the clicked token the query"},
    {"Ctrl+click", "matrix: make the clicked row the query"},
    {"Wheel / drag", "matrix: zoom / pan (double-click resets)"},
};

// A page that scrolls when its content needs more room than the window gives it: a view's minimum
// size (a long toolbar, a wide grid of panels) never makes the window grow itself past the screen.
QScrollArea* scrollingPage(QWidget* content, const QString& name) {
    auto* page = new QScrollArea;
    page->setObjectName(name);
    page->setWidgetResizable(true);
    page->setFrameShape(QFrame::NoFrame);
    page->setWidget(content);
    return page;
}

// `wanted`, no larger than the available part of the screen the window is on (less a margin for
// the window frame).
QSize fittedToScreen(const QWidget* window, QSize wanted) {
    const QScreen* screen = window->screen() ? window->screen() : QGuiApplication::primaryScreen();
    if (!screen) return wanted;
    const QSize room = screen->availableGeometry().size() - QSize(16, 40);
    return wanted.boundedTo(room.expandedTo(QSize(320, 240)));
}

// Sees Esc before an open popup (a combo box's list, a menu) closes on it. On X11 the popup closes first and
// the window's Esc shortcut then fires as well; the shortcut asks closedPopup() and leaves the analyses alone.
class PopupEscapeWatch : public QObject {
public:
    explicit PopupEscapeWatch(QObject* parent) : QObject(parent) { qApp->installEventFilter(this); }
    bool closedPopup() const { return closedPopup_; }

protected:
    bool eventFilter(QObject* watched, QEvent* e) override {
        if ((e->type() == QEvent::KeyPress || e->type() == QEvent::ShortcutOverride) &&
            static_cast<QKeyEvent*>(e)->key() == Qt::Key_Escape && QApplication::activePopupWidget() && !closedPopup_) {
            closedPopup_ = true;
            QTimer::singleShot(0, this, [this]() { closedPopup_ = false; });  // this key press only
        }
        return QObject::eventFilter(watched, e);
    }

private:
    bool closedPopup_ = false;
};

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
    setWindowTitle(QStringLiteral("AttnLens"));
    setWindowIcon(QIcon(QStringLiteral(":/icons/attnlens.svg")));
    setAcceptDrops(true);
    QSettings settings;
    QStringList problems;
    session_ = new Session(Preferences::load(settings, &problems), this);
    // The dump of "Compare dumps": driven by that view, with the same preferences.
    second_ = new Session(session_->preferences(), this);
    createViews();
    createDocks();
    createStatusBar();
    createMenus();
    connect(session_, &Session::issueFound, this, &MainWindow::addIssue);
    for (const QString& p : problems) addIssue(Issue{IssueKind::Preferences, p});
    connect(session_, &Session::dumpChanged, this, [this]() {
        dropIssuesOfReplacedDumps();
        syncSelectionWidgets();
        updateStatusFile();
    });
    connect(session_, &Session::selectionChanged, this, &MainWindow::syncSelectionWidgets);
    // The shape is the selected layer's: stages of hierarchical models differ.
    connect(session_, &Session::selectionChanged, this, &MainWindow::updateStatusFile);
    connect(session_, &Session::queryChanged, this, &MainWindow::syncSelectionWidgets);
    // The value under the cursor belongs to one query of one dump: any change of either clears it
    // (the next mouse move shows the new value), so it never describes a row no longer shown.
    for (auto signal :
         {&Session::dumpChanged, &Session::selectionChanged, &Session::queryChanged, &Session::paradigmsChanged})
        connect(session_, signal, this, [this]() { hoverLabel_->clear(); });
    // Nor a value of a view no longer shown.
    for (QTabWidget* t : {tabs_, statsTabs_})
        connect(t, &QTabWidget::currentChanged, this, [this]() { hoverLabel_->clear(); });
    connect(session_, &Session::paradigmsChanged, this, &MainWindow::syncParadigmWidgets);
    connect(session_, &Session::layerReportChanged, this, &MainWindow::syncStatsCoverage);
    syncParadigmWidgets();
    syncSelectionWidgets();
    updateStatusFile();
    resize(fittedToScreen(this, QSize(1400, 900)));
    restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
    restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
    // A geometry saved on a larger screen starts no larger than this one.
    resize(fittedToScreen(this, size()));
    // An Issues dock left open at the last exit comes back only with something to say.
    if (issues_->topLevelItemCount() == 0) issuesDock_->hide();
    tokenMap_->setImageOpacity(session_->preferences().imageOpacityPercent);
}

MainWindow::~MainWindow() {
    // The sessions are children: QWidget's destructor deletes them after this object has stopped
    // being a MainWindow, and their destructors stop their jobs, whose busyChanged would then reach
    // the status bar's lambdas of a half-destroyed window (UBSan saw it when a window with a sweep
    // running was replaced). Cut every connection from them to this window while it is whole.
    for (Session* s : {session_, second_})
        if (s) {
            s->jobs().disconnect(this);
            s->disconnect(this);
        }
}

void MainWindow::createViews() {
    tabs_ = new QTabWidget(this);
    tabs_->setObjectName(QStringLiteral("views"));
    statsTabs_ = new QTabWidget;
    statsTabs_->setObjectName(QStringLiteral("statistics"));
    for (const ViewEntry& entry : viewRegistry()) {
        PlotView* v = entry.make(session_, second_).release();  // owned by its tab widget
        // Toolbar boxes show their longest item where there is room and give it up (elided, the
        // list still whole) before the view needs to scroll.
        for (QComboBox* box : v->findChildren<QComboBox*>())
            box->setMinimumWidth(std::min(box->minimumSizeHint().width(), 90));
        QScrollArea* page = scrollingPage(v, v->viewId() + QStringLiteral("Page"));
        if (entry.place == ViewPlace::StatisticsTab) {
            // A tab label reads '&' as a mnemonic marker ("Entropy & negative mass").
            statsTabs_->addTab(page, QString(v->viewTitle()).replace(QLatin1Char('&'), QStringLiteral("&&")));
        } else {
            if (entry.needsSecondDump && tabs_->indexOf(statsTabs_) < 0)
                tabs_->addTab(statsTabs_, QStringLiteral("Statistics"));
            tabs_->addTab(page, v->viewTitle());
        }
        views_.push_back(v);
    }
    if (tabs_->indexOf(statsTabs_) < 0) tabs_->addTab(statsTabs_, QStringLiteral("Statistics"));
    tokenMap_ = qobject_cast<TokenMapView*>(view(QStringLiteral("tokenmap")));
    compare_ = qobject_cast<CompareView*>(view(QStringLiteral("compare")));
    matrix_ = qobject_cast<MatrixView*>(view(QStringLiteral("matrix")));
    pair_ = qobject_cast<DumpPairView*>(view(QStringLiteral("dumps")));
    for (PlotView* v : views_)
        connect(v, &PlotView::hoverText, this, [this](const QString& t) { hoverLabel_->setText(t); });
    // The views keep a readable height whatever the docks want (at 1024 x 700 the Issues dock once
    // squeezed the compare panels to 40 px): docks give way instead.
    tabs_->setMinimumHeight(420);
    setCentralWidget(tabs_);

    // Arrow keys move the query while focus is anywhere in the views (not in the selection dock,
    // where they belong to the spin boxes).
    auto arrow = [this](QKeySequence key, int dy, int dx) {
        auto* s = new QShortcut(key, tabs_);
        s->setContext(Qt::WidgetWithChildrenShortcut);
        connect(s, &QShortcut::activated, this, [this, dy, dx]() { session_->moveQuery(dy, dx); });
    };
    arrow(QKeySequence(Qt::Key_Left), 0, -1);
    arrow(QKeySequence(Qt::Key_Right), 0, 1);
    arrow(QKeySequence(Qt::Key_Up), -1, 0);
    arrow(QKeySequence(Qt::Key_Down), 1, 0);
}

void MainWindow::createDocks() {
    auto* dock = new QDockWidget(QStringLiteral("Selection"), this);
    dock->setObjectName(QStringLiteral("selectionDock"));
    QWidget* w = createSelectionForm();
    // Scrolls on a short screen rather than making the window taller than it.
    auto* dockPage = scrollingPage(w, QStringLiteral("selectionPage"));
    dockPage->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    dockPage->setMinimumWidth(w->minimumSizeHint().width() + dockPage->verticalScrollBar()->sizeHint().width());
    dock->setWidget(dockPage);
    addDockWidget(Qt::LeftDockWidgetArea, dock);
    connectSelectionControls();
    createIssuesDock();
}

void MainWindow::createIssuesDock() {
    issuesDock_ = new QDockWidget(QStringLiteral("Issues"), this);
    issuesDock_->setObjectName(QStringLiteral("issuesDock"));
    issues_ = new QTreeWidget;
    issues_->setObjectName(QStringLiteral("issues"));
    issues_->setHeaderLabels({QStringLiteral("Kind"), QStringLiteral("File"), QStringLiteral("Description")});
    issues_->setRootIsDecorated(false);
    issues_->header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
    issuesDock_->setWidget(issues_);
    addDockWidget(Qt::BottomDockWidgetArea, issuesDock_);
    issuesDock_->hide();
}

void MainWindow::syncIssueCount() {
    const int count = issues_->topLevelItemCount();
    issuesDock_->setWindowTitle(QStringLiteral("Issues (%1)").arg(count));
    if (!issuesButton_) return;
    issuesButton_->setText(count == 1 ? QStringLiteral("\u26A0 1 issue")
                                      : QStringLiteral("\u26A0 %1 issues").arg(count));
    issuesButton_->setVisible(count > 0);
    if (count == 0) issuesDock_->hide();
}

void MainWindow::showIssuesDockSmall() {
    issuesDock_->show();
    const int row = std::max(issues_->sizeHintForRow(0), fontMetrics().height() + 4);
    const int titleBar = issuesDock_->style()->pixelMetric(QStyle::PM_TitleBarHeight, nullptr, issuesDock_);
    const int fourEntries = titleBar + issues_->header()->sizeHint().height() + 4 * row + 2 * issues_->frameWidth();
    resizeDocks({issuesDock_}, {std::max(60, std::min(fourEntries, height() / 5))}, Qt::Vertical);
}

void MainWindow::createStatusBar() {
    fileLabel_ = new ElidedLabel;
    fileLabel_->setObjectName(QStringLiteral("file"));
    shapeLabel_ = new ElidedLabel;
    shapeLabel_->setObjectName(QStringLiteral("shape"));
    hoverLabel_ = new QLabel;
    hoverLabel_->setObjectName(QStringLiteral("hover"));
    hoverLabel_->setMinimumWidth(200);
    hoverLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    branchLabel_ = new ElidedLabel;
    branchLabel_->setObjectName(QStringLiteral("branchStatus"));
    progress_ = new QProgressBar;
    progress_->setObjectName(QStringLiteral("progress"));
    progress_->setMinimumWidth(220);
    progress_->setMaximumWidth(360);
    progress_->setTextVisible(true);
    progress_->hide();
    cancel_ = new QToolButton;
    cancel_->setObjectName(QStringLiteral("cancel"));
    cancel_->setText(QStringLiteral("Cancel"));
    cancel_->hide();
    // The value under the cursor comes first and keeps its width; file, shape and branch give
    // theirs up (elided, whole in their tooltips) when the window is narrow.
    statusBar()->addWidget(hoverLabel_, 0);
    statusBar()->addWidget(fileLabel_, 1);
    statusBar()->addWidget(shapeLabel_, 2);
    statusBar()->addWidget(branchLabel_, 1);
    issuesButton_ = new QToolButton;
    issuesButton_->setObjectName(QStringLiteral("issuesButton"));
    issuesButton_->setAutoRaise(true);
    issuesButton_->setToolTip(QStringLiteral("Show or hide the Issues list"));
    issuesButton_->hide();
    connect(issuesButton_, &QToolButton::clicked, this, [this]() {
        if (issuesDock_->isHidden())
            showIssuesDockSmall();
        else
            issuesDock_->hide();
    });
    statusBar()->addPermanentWidget(issuesButton_);
    statusBar()->addPermanentWidget(progress_);
    statusBar()->addPermanentWidget(cancel_);
    JobRunner& jobs = session_->jobs();
    connect(&jobs, &JobRunner::busyChanged, this, [this](bool busy) {
        progress_->setVisible(busy);
        cancel_->setVisible(busy);
    });
    connect(&jobs, &JobRunner::progressChanged, this,
            [this](const QString& label, long long done, long long total, const QString& what) {
                if (total > 0) {
                    progress_->setRange(0, 1000);
                    progress_->setValue(int(1000 * done / total));
                } else {
                    progress_->setRange(0, 0);  // busy indicator until the first report
                }
                // The percentage first and the label elided to what is left of the bar, so that the
                // centred text is never cut at its start (the whole label is in the tooltip).
                const QString percent = total > 0 ? QStringLiteral("%p% · ") : QString();
                const QFontMetrics fm(progress_->font());
                const int room =
                    progress_->width() - 16 - (total > 0 ? fm.horizontalAdvance(QStringLiteral("100% · ")) : 0);
                progress_->setFormat(percent + fm.elidedText(label, Qt::ElideRight, std::max(room, 20)));
                progress_->setToolTip(what.isEmpty() ? label : label + QStringLiteral(": ") + what);
            });
    connect(&jobs, &JobRunner::jobFinished, this, [this]() {
        if (exportAll_.active()) tryFinishExportAll();
    });
    connect(cancel_, &QToolButton::clicked, this, [this]() {
        const bool exporting = exportAll_.cancel();
        session_->jobs().cancelAll();
        if (exporting) Q_EMIT exportFinished({}, QStringLiteral("export cancelled"));
        statusBar()->showMessage(QStringLiteral("cancelled"), 3000);
    });
}

void MainWindow::createMenus() {
    QMenu* file = menuBar()->addMenu(QStringLiteral("&File"));
    QAction* open = file->addAction(QStringLiteral("&Open…"), this, &MainWindow::openDialog);
    open->setShortcut(QKeySequence::Open);
    recentMenu_ = file->addMenu(QStringLiteral("Open &Recent"));
    connect(recentMenu_, &QMenu::aboutToShow, this, &MainWindow::rebuildRecentMenu);
    file->addAction(QStringLiteral("Open the bundled &example"), this, &MainWindow::openExample);
    file->addAction(QStringLiteral("Open the bundled &hierarchical example (Swin + PVT stages)"), this,
                    &MainWindow::openHierarchicalExample);
    file->addAction(QStringLiteral("Open second dump for &comparison…"), this, &MainWindow::openSecondDialog);
    file->addSeparator();
    file->addAction(QStringLiteral("Open &session…"), this, &MainWindow::openSessionDialog)
        ->setShortcut(QKeySequence(QStringLiteral("Ctrl+Shift+O")));
    file->addAction(QStringLiteral("&Save session…"), this, &MainWindow::saveSessionDialog)
        ->setShortcut(QKeySequence::Save);
    file->addSeparator();
    QAction* fig = file->addAction(QStringLiteral("&Export figure…"), this, &MainWindow::exportFigureDialog);
    fig->setShortcut(QKeySequence(QStringLiteral("Ctrl+E")));
    QAction* jsonSel = file->addAction(QStringLiteral("Export statistics of the &selection to JSON…"), this,
                                       [this]() { exportStatisticsDialog(false); });
    jsonSel->setShortcut(QKeySequence(QStringLiteral("Ctrl+J")));
    file->addAction(QStringLiteral("Export statistics of the &whole dump to JSON…"), this,
                    [this]() { exportStatisticsDialog(true); });
    file->addSeparator();
    QAction* prefs = file->addAction(QStringLiteral("&Preferences…"), this, &MainWindow::preferencesDialog);
    prefs->setShortcut(QKeySequence(QStringLiteral("Ctrl+,")));
    file->addSeparator();
    QAction* quit = file->addAction(QStringLiteral("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    createNavigateMenu();

    QMenu* view = menuBar()->addMenu(QStringLiteral("&View"));
    view->addAction(findChild<QDockWidget*>(QStringLiteral("selectionDock"))->toggleViewAction());
    view->addAction(issuesDock_->toggleViewAction());

    QMenu* help = menuBar()->addMenu(QStringLiteral("&Help"));
    help->addAction(QStringLiteral("&Keyboard shortcuts"), this, &MainWindow::showShortcuts)
        ->setShortcut(QKeySequence::HelpContents);
    help->addAction(QStringLiteral("&About AttnLens"), this, &MainWindow::showAbout);
}

void MainWindow::createNavigateMenu() {
    QMenu* nav = menuBar()->addMenu(QStringLiteral("&Navigate"));
    auto add = [&](const QString& text, const QKeySequence& key, auto fn) {
        QAction* a = nav->addAction(text, this, fn);
        a->setShortcut(key);
        return a;
    };
    add(QStringLiteral("Next layer of the model"), QKeySequence(Qt::Key_PageDown), [this]() { stepLayer(1); });
    add(QStringLiteral("Previous layer of the model"), QKeySequence(Qt::Key_PageUp), [this]() { stepLayer(-1); });
    add(QStringLiteral("Next layer (any model)"), QKeySequence(Qt::CTRL | Qt::Key_PageDown),
        [this]() { session_->setLayer(session_->selection().layer + 1); });
    add(QStringLiteral("Previous layer (any model)"), QKeySequence(Qt::CTRL | Qt::Key_PageUp),
        [this]() { session_->setLayer(session_->selection().layer - 1); });
    add(QStringLiteral("Next head"), QKeySequence(Qt::Key_BracketRight),
        [this]() { session_->setHead(session_->selection().head + 1); });
    add(QStringLiteral("Previous head"), QKeySequence(Qt::Key_BracketLeft),
        [this]() { session_->setHead(session_->selection().head - 1); });
    add(QStringLiteral("Next image"), QKeySequence(Qt::Key_Period),
        [this]() { session_->setImage(session_->selection().image + 1); });
    add(QStringLiteral("Previous image"), QKeySequence(Qt::Key_Comma),
        [this]() { session_->setImage(session_->selection().image - 1); });
    add(QStringLiteral("Next paradigm"), QKeySequence(Qt::Key_P),
        [this]() { session_->setParadigm((session_->selection().paradigm + 1) % int(session_->paradigms().size())); });
    add(QStringLiteral("Previous paradigm"), QKeySequence(Qt::SHIFT | Qt::Key_P), [this]() {
        const int n = int(session_->paradigms().size());
        session_->setParadigm((session_->selection().paradigm + n - 1) % n);
    });
    add(QStringLiteral("Local branch on / off"), QKeySequence(Qt::Key_B), [this]() {
        if (session_->branch().inLayer()) session_->setLocalBranch(!session_->selection().localBranch);
    });
    add(QStringLiteral("Next local-branch channel"), QKeySequence(Qt::SHIFT | Qt::Key_B), [this]() {
        const int dv = session_->layerInfo().valueDim;
        if (!session_->branch().inLayer() || dv <= 0) return;
        const int c = session_->selection().localChannel;  // -1 (mean), 0, ..., dv - 1, then -1
        session_->setLocalChannel(c + 1 >= dv ? -1 : c + 1);
    });
    add(QStringLiteral("Rollout of the query on / off"), QKeySequence(Qt::Key_R), [this]() {
        session_->setMapContent(session_->selection().rolloutShown() ? MapContent::Attention
                                                                     : MapContent::RolloutOfQuery);
    });
    add(QStringLiteral("Query: first prefix token (CLS)"), QKeySequence(Qt::Key_Home), [this]() {
        if (session_->layout().prefix > 0) session_->setQuery(0);
    });
    nav->addSeparator();
    const char* tabNames[] = {"Token map", "Compare paradigms", "Matrix", "Statistics", "Compare dumps"};
    for (int i = 0; i < 5; ++i)
        add(QString::fromUtf8(tabNames[i]), QKeySequence(Qt::CTRL | (Qt::Key_1 + i)),
            [this, i]() { tabs_->setCurrentIndex(i); });
    // Esc that closes a popup means "close the popup", never "cancel the analyses" as well.
    auto* popupEscape = new PopupEscapeWatch(this);
    add(QStringLiteral("Cancel running analyses"), QKeySequence(Qt::Key_Escape), [this, popupEscape]() {
        if (QWidget* popup = QApplication::activePopupWidget()) {
            popup->close();
            return;
        }
        if (!popupEscape->closedPopup()) cancel_->click();
    });
}

void MainWindow::updateStatusFile() {
    if (!session_->isOpen()) {
        fileLabel_->setText(QStringLiteral("no dump open"));
        shapeLabel_->clear();
        return;
    }
    const DumpInfo& info = session_->info();
    fileLabel_->setText(QFileInfo(session_->path()).fileName());
    fileLabel_->setToolTip(session_->path());
    const LayerInfo& l = session_->layerInfo();
    // Long model descriptions (the example's names five models) would widen the window past
    // 1024 px: the status bar shows the start, the tooltip all of it.
    QString elidedModel = QString::fromStdString(info.model);
    if (elidedModel.size() > 32) elidedModel = elidedModel.left(31) + QChar(0x2026);
    shapeLabel_->setText(QStringLiteral("B=%1 · N=%2 (%3 + %4x%5)%6 · d=%7 · %8 layers × %9 heads%10")
                             .arg(info.images)
                             .arg(l.tokens)
                             .arg(l.layout.prefix)
                             .arg(l.layout.gridH)
                             .arg(l.layout.gridW)
                             .arg(l.reducedKeys() ? QStringLiteral(" → n=%1 keys (%2x%3)")
                                                        .arg(l.keyTokens())
                                                        .arg(l.keyLayout.gridH)
                                                        .arg(l.keyLayout.gridW)
                                                  : QString())
                             .arg(l.dim)
                             .arg(info.layers.size())
                             .arg(l.heads)
                             .arg(info.model.empty() ? QString() : QStringLiteral(" · ") + elidedModel));
    shapeLabel_->setToolTip(QString::fromStdString(info.model));
    // Dumps with a local branch somewhere have the branch label beside this one instead.
    if (!session_->branch().inDump()) shapeLabel_->setText(shapeLabel_->text() + QStringLiteral(" · no local branch"));
}

void MainWindow::addIssue(const Issue& issue) {
    auto* item =
        new QTreeWidgetItem(issues_, {issueKindText(issue.kind), QFileInfo(issue.file).fileName(), issue.text});
    item->setToolTip(1, issue.file);
    item->setToolTip(2, issue.text);
    item->setData(0, Qt::UserRole, issue.file);
    item->setData(1, Qt::UserRole, issue.dumpEpoch);
    syncIssueCount();
    if (issuesDock_->isHidden()) showIssuesDockSmall();
}

void MainWindow::dropIssuesOfReplacedDumps() {
    // Entries about a dump that is no longer open would read as if about the one that is.
    for (int i = issues_->topLevelItemCount() - 1; i >= 0; --i) {
        const QTreeWidgetItem* item = issues_->topLevelItem(i);
        if (item->data(0, Qt::UserRole).toString().isEmpty()) continue;
        if (item->data(1, Qt::UserRole).toULongLong() == session_->dumpEpoch()) continue;
        delete issues_->takeTopLevelItem(i);
    }
    syncIssueCount();
}
// ---- views ----------------------------------------------------------------------------------------

PlotView* MainWindow::view(const QString& id) const {
    for (PlotView* v : views_)
        if (v->viewId() == id) return v;
    return nullptr;
}

PlotView* MainWindow::currentView() const {
    QWidget* w = tabs_->currentWidget();
    if (w == statsTabs_) w = statsTabs_->currentWidget();
    const auto* page = qobject_cast<QScrollArea*>(w);
    return page ? qobject_cast<PlotView*>(page->widget()) : nullptr;
}

void MainWindow::showView(const QString& id) {
    PlotView* v = view(id);
    if (!v) return;
    QWidget* page = v->parentWidget() ? v->parentWidget()->parentWidget() : nullptr;  // viewport, scroll area
    if (tabs_->indexOf(page) >= 0) {
        tabs_->setCurrentWidget(page);
    } else {
        tabs_->setCurrentWidget(statsTabs_);
        statsTabs_->setCurrentWidget(page);
    }
}

void MainWindow::showShortcuts() {
    QString html = QStringLiteral("<table cellspacing='6'>");
    QStringList documented;
    for (const auto& s : kShortcuts) {
        html += QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>")
                    .arg(QString::fromUtf8(s.keys).toHtmlEscaped(), QString::fromUtf8(s.what).toHtmlEscaped());
        for (const QString& k : QString::fromUtf8(s.keys).split(QStringLiteral(" / "))) {
            // "Ctrl+1 … Ctrl+5" documents each key of the range: it is not listed again below.
            const QStringList range = k.split(QStringLiteral(" … "));
            if (range.size() == 2 && range[0].size() == range[1].size() && range[0].chopped(1) == range[1].chopped(1)) {
                for (QChar c = range[0].back(); c <= range[1].back(); c = QChar(c.unicode() + 1))
                    documented << range[0].chopped(1) + c;
            } else {
                documented << k.trimmed();
            }
        }
    }
    // Every action with a shortcut is listed, also one added without a line above: the list is
    // never shorter than what the keys do.
    for (const QAction* a : findChildren<QAction*>()) {
        const QString key = a->shortcut().toString(QKeySequence::NativeText);
        if (key.isEmpty() || documented.contains(key)) continue;
        documented << key;
        html += QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>")
                    .arg(key.toHtmlEscaped(), a->text().remove('&').toHtmlEscaped());
    }
    html += QStringLiteral("</table>");
    // (For the tests: every key the list names, once each.)
    QStringList listed = documented;
    listed.removeDuplicates();
    // A dialog that scrolls: the list is taller than a 700 px screen (a message box grew to 786 px,
    // its OK button off screen).
    auto* box = new QDialog(this);
    box->setObjectName(QStringLiteral("shortcutsBox"));
    box->setProperty("listedKeys", listed);
    box->setProperty("keyRows", documented.size());
    box->setWindowTitle(QStringLiteral("Keyboard shortcuts"));
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->setModal(false);
    auto* text = new QTextBrowser(box);
    text->setObjectName(QStringLiteral("shortcutsText"));
    text->setHtml(html);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok, box);
    connect(buttons, &QDialogButtonBox::accepted, box, &QDialog::accept);
    auto* layout = new QVBoxLayout(box);
    layout->addWidget(text);
    layout->addWidget(buttons);
    const QRect screen = this->screen() ? this->screen()->availableGeometry() : QRect(0, 0, 1024, 700);
    const int height =
        std::min({int(text->document()->size().height()) + 120, screen.height() - 60, std::max(this->height(), 300)});
    box->resize(std::min(640, screen.width() - 40), height);
    box->show();
}

void MainWindow::showAbout() {
    QMessageBox::about(
        this, QStringLiteral("About AttnLens"),
        QStringLiteral("<b>AttnLens %1</b><br>Attention of vision transformers under softmax and linear "
                       "paradigms: token maps, comparisons, spectra, locality, injectivity and magnitude "
                       "statistics (FLatten, InLine, MALA).<br>Plots: QCustomPlot %2, Qt %3.")
            .arg(QStringLiteral(ATTNLENS_VERSION), QStringLiteral(QCUSTOMPLOT_VERSION_STR),
                 QString::fromLatin1(qVersion())));
}

}  // namespace attnlens::gui
