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
// Item data of the "Statistics over" box beside model names (which cannot start with \x01).
constexpr const char* kFollowModel = "\x01follow";
constexpr const char* kChosenLayers = "\x01layers";

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

// A paradigm's entry in the paradigm box: the layer's own paradigm is marked.
QString paradigmItemText(const Session& session, int i) {
    const QString name = QString::fromStdString(session.paradigms()[std::size_t(i)].name);
    return session.isOpen() && i == session.layerParadigm() ? name + QStringLiteral("  (this layer's model)") : name;
}

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

QWidget* MainWindow::createSelectionForm() {
    auto* w = new QWidget;
    auto* form = new QFormLayout(w);
    image_ = new QSpinBox;
    image_->setObjectName(QStringLiteral("image"));
    imageLabel_ = new QLabel;
    model_ = new ElidingComboBox;
    model_->setObjectName(QStringLiteral("model"));
    model_->setToolTip(
        QStringLiteral("The model the selected layer belongs to (layer names <model>.<block>); "
                       "PgUp / PgDn stay within it"));
    layer_ = new ElidingComboBox;
    layer_->setObjectName(QStringLiteral("layer"));
    layer_->setToolTip(QStringLiteral("Layer: name and the attention its model used (the `attention` attribute)"));
    layerAttention_ = new QLabel;
    layerAttention_->setObjectName(QStringLiteral("layerAttention"));
    layerAttention_->setWordWrap(true);
    statsModel_ = new ElidingComboBox;
    statsModel_->setObjectName(QStringLiteral("statsModel"));
    statsModel_->setToolTip(
        QStringLiteral("Which layers the per-layer statistics (local mass, confusion, "
                       "entropy) cover: one model's, every layer of the dump, or layers you choose"));
    head_ = new QSpinBox;
    head_->setObjectName(QStringLiteral("head"));
    query_ = new QSpinBox;
    query_->setObjectName(QStringLiteral("query"));
    queryName_ = new QLabel;
    paradigm_ = new ElidingComboBox;
    paradigm_->setObjectName(QStringLiteral("paradigm"));
    shown_ = new QListWidget;
    shown_->setObjectName(QStringLiteral("shownParadigms"));
    form->addRow(QStringLiteral("Image"), image_);
    form->addRow(QString(), imageLabel_);
    form->addRow(QStringLiteral("Model"), model_);
    form->addRow(QStringLiteral("Layer"), layer_);
    form->addRow(QString(), layerAttention_);
    form->addRow(QStringLiteral("Head"), head_);
    form->addRow(QStringLiteral("Query token"), query_);
    form->addRow(QString(), queryName_);
    form->addRow(QStringLiteral("Paradigm"), paradigm_);
    addRolloutControls(form);
    branch_ = new QCheckBox(QStringLiteral("With local branch"));
    branch_->setObjectName(QStringLiteral("localBranch"));
    branchChannel_ = new ElidingComboBox;
    branchChannel_->setObjectName(QStringLiteral("localBranchChannel"));
    branchChannel_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    branchChannel_->setMinimumContentsLength(12);
    form->addRow(branch_);
    form->addRow(QStringLiteral("Branch channel"), branchChannel_);
    form->addRow(new QLabel(QStringLiteral("Paradigms shown (comparison, statistics):")));
    form->addRow(shown_);
    form->addRow(QStringLiteral("Statistics over"), statsModel_);
    return w;
}

void MainWindow::addRolloutControls(QFormLayout* form) {
    mapContent_ = new ElidingComboBox;
    mapContent_->setObjectName(QStringLiteral("mapContent"));
    mapContent_->addItem(QStringLiteral("attention of the head"), QString::fromUtf8(toString(MapContent::Attention)));
    mapContent_->addItem(QStringLiteral("rollout of the query"),
                         QString::fromUtf8(toString(MapContent::RolloutOfQuery)));
    mapContent_->addItem(QStringLiteral("rollout of CLS"), QString::fromUtf8(toString(MapContent::RolloutOfCls)));
    mapContent_->setToolTip(
        QStringLiteral("What the token map and the paradigm comparison show: the selected head's attention row, or "
                       "the attention rollout (Abnar and Zuidema 2020) of the query or of CLS through the layer's "
                       "model up to the selected layer, all heads fused (R)"));
    rolloutFusion_ = new ElidingComboBox;
    rolloutFusion_->setObjectName(QStringLiteral("rolloutFusion"));
    for (HeadFusion f : {HeadFusion::Mean, HeadFusion::Max, HeadFusion::Min})
        rolloutFusion_->addItem(QString::fromUtf8(toString(f)));
    rolloutFusion_->setToolTip(QStringLiteral("How the rollout fuses a layer's heads"));
    rolloutWeights_ = new ElidingComboBox;
    rolloutWeights_->setObjectName(QStringLiteral("rolloutWeights"));
    for (RolloutWeights w : {RolloutWeights::Clipped, RolloutWeights::Signed, RolloutWeights::Absolute})
        rolloutWeights_->addItem(QString::fromUtf8(toString(w)));
    rolloutWeights_->setToolTip(
        QStringLiteral("InLine and MALA rows hold negative weights: clipped = max(A, 0) with rows renormalised "
                       "(default), signed = A as it is, absolute = |A| renormalised"));
    // Sized by a few characters, not by their longest item, so that the dock stays as narrow as
    // without them (the window must fit 1024 px with the comparison's panels).
    for (auto [box, chars] :
         {std::pair{mapContent_, 14}, std::pair{rolloutFusion_, 4}, std::pair{rolloutWeights_, 6}}) {
        box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
        box->setMinimumContentsLength(chars);
    }
    rolloutResidual_ = new QDoubleSpinBox;
    rolloutResidual_->setObjectName(QStringLiteral("rolloutResidual"));
    rolloutResidual_->setRange(0, 1);
    rolloutResidual_->setSingleStep(0.05);
    rolloutResidual_->setDecimals(2);
    rolloutResidual_->setPrefix(QStringLiteral("w "));
    rolloutResidual_->setToolTip(QStringLiteral("Residual w: each layer's R = (1 - w) F + w I, rows renormalised"));
    rolloutDiscard_ = new QDoubleSpinBox;
    rolloutDiscard_->setObjectName(QStringLiteral("rolloutDiscard"));
    rolloutDiscard_->setRange(0, 0.99);
    rolloutDiscard_->setSingleStep(0.05);
    rolloutDiscard_->setDecimals(2);
    rolloutDiscard_->setPrefix(QStringLiteral("discard "));
    rolloutDiscard_->setToolTip(
        QStringLiteral("Discard ratio: this fraction of each fused layer matrix's lowest entries set to 0 (forms the "
                       "N x N matrix)"));
    auto* rolloutRow1 = new QHBoxLayout;
    rolloutRow1->setContentsMargins(0, 0, 0, 0);
    rolloutRow1->addWidget(rolloutFusion_);
    rolloutRow1->addWidget(rolloutWeights_);
    auto* rolloutRow2 = new QHBoxLayout;
    rolloutRow2->setContentsMargins(0, 0, 0, 0);
    rolloutRow2->addWidget(rolloutResidual_);
    rolloutRow2->addWidget(rolloutDiscard_);
    form->addRow(QStringLiteral("Maps show"), mapContent_);
    form->addRow(QStringLiteral("Rollout"), rolloutRow1);
    form->addRow(QString(), rolloutRow2);
}

void MainWindow::connectSelectionControls() {
    connect(image_, &QSpinBox::valueChanged, this, [this](int v) {
        if (!syncing_) session_->setImage(v);
    });
    connect(layer_, &QComboBox::currentIndexChanged, this, [this](int v) {
        if (!syncing_ && v >= 0) session_->setLayer(v);
    });
    connect(model_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (syncing_ || i < 0) return;
        const std::vector<int> layers = session_->modelLayers(model_->itemData(i).toString().toStdString());
        if (!layers.empty()) session_->setLayer(layers.front());
    });
    connect(statsModel_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (syncing_ || i < 0) return;
        const QString data = statsModel_->itemData(i).toString();
        if (data == QLatin1String(kChosenLayers)) {
            chooseStatsLayers();
            return;
        }
        try {
            if (data == QLatin1String(kFollowModel))
                session_->statistics().setModelFollowsLayer(true);
            else
                session_->statistics().setModel(data.toStdString());
        } catch (const Error& e) {
            addIssue(Issue{IssueKind::Error, QString::fromStdString(e.what())});
        }
    });
    // Choosing "N chosen layers (change…)" again reopens the list (the index does not change).
    connect(statsModel_, &QComboBox::activated, this, [this](int i) {
        if (statsModel_->itemData(i).toString() == QLatin1String(kChosenLayers)) chooseStatsLayers();
    });
    connect(head_, &QSpinBox::valueChanged, this, [this](int v) {
        if (!syncing_) session_->setHead(v);
    });
    connect(query_, &QSpinBox::valueChanged, this, [this](int v) {
        if (!syncing_) session_->setQuery(v);
    });
    connect(paradigm_, &QComboBox::currentIndexChanged, this, [this](int v) {
        if (!syncing_ && v >= 0) session_->setParadigm(v);
    });
    connect(mapContent_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (syncing_ || i < 0) return;
        session_->setMapContent(parseMapContent(mapContent_->itemData(i).toString().toStdString()));
    });
    for (QComboBox* box : {rolloutFusion_, rolloutWeights_})
        connect(box, &QComboBox::currentIndexChanged, this, [this]() { applyRolloutOptions(); });
    for (QDoubleSpinBox* box : {rolloutResidual_, rolloutDiscard_})
        connect(box, &QDoubleSpinBox::valueChanged, this, [this]() { applyRolloutOptions(); });
    connect(branch_, &QCheckBox::toggled, this, [this](bool on) {
        if (!syncing_) session_->setLocalBranch(on);
    });
    connect(branchChannel_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (!syncing_ && i >= 0) session_->setLocalChannel(branchChannel_->itemData(i).toInt());
    });
    connect(shown_, &QListWidget::itemChanged, this, [this]() {
        if (syncing_) return;
        std::vector<int> shown;
        for (int i = 0; i < shown_->count(); ++i)
            if (shown_->item(i)->checkState() == Qt::Checked) shown.push_back(i);
        session_->setShown(shown);
    });
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
        session_->setMapContent(session_->rolloutShown() ? MapContent::Attention : MapContent::RolloutOfQuery);
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

    QMenu* view = menuBar()->addMenu(QStringLiteral("&View"));
    view->addAction(findChild<QDockWidget*>(QStringLiteral("selectionDock"))->toggleViewAction());
    view->addAction(issuesDock_->toggleViewAction());

    QMenu* help = menuBar()->addMenu(QStringLiteral("&Help"));
    help->addAction(QStringLiteral("&Keyboard shortcuts"), this, &MainWindow::showShortcuts)
        ->setShortcut(QKeySequence::HelpContents);
    help->addAction(QStringLiteral("&About AttnLens"), this, &MainWindow::showAbout);
}

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
        QStringLiteral("open"), QStringLiteral("opening %1").arg(QFileInfo(path).fileName()),
        [path](const JobContext&) { return Session::openReader(path); },
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
        QStringLiteral("open second"), QStringLiteral("opening %1").arg(QFileInfo(path).fileName()),
        [path](const JobContext&) { return Session::openReader(path); },
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

// ---- selection widgets ----------------------------------------------------------------------------

void MainWindow::syncParadigmWidgets() {
    syncing_ = true;
    const auto& ps = session_->paradigms();
    paradigm_->clear();
    shown_->clear();
    for (std::size_t i = 0; i < ps.size(); ++i) {
        const QString name = QString::fromStdString(ps[i].name);
        const QString tip = QString::fromStdString(ps[i].toJson().dump(1));
        paradigm_->addItem(paradigmItemText(*session_, int(i)));
        paradigm_->setItemData(int(i), tip, Qt::ToolTipRole);
        auto* item = new QListWidgetItem(name, shown_);
        item->setToolTip(tip);
        // The paradigm's plot colour as a swatch: coloured text is unreadable for the light
        // colours of the palette on a light background.
        QPixmap swatch(12, 12);
        swatch.fill(paradigmColor(int(i)));
        {
            QPainter frame(&swatch);
            frame.setPen(QColor(60, 60, 60));
            frame.drawRect(0, 0, 11, 11);
        }
        item->setIcon(QIcon(swatch));
        item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
        const auto& s = session_->selection().shown;
        item->setCheckState(std::find(s.begin(), s.end(), int(i)) != s.end() ? Qt::Checked : Qt::Unchecked);
    }
    paradigm_->setCurrentIndex(session_->selection().paradigm);
    syncing_ = false;
}

void MainWindow::syncStatsCoverage() {
    const bool was = syncing_;
    syncing_ = true;
    const int chosen = statsModel_->findData(QLatin1String(kChosenLayers));
    const auto& layers = session_->statistics().layers();
    if (chosen >= 0)
        statsModel_->setItemText(
            chosen, layers.empty() ? QStringLiteral("chosen layers…")
                                   : QStringLiteral("%1 (change…)").arg(session_->statistics().coverageText()));
    statsModel_->setCurrentIndex(
        !layers.empty() ? chosen
        : session_->statistics().modelFollowsLayer()
            ? 0
            : std::max(1, statsModel_->findData(QString::fromStdString(session_->statistics().model()))));
    statsModel_->setEnabled(session_->isOpen() && session_->info().layers.size() > 1);
    if (!layers.empty()) {
        QStringList names;
        for (int l : layers) names << QString::fromStdString(session_->info().layers[std::size_t(l)].name);
        statsModel_->setToolTip(
            QStringLiteral("Statistics over the chosen layers: %1").arg(names.join(QStringLiteral(", "))));
    } else {
        statsModel_->setToolTip(
            QStringLiteral("Which layers the per-layer statistics (local mass, confusion, "
                           "entropy) cover: one model's, every layer of the dump, or layers you choose"));
    }
    syncing_ = was;
}

void MainWindow::chooseStatsLayers() {
    // Non-modal, so the views stay readable while choosing; the box shows the state until OK.
    syncStatsCoverage();
    if (!session_->isOpen()) return;
    if (statsLayersDialog_) {
        statsLayersDialog_->raise();
        statsLayersDialog_->activateWindow();
        return;
    }
    auto* dialog = new QDialog(this);
    statsLayersDialog_ = dialog;
    dialog->setObjectName(QStringLiteral("statsLayersDialog"));
    dialog->setWindowTitle(QStringLiteral("Statistics over chosen layers"));
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    auto* layout = new QVBoxLayout(dialog);
    layout->addWidget(new QLabel(QStringLiteral("Layers the per-layer statistics cover (in dump order):")));
    auto* list = new QListWidget;
    list->setObjectName(QStringLiteral("statsLayers"));
    const std::vector<int> covered = session_->statistics().coveredLayers();
    const DumpInfo& info = session_->info();
    for (std::size_t i = 0; i < info.layers.size(); ++i) {
        const LayerInfo& l = info.layers[i];
        auto* item = new QListWidgetItem(
            l.attention.empty()
                ? QString::fromStdString(l.name)
                : QStringLiteral("%1 · %2").arg(QString::fromStdString(l.name), QString::fromStdString(l.attention)),
            list);
        item->setData(Qt::UserRole, int(i));
        item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
        item->setCheckState(std::find(covered.begin(), covered.end(), int(i)) != covered.end() ? Qt::Checked
                                                                                               : Qt::Unchecked);
    }
    layout->addWidget(list, 1);
    auto* row = new QHBoxLayout;
    auto* all = new QPushButton(QStringLiteral("All"));
    auto* none = new QPushButton(QStringLiteral("None"));
    row->addWidget(all);
    row->addWidget(none);
    row->addStretch(1);
    layout->addLayout(row);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    layout->addWidget(buttons);
    auto checkAll = [list](Qt::CheckState state) {
        for (int i = 0; i < list->count(); ++i) list->item(i)->setCheckState(state);
    };
    connect(all, &QPushButton::clicked, dialog, [checkAll]() { checkAll(Qt::Checked); });
    connect(none, &QPushButton::clicked, dialog, [checkAll]() { checkAll(Qt::Unchecked); });
    QPushButton* ok = buttons->button(QDialogButtonBox::Ok);
    auto updateOk = [list, ok]() {
        int checked = 0;
        for (int i = 0; i < list->count(); ++i) checked += list->item(i)->checkState() == Qt::Checked;
        ok->setEnabled(checked > 0);
        ok->setToolTip(checked > 0 ? QString() : QStringLiteral("choose at least one layer"));
    };
    connect(list, &QListWidget::itemChanged, dialog, updateOk);
    updateOk();
    connect(buttons, &QDialogButtonBox::rejected, dialog, &QDialog::reject);
    connect(buttons, &QDialogButtonBox::accepted, dialog, [this, dialog, list]() {
        std::vector<int> layers;
        for (int i = 0; i < list->count(); ++i)
            if (list->item(i)->checkState() == Qt::Checked) layers.push_back(list->item(i)->data(Qt::UserRole).toInt());
        try {
            session_->statistics().setLayers(layers);
        } catch (const Error& e) {
            addIssue(Issue{IssueKind::Error, QString::fromStdString(e.what())});
        }
        syncStatsCoverage();
        dialog->accept();
    });
    // A dump opened meanwhile makes the positions meaningless.
    connect(session_, &Session::dumpChanged, dialog, &QDialog::reject);
    dialog->resize(360, 420);
    dialog->open();
}

void MainWindow::syncSelectionWidgets() {
    syncing_ = true;
    const bool open = session_->isOpen();
    for (QWidget* w : std::initializer_list<QWidget*>{image_, layer_, head_, query_, model_, statsModel_})
        w->setEnabled(open);
    if (open) {
        const DumpInfo& info = session_->info();
        const Selection& sel = session_->selection();
        image_->setRange(0, std::max(0, info.images - 1));
        image_->setValue(sel.image);
        if (layer_->count() != int(info.layers.size()) ||
            (layer_->count() > 0 && layer_->itemData(0).toString() != QString::fromStdString(info.layers[0].name))) {
            layer_->clear();
            // Hierarchical dumps (grids differ between layers): each layer's grid and layout beside
            // its name, so that the stages read from the list.
            const bool hierarchical = std::any_of(info.layers.begin(), info.layers.end(), [&](const LayerInfo& l) {
                return !(l.layout == info.layers.front().layout) || l.reducedKeys() || l.window;
            });
            // A stage: consecutive layers of one model on one grid (a new grid starts the next).
            int stage = 0;
            const LayerInfo* previous = nullptr;
            for (const LayerInfo& l : info.layers) {
                const QString name = QString::fromStdString(l.name);
                if (!previous || modelOfLayer(previous->name) != modelOfLayer(l.name))
                    stage = 1;
                else if (!(previous->layout == l.layout))
                    ++stage;
                previous = &l;
                // The attention the model used beside the name, so the box says which is which.
                QString text = l.attention.empty()
                                   ? name
                                   : QStringLiteral("%1 · %2").arg(name, QString::fromStdString(l.attention));
                if (hierarchical) text = QStringLiteral("S%1 · %2 · %3").arg(stage).arg(text, layerLayoutLabel(l));
                layer_->addItem(text, name);
            }
            model_->clear();
            statsModel_->clear();
            statsModel_->addItem(QStringLiteral("the selected layer's model"), QLatin1String(kFollowModel));
            statsModel_->addItem(QStringLiteral("every layer (all models)"), QString());
            for (const LayerModel& m : layerModels(info)) {
                const QString name = QString::fromStdString(m.name);
                const QString text = QStringLiteral("%1 (%2 layers)")
                                         .arg(name.isEmpty() ? QStringLiteral("(unnamed)") : name)
                                         .arg(m.layers.size());
                model_->addItem(text, name);
                if (!m.name.empty()) statsModel_->addItem(QStringLiteral("model %1").arg(text), name);
            }
            statsModel_->addItem(QStringLiteral("chosen layers…"), QLatin1String(kChosenLayers));
        }
        layer_->setCurrentIndex(sel.layer);
        model_->setCurrentIndex(std::max(0, model_->findData(QString::fromStdString(session_->layerModel()))));
        model_->setEnabled(model_->count() > 1);
        syncStatsCoverage();
        const LayerInfo& li = session_->layerInfo();
        layerAttention_->setText(
            li.attention.empty()
                ? QStringLiteral("the dump does not say which attention this layer's model used")
                : QStringLiteral("model used: <b>%1</b>%2")
                      .arg(QString::fromStdString(li.attention).toHtmlEscaped(),
                           session_->layerParadigm() < 0 ? QStringLiteral(" (no paradigm of that name)") : QString()));
        for (int i = 0; i < paradigm_->count(); ++i) paradigm_->setItemText(i, paradigmItemText(*session_, i));
        head_->setRange(0, std::max(0, session_->layerInfo().heads - 1));
        head_->setValue(sel.head);
        query_->setRange(0, int(session_->layout().tokens() - 1));
        query_->setValue(int(sel.query));
        queryName_->setText(tokenName(session_->layout(), sel.query));
        paradigm_->setCurrentIndex(sel.paradigm);
        imageLabel_->setText(session_->imageLabel(sel.image));
    }
    syncing_ = false;
    syncBranchWidgets();
    syncRolloutWidgets();
}

void MainWindow::syncRolloutWidgets() {
    const bool was = syncing_;
    syncing_ = true;
    const bool open = session_->isOpen();
    const Selection& sel = session_->selection();
    mapContent_->setEnabled(open);
    mapContent_->setCurrentIndex(std::max(0, mapContent_->findData(QString::fromUtf8(toString(sel.map)))));
    const RolloutOptions& o = session_->rollout().options();
    rolloutFusion_->setCurrentText(QString::fromUtf8(toString(o.fusion)));
    rolloutWeights_->setCurrentText(QString::fromUtf8(toString(o.weights)));
    rolloutResidual_->setValue(o.residual);
    rolloutDiscard_->setValue(o.discardRatio);
    for (QWidget* w :
         std::initializer_list<QWidget*>{rolloutFusion_, rolloutWeights_, rolloutResidual_, rolloutDiscard_})
        w->setEnabled(open && session_->rolloutShown());
    syncing_ = was;
}

void MainWindow::applyRolloutOptions() {
    if (syncing_) return;
    RolloutOptions o;
    o.fusion = parseHeadFusion(rolloutFusion_->currentText().toStdString());
    o.weights = parseRolloutWeights(rolloutWeights_->currentText().toStdString());
    o.residual = rolloutResidual_->value();
    o.discardRatio = rolloutDiscard_->value();
    session_->rollout().setOptions(o);  // the widgets' ranges are the options' ranges
}

void MainWindow::syncBranchWidgets() {
    syncing_ = true;
    const bool open = session_->isOpen();
    const bool dumpHas = open && session_->branch().inDump();
    const bool layerHas = open && session_->branch().inLayer();
    const Selection& sel = session_->selection();
    const LayerInfo& layer = session_->layerInfo();
    const int dv = layerHas ? layer.valueDim : 0;
    // Unchecked while the layer has none (the views show plain A), but the wish is kept: back on a
    // layer with a branch, the branch is shown again.
    branch_->setChecked(layerHas && sel.localBranch);
    branch_->setEnabled(layerHas);
    branchChannel_->setEnabled(layerHas);
    if (!open || !dumpHas) {
        branch_->setToolTip(open ? QStringLiteral("this dump has no local branch (no layer has a local_branch group)")
                                 : QStringLiteral("no dump open"));
    } else if (!layerHas) {
        branch_->setToolTip(QStringLiteral("this layer has no local branch"));
    } else {
        // The text stays short (the dock's width); kind and shape are in the tooltip and the titles.
        const LocalBranchInfo& b = *layer.localBranch;
        branch_->setToolTip(QStringLiteral("Show E_c = A + M_c instead of A: the depthwise %1×%2 convolution of V "
                                           "(%3, %4 weight channels, %5%6) as a matrix added to the attention, "
                                           "in the token map, the comparison, the matrix and the spectrum (B)")
                                .arg(b.kernelH)
                                .arg(b.kernelW)
                                .arg(QString::fromStdString(b.kind))
                                .arg(b.channels)
                                .arg(b.perImage ? QStringLiteral("per image") : QStringLiteral("shared by all images"))
                                .arg(b.hasBias ? QStringLiteral(", bias not part of E_c") : QString()));
    }
    // Items: the mean, then every V channel of the selected head.
    const bool rebuild = branchChannel_->count() != dv + 1 || (dv == 0 && branchChannel_->count() == 0);
    if (rebuild) {
        branchChannel_->clear();
        branchChannel_->addItem(QStringLiteral("mean over channels"), -1);
        for (int c = 0; c < dv; ++c) branchChannel_->addItem(QStringLiteral("channel %1").arg(c), c);
    }
    if (layerHas) {
        const LocalBranchInfo& b = *layer.localBranch;
        branchChannel_->setItemData(0,
                                    QStringLiteral("A + M_mean: the mean kernel over the head's %1 V channels "
                                                   "(the mean of their E_c)")
                                        .arg(dv),
                                    Qt::ToolTipRole);
        for (int c = 0; c < dv; ++c)
            branchChannel_->setItemData(c + 1,
                                        QStringLiteral("V channel %1 of head %2: weight channel %3 (%4)")
                                            .arg(c)
                                            .arg(sel.head)
                                            .arg(b.weightChannel(sel.head, c, dv))
                                            .arg(QString::fromUtf8(toString(b.channelMap))),
                                        Qt::ToolTipRole);
        branchChannel_->setToolTip(
            QStringLiteral("Which channel's equivalent matrix E_c = A + M_c the views show "
                           "(Shift+B: next)"));
    } else {
        branchChannel_->setToolTip(branch_->toolTip());
    }
    const int idx = branchChannel_->findData(sel.localChannel);
    branchChannel_->setCurrentIndex(idx >= 0 ? idx : 0);

    // Status bar: always says whether the views include the branch, and which channel.
    const QString status = session_->branch().status();
    branchLabel_->setText(status.isEmpty() ? QString() : QStringLiteral("· %1").arg(status));
    branchLabel_->setVisible(!status.isEmpty());
    const QString error = session_->branch().error();
    branchLabel_->setStyleSheet(error.isEmpty() ? QString() : QStringLiteral("color: #b40000"));
    if (!error.isEmpty()) {
        branchLabel_->setToolTip(error);
    } else if (dumpHas) {
        int withBranch = 0;
        QStringList kinds;
        for (const LayerInfo& l : session_->info().layers)
            if (l.localBranch) {
                ++withBranch;
                const QString k = QString::fromStdString(l.localBranch->kind);
                if (!kinds.contains(k)) kinds << k;
            }
        branchLabel_->setToolTip(
            QStringLiteral("local branch (%1) in %2 of %3 layers; B: on / off, Shift+B: next channel")
                .arg(kinds.join(QStringLiteral(", ")))
                .arg(withBranch)
                .arg(session_->info().layers.size()));
    }
    syncing_ = false;
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

// Next or previous layer within the selected layer's model; at the model's first or last layer the
// selection stays and the status bar says so.
void MainWindow::stepLayer(int step) {
    if (!session_->isOpen()) return;
    const std::string model = session_->layerModel();
    const std::vector<int> layers = session_->modelLayers(model);
    const auto it = std::find(layers.begin(), layers.end(), session_->selection().layer);
    if (it == layers.end()) return;
    const auto pos = (it - layers.begin()) + step;
    if (pos < 0 || pos >= std::ptrdiff_t(layers.size())) {
        statusBar()->showMessage(QStringLiteral("%1 layer of %2 (Ctrl+PgUp / Ctrl+PgDn cross models)")
                                     .arg(step > 0 ? QStringLiteral("last") : QStringLiteral("first"),
                                          model.empty() ? QStringLiteral("the dump")
                                                        : QStringLiteral("model ") + QString::fromStdString(model)),
                                 4000);
        return;
    }
    session_->setLayer(layers[std::size_t(pos)]);
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
