#pragma once
// The AttnLens main window: selection dock, the views in tabs, the issues dock, the status bar with
// progress and Cancel, menus for opening, exporting and preferences.
#include <QMainWindow>
#include <QPointer>
#include <QStringList>
#include <vector>

#include "document/preferences.h"
#include "shell/export_all.h"
#include "shell/figure_export.h"
#include "shell/session_file.h"

class QCheckBox;
class QComboBox;
class QDialog;
class QDoubleSpinBox;
class QLabel;
class QListWidget;
class QProgressBar;
class QSpinBox;
class QFormLayout;
class QTabWidget;
class QToolButton;
class QTreeWidget;
class QMenu;

namespace attnlens::gui {

class Session;
class PlotView;
class TokenMapView;
class CompareView;
class MatrixView;
class DumpPairView;
struct Issue;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    // Opens a dump. On failure shows the core's message (non-modal box and the issues list), keeps
    // the previous dump open and returns false.
    bool openFile(const QString& path);
    // The same on a worker thread (File > Open, recent files, drops): returns at once; openFinished
    // tells how it ended, and a failure leaves the open dump as it was.
    void openFileInBackground(const QString& path);
    // The second dump of "Compare dumps" (DumpPairView); false with the message shown on failure.
    bool openSecondFile(const QString& path);
    Session* secondSession() const { return second_; }
    DumpPairView* dumpPairView() const { return pair_; }
    // The bundled example (see example_dump.h).
    bool openExample();
    bool openHierarchicalExample();  // FLatten-Swin and PVT stages (issue 10)

    // Sessions (session_file.h): restore one (opening its dump unless already open; the window
    // layout too when withWindow), read one from a file, write the current one to a file.
    bool restoreSession(const SessionState& state, bool withWindow);
    bool openSession(const QString& path);
    bool saveSession(const QString& path, QString* error = nullptr);
    SessionState sessionState() const;
    // The session saved on the last exit (lastSessionPath()); false, with an issue when it cannot
    // be used, when there is none.
    bool restoreLastSession();
    static QString lastSessionPath();
    // File name (no extension) for exports of the selection: dump, image, layer, head, query, what.
    QString selectionFileName(const QString& what) const;

    Session* session() const { return session_; }
    // Help > Keyboard shortcuts (F1): a non-modal box "shortcutsBox" listing every shortcut.
    void showShortcuts();
    TokenMapView* tokenMapView() const { return tokenMap_; }
    CompareView* compareView() const { return compare_; }
    MatrixView* matrixView() const { return matrix_; }
    const std::vector<PlotView*>& views() const { return views_; }
    PlotView* view(const QString& id) const;
    PlotView* currentView() const;
    void showView(const QString& id);
    QString lastError() const { return lastError_; }
    // An error the user must see: in the Issues list and a non-modal message box; lastError().
    void showError(const QString& title, const QString& text);
    // An export that failed: the entry names the open dump, so it goes when another is opened.
    void showExportError(const QString& text);

    QTreeWidget* issuesList() const { return issues_; }
    QStringList recentFiles() const;

    // Exports. Figures of the current view are written at once; "all views" and statistics wait for
    // their background analyses, then emit exportFinished with the files written or the error.
    bool exportCurrentFigure(const QString& path, const FigureOptions& options, QString* error = nullptr);
    void exportAllFigures(const QString& basePath, const FigureOptions& options);
    void exportStatistics(const QString& path, bool wholeDump);

Q_SIGNALS:
    void exportFinished(const QStringList& written, const QString& error);
    void openFinished(const QString& path, bool ok);

protected:
    void dragEnterEvent(QDragEnterEvent* e) override;
    void dropEvent(QDropEvent* e) override;
    void closeEvent(QCloseEvent* e) override;

private:
    void createViews();
    void createDocks();
    // The Selection dock's form: image, model, layer, head, query, paradigm, map content and
    // rollout options, local branch, paradigms shown, statistics coverage.
    QWidget* createSelectionForm();
    void addRolloutControls(QFormLayout* form);
    void connectSelectionControls();  // the form's controls to the session
    void createIssuesDock();
    void createMenus();
    void createNavigateMenu();  // the selection's steps, the tabs and Esc, with their keys
    void createStatusBar();
    void syncSelectionWidgets();
    void syncParadigmWidgets();
    void syncBranchWidgets();
    void syncBranchChannels(bool layerHas, int valueChannels);
    void syncBranchStatus(bool dumpHas);
    void syncRolloutWidgets();
    void applyRolloutOptions();            // from the dock's rollout widgets
    void syncStatsCoverage();              // the "Statistics over" box from the session
    void chooseStatsLayers();              // a non-modal list of the dump's layers to check
    void savePreferences(Preferences& p);  // fills in the view state, then writes QSettings
    void updateStatusFile();
    void addIssue(const Issue& issue);
    void showError(const QString& title, const QString& text, const Issue& issue);
    void dropIssuesOfReplacedDumps();
    // The dock's title and the status bar's count follow the list; an empty list hides the dock.
    void syncIssueCount();
    // Opens the Issues dock at about four entries' height and at most a fifth of the window, so
    // that the views keep their room (issue 49 item 6).
    void showIssuesDockSmall();
    void addRecentFile(const QString& path);
    void rebuildRecentMenu();
    void tryFinishExportAll();
    void openDialog();
    void openSecondDialog();
    void fileOpened(const QString& path);  // recent files, title
    void openSessionDialog();
    void saveSessionDialog();
    void stepLayer(int step);  // within the selected layer's model
    void exportFigureDialog();
    void exportStatisticsDialog(bool wholeDump);
    void preferencesDialog();
    void showAbout();

    Session* session_ = nullptr;
    Session* second_ = nullptr;  // "Compare dumps"
    QTabWidget* tabs_ = nullptr;
    QTabWidget* statsTabs_ = nullptr;
    TokenMapView* tokenMap_ = nullptr;
    CompareView* compare_ = nullptr;
    MatrixView* matrix_ = nullptr;
    DumpPairView* pair_ = nullptr;
    std::vector<PlotView*> views_;

    QSpinBox* image_ = nullptr;
    QComboBox* model_ = nullptr;        // the selected layer's model; choosing one jumps to its first layer
    QComboBox* layer_ = nullptr;        // items: "name · attention", data: the layer name
    QLabel* layerAttention_ = nullptr;  // "model used: mala"
    QComboBox* statsModel_ = nullptr;   // the per-layer statistics' layers: a model, every layer or chosen ones
    QSpinBox* head_ = nullptr;
    QSpinBox* query_ = nullptr;
    QLabel* queryName_ = nullptr;
    QLabel* imageLabel_ = nullptr;
    QComboBox* paradigm_ = nullptr;
    QCheckBox* branch_ = nullptr;         // "With local branch"
    QComboBox* branchChannel_ = nullptr;  // mean over channels, channel 0 .. d_v - 1
    QComboBox* mapContent_ = nullptr;     // what the maps show: attention, rollout of the query or of CLS
    QComboBox* rolloutFusion_ = nullptr;
    QComboBox* rolloutWeights_ = nullptr;
    QDoubleSpinBox* rolloutResidual_ = nullptr;
    QDoubleSpinBox* rolloutDiscard_ = nullptr;
    QListWidget* shown_ = nullptr;
    QTreeWidget* issues_ = nullptr;
    QDockWidget* issuesDock_ = nullptr;
    QToolButton* issuesButton_ = nullptr;  // status bar: "N issues", shows or hides the dock

    QLabel* fileLabel_ = nullptr;
    QLabel* shapeLabel_ = nullptr;
    QLabel* hoverLabel_ = nullptr;
    QLabel* branchLabel_ = nullptr;  // whether the views include the local branch, and which channel
    QProgressBar* progress_ = nullptr;
    QToolButton* cancel_ = nullptr;
    QMenu* recentMenu_ = nullptr;

    QPointer<QDialog> statsLayersDialog_;  // while choosing layers for the statistics
    QString lastError_;
    bool syncing_ = false;

    ExportAllFigures exportAll_;
};

}  // namespace attnlens::gui
