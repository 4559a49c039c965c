#pragma once
// Statistics > Heads: a layers x heads grid per shown paradigm, coloured by one per-head statistic
// of the per-layer report (session.statistics().report(): the selected image or the mean over all images),
// or each paradigm's difference from the first shown. Hover shows the value; a click selects that
// layer and head in every view. Layers are those "Statistics over" covers.
#include <memory>
#include <optional>
#include <vector>

#include "views/layer_report_views.h"

namespace attnlens::gui {

// Rank and EffectiveRank come from a report of every head's spectrum (ReportContent::Rank),
// TotalVariation and OutputError from a report of the distance to the reference paradigm
// (ReportContent::Distance), MeanDistance from the locality report (Session::localityReport:
// always over all images).
enum class HeadStatistic {
    LocalMass3,
    LocalTimesUniform3,    // 3 x 3 mass over its uniform baseline on the admissible keys ("x uniform")
    NormalisedEntropy,     // of max(A, 0) renormalised, over log |S_i|
    NormalisedEntropyAbs,  // of |A| renormalised, over log |S_i|: signed rows as sharp as they are
    MaxWeight,             // max_j A_ij
    MaxAbsShare,           // max_j |A_ij| / sum_j |A_ij|
    NegativeMass,
    NegativeRowFraction,
    NegativeWeightFraction,  // share of the admissible weights below 0
    ConfusedPairs,
    Rank,
    RankOverBound,  // the numerical rank over the bound the paradigm's algebra allows (1: at the bound)
    EffectiveRank,
    MeanDistance,
    TotalVariation,
    OutputError,
    Registered  // a registered statistic (registered_statistics.h), named by its key beside it
};
// The built-in statistics the Heads view colours by, once: the view's list, render --head-statistic,
// its help and its messages read this table. `field` is the analyze record's field it reads
// (docs/DEFINITIONS.md), so that the view, render and the JSON speak of the same number; render
// takes it as well as the short key (--head-statistic entropy.max_weight = max-weight).
struct HeadStatisticEntry {
    HeadStatistic statistic;
    std::string_view key;    // render --head-statistic
    std::string_view field;  // the record's field ("locality:" for the locality report's)
    const char* title;       // UTF-8: the view's list and the colour bar
    // The library's number (attnlens::headValues(): its value of a head, its statistic, its
    // title); nullptr for the locality report's mean distance.
    const HeadValue* value;
};
const std::vector<HeadStatisticEntry>& headStatistics();  // in the view's order, without Registered
QString headStatisticName(HeadStatistic s);
std::string_view headStatisticKey(HeadStatistic s);
// By key or field; Error(Usage) naming the keys (registered statistics: setStatisticByKey).
HeadStatistic parseHeadStatistic(std::string_view key);
// The keys, registered ones after ("KEY (title)"), as a comma-separated list wrapped at `width`
// characters (help).
std::string headStatisticHelp(std::size_t width);

// One paradigm's statistic per (layer, head): values[i][h] for report.request.layers[i], the mean
// over the report's images (NaN where the head has no record or the statistic is undefined).
// registeredKey: the registered statistic's key when statistic is Registered.
std::vector<std::vector<double>> headStatisticGrid(const AnalysisReport& report, HeadStatistic statistic,
                                                   int reportParadigm, const std::string& registeredKey = {});
// The "all" group's mean attention distance per (layer, head) of one paradigm of a locality report,
// values[i][h] for report.request.layers[i] (NaN where no query counted).
std::vector<std::vector<double>> meanDistanceGrid(const LocalityReport& report, int reportParadigm);

// Why a cell of the grid has, or has no, colour of the bar. Only Undefined is drawn in the NaN colour: a
// head the layer does not have is blank, and a layer whose every (image, layer) of the scope could not be
// read is hatched grey; the legend beside the colour bar counts each kind present.
enum class HeadCell { Value, NoSuchHead, Unreadable, Undefined };

class HeadOverviewView : public LayerReportView {
    Q_OBJECT
public:
    HeadOverviewView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("heads"); }
    QString viewTitle() const override { return QStringLiteral("Heads"); }
    bool ownsHover() const override { return true; }
    bool fitAspect() override;
    // Panels per row for `panels` panels in the current plot size and the side of their cells
    // (estimate, pixels).
    std::pair<int, double> panelColumns(int panels, const QStringList& layerNames) const;

    // registeredKey: which registered statistic, when s is Registered.
    void setStatistic(HeadStatistic s, const std::string& registeredKey = {});
    // By the command-line name (parseHeadStatistic) or a registered statistic's key; Error(Usage)
    // naming every choice.
    void setStatisticByKey(std::string_view key);
    // The colour's name: headStatisticName, or the registered statistic's title.
    QString statisticTitle() const;
    // Panels show each paradigm (false) or its difference from the first shown paradigm (true).
    void setDifference(bool on);

    struct Panel {
        int paradigm = -1;  // session paradigm
        QCPAxisRect* rect = nullptr;
        QCPTextElement* name = nullptr;  // centred over the map, not over the layer names
        QCPColorMap* map = nullptr;
        std::vector<std::vector<double>> values;   // [layer position][head], as drawn
        std::vector<std::vector<HeadCell>> cells;  // [layer position][head < widest layer's heads]
        CellMarker marker;
    };
    const std::vector<Panel>& panels() const { return panels_; }
    const std::vector<int>& layers() const { return layers_; }

protected:
    void rebuild() override;
    ReportContent reportContent() const override;
    void retry() override;

private:
    void onMousePress(QMouseEvent* e);
    void onMouseMove(QMouseEvent* e);
    // The panel and (layer position, head) under a pixel; false when none.
    bool headAt(const QPointF& pos, const Panel** panel, int* layer, int* head) const;
    // The width the layer names take left of a row's first panel.
    int layerNameRoom(const QStringList& layerNames) const;
    // Where the grid's values come from: the per-layer report (its scope) or the locality report
    // (all images, for the mean distance).
    struct GridSource {
        std::shared_ptr<const AnalysisReport> report;
        std::shared_ptr<const LocalityReport> locality;
        const std::vector<Paradigm>* paradigms = nullptr;
        const DumpInfo* dump = nullptr;
        QString scope;
        std::vector<std::vector<double>> grid(HeadStatistic stat, const std::string& registeredKey,
                                              int reportParadigm) const;
        // Layers (positions in DumpInfo::layers) of which some (image, layer) could not be read.
        std::vector<int> unreadableLayers() const;
    };
    // nullopt (the view showing why) while the source is not there.
    std::optional<GridSource> gridSource(const QString& what);
    // The panel of report paradigm `reportParadigm` at `index` of `body` (cols per row); values
    // less `base` when given. Widens [lo, hi] by its finite values.
    Panel addPanel(QCPLayoutGrid* body, int index, int cols, const GridSource& source, int reportParadigm,
                   const QStringList& layerNames, const std::vector<std::vector<double>>* base, double& lo, double& hi);
    // One colour range for every panel, so that panels compare; differences on a diverging scale.
    void addColourScale(double lo, double hi, bool difference);
    // Blank and hatched cells over the maps, and their legend under the colour bar.
    void markCellsWithoutValue();
    static constexpr double kPanelSpacing = 16;  // between panels, and a panel's own margins

    QComboBox* statistic_ = nullptr;
    QComboBox* mode_ = nullptr;
    HeadStatistic stat_ = HeadStatistic::LocalMass3;
    std::string registeredKey_;  // stat_ == Registered
    bool difference_ = false;
    std::vector<Panel> panels_;
    std::vector<int> layers_;  // report.request.layers
    int heads_ = 0;
    QCPLayoutGrid* side_ = nullptr;  // beside the panels: the colour bar, then the cells' legend
};

}  // namespace attnlens::gui
