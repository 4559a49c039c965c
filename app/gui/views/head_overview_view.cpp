#include "views/head_overview_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QMouseEvent>
#include <algorithm>
#include <cmath>
#include <tuple>

#include "attnlens/analysis/registered_statistics.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "plot/color_maps.h"
#include "plot/eliding_combo_box.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui {

const std::vector<HeadStatisticEntry>& headStatistics() {
    // The view's order and the command line's short names; the numbers, their titles and the records'
    // fields are the library's (attnlens::headValues()), but for the locality report's mean distance.
    static const std::vector<HeadStatisticEntry> table = [] {
        const std::tuple<HeadStatistic, std::string_view, std::string_view> names[] = {
            {HeadStatistic::LocalMass3, "local3", "local[k=3].mean"},
            {HeadStatistic::LocalTimesUniform3, "local3-x-uniform", "local[k=3].x_uniform"},
            {HeadStatistic::NormalisedEntropy, "entropy", "entropy.normalised_entropy_admissible"},
            {HeadStatistic::NormalisedEntropyAbs, "entropy-abs", "entropy.normalised_entropy_abs_admissible"},
            {HeadStatistic::MaxWeight, "max-weight", "entropy.max_weight"},
            {HeadStatistic::MaxAbsShare, "max-abs-share", "entropy.max_abs_share"},
            {HeadStatistic::NegativeMass, "negative-mass", "entropy.negative_mass_per_row"},
            {HeadStatistic::NegativeRowFraction, "negative-rows", "entropy.negative_row_fraction"},
            {HeadStatistic::NegativeWeightFraction, "negative-weights", "entropy.negative_weight_fraction"},
            {HeadStatistic::ConfusedPairs, "confused-pairs", "confusion.confused_pairs"},
            {HeadStatistic::Rank, "rank", "rank.rank"},
            {HeadStatistic::RankOverBound, "rank-over-bound", "rank.rank/rank.bound"},
            {HeadStatistic::EffectiveRank, "effective-rank", "rank.effective_rank"},
            {HeadStatistic::MeanDistance, "mean-distance", "locality:mean_distance"},
            {HeadStatistic::TotalVariation, "total-variation", "distance.total_variation.mean"},
            {HeadStatistic::OutputError, "output-error", "distance.output_relative_error"},
        };
        std::vector<HeadStatisticEntry> entries;
        for (const auto& [statistic, key, field] : names) {
            const HeadValue* value = findHeadValue(field);
            entries.push_back({statistic, key, field, value ? value->title : "mean attention distance", value});
        }
        return entries;
    }();
    return table;
}

namespace {

const HeadStatisticEntry* entryOf(HeadStatistic s) {
    for (const HeadStatisticEntry& e : headStatistics())
        if (e.statistic == s) return &e;
    return nullptr;  // Registered: named by its key
}

}  // namespace

QString headStatisticName(HeadStatistic s) {
    const HeadStatisticEntry* e = entryOf(s);
    return e ? QString::fromUtf8(e->title) : QStringLiteral("registered statistic");
}

std::string_view headStatisticKey(HeadStatistic s) {
    const HeadStatisticEntry* e = entryOf(s);
    return e ? e->key : std::string_view("registered");
}

HeadStatistic parseHeadStatistic(std::string_view key) {
    std::string known;
    for (const HeadStatisticEntry& e : headStatistics()) {
        if (key == e.key || key == e.field) return e.statistic;
        known += (known.empty() ? "" : ", ") + std::string(e.key);
    }
    for (const RegisteredStatistic& r : registeredStatistics()) known += ", " + r.key;  // setStatisticByKey
    throwUsage("head statistic " + quotedText(std::string(key)) + " is not one of " + known +
               " (or the report field each reads, e.g. entropy.max_weight)");
}

std::string headStatisticHelp(std::size_t width) {
    std::string text, line;
    auto add = [&](const std::string& item) {
        if (!line.empty() && line.size() + item.size() + 2 > width) {
            text += line + ",\n";
            line.clear();
        }
        line += (line.empty() ? "" : ", ") + item;
    };
    for (const HeadStatisticEntry& e : headStatistics())
        add(std::string(e.key) + (e.statistic == HeadStatistic::LocalMass3 ? " (default)" : ""));
    for (const RegisteredStatistic& r : registeredStatistics()) add(r.key + " (" + r.title + ")");
    return text + line;
}

namespace {

double statisticOf(const HeadStatistics& s, HeadStatistic which, const std::string& registeredKey) {
    if (which == HeadStatistic::Registered) {
        for (const auto& [key, value] : s.registered)
            if (key == registeredKey) return value;
        return std::numeric_limits<double>::quiet_NaN();
    }
    // The mean distance is the locality report's (meanDistanceGrid).
    const HeadStatisticEntry* e = entryOf(which);
    return e && e->value ? e->value->of(s) : std::numeric_limits<double>::quiet_NaN();
}

QString cellWithoutValue(HeadCell c) {
    switch (c) {
        case HeadCell::NoSuchHead:
            return QStringLiteral("none (the layer has fewer heads)");
        case HeadCell::Unreadable:
            return QStringLiteral("none (the layer could not be read; see the note)");
        default:
            return QStringLiteral("NaN or undefined");
    }
}

}  // namespace

std::vector<std::vector<double>> headStatisticGrid(const AnalysisReport& report, HeadStatistic statistic,
                                                   int reportParadigm, const std::string& registeredKey) {
    const std::vector<int>& layers = report.request.layers;
    std::vector<std::vector<double>> sum(layers.size()), count(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const int heads = report.dump.layers[std::size_t(layers[i])].heads;
        sum[i].assign(std::size_t(heads), 0.0);
        count[i].assign(std::size_t(heads), 0.0);
    }
    for (const HeadRecord& r : report.records) {
        if (r.paradigm != reportParadigm) continue;
        const auto it = std::find(layers.begin(), layers.end(), r.layer);
        if (it == layers.end()) continue;
        const double v = statisticOf(r.stats, statistic, registeredKey);
        if (!std::isfinite(v)) continue;
        const std::size_t i = std::size_t(it - layers.begin());
        sum[i][std::size_t(r.head)] += v;
        count[i][std::size_t(r.head)] += 1;
    }
    for (std::size_t i = 0; i < sum.size(); ++i)
        for (std::size_t h = 0; h < sum[i].size(); ++h)
            sum[i][h] = count[i][h] > 0 ? sum[i][h] / count[i][h] : std::numeric_limits<double>::quiet_NaN();
    return sum;
}

std::vector<std::vector<double>> meanDistanceGrid(const LocalityReport& report, int reportParadigm) {
    const std::vector<int>& layers = report.request.layers;
    std::vector<std::vector<double>> grid(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i)
        grid[i].assign(std::size_t(report.dump.layers[std::size_t(layers[i])].heads),
                       std::numeric_limits<double>::quiet_NaN());
    if (report.groups.empty()) return grid;
    for (const LocalityCell& c : report.groups.front().cells) {  // "all" comes first
        if (c.paradigm != reportParadigm) continue;
        const auto it = std::find(layers.begin(), layers.end(), c.layer);
        if (it == layers.end()) continue;
        auto& row = grid[std::size_t(it - layers.begin())];
        if (c.head >= 0 && c.head < int(row.size())) row[std::size_t(c.head)] = c.sums.meanDistance();
    }
    return grid;
}

ReportContent HeadOverviewView::reportContent() const {
    // The report that holds the value: every head's spectrum, or the distance to the reference.
    const HeadStatisticEntry* e = entryOf(stat_);
    const std::string_view statistic = e && e->value ? e->value->statistic : std::string_view();
    if (statistic == "rank") return ReportContent::Rank;
    if (statistic == "distance") return ReportContent::Distance;
    return ReportContent::Statistics;
}

void HeadOverviewView::retry() {
    if (stat_ == HeadStatistic::MeanDistance)
        session_->statistics().retryLocality();
    else
        LayerReportView::retry();
}

HeadOverviewView::HeadOverviewView(Session* session, QWidget* parent) : LayerReportView(session, parent) {
    statistic_ = new ElidingComboBox(this);
    statistic_->setObjectName(QStringLiteral("headStatistic"));
    for (const HeadStatisticEntry& e : headStatistics()) {
        statistic_->addItem(QString::fromUtf8(e.title), int(e.statistic));
        statistic_->setItemData(statistic_->count() - 1,
                                QStringLiteral("render --head-statistic %1; the record's %2")
                                    .arg(QString::fromUtf8(e.key.data(), qsizetype(e.key.size())),
                                         QString::fromUtf8(e.field.data(), qsizetype(e.field.size()))),
                                Qt::ToolTipRole);
    }
    // Registered statistics after the built-in ones, by title; their data is their key.
    for (const RegisteredStatistic& r : registeredStatistics())
        statistic_->addItem(QString::fromStdString(r.title), QString::fromStdString(r.key));  // registered.KEY
    mode_ = new ElidingComboBox(this);
    mode_->setObjectName(QStringLiteral("headMode"));
    mode_->addItems({QStringLiteral("each paradigm"), QStringLiteral("minus the first shown")});
    toolbar()->addSpacing(12);
    toolbar()->addWidget(new QLabel(QStringLiteral("Colour by:"), this));
    toolbar()->addWidget(statistic_);
    toolbar()->addWidget(mode_);
    toolbar()->addStretch(1);
    connect(statistic_, &QComboBox::currentIndexChanged, this, [this](int i) {
        const QVariant data = statistic_->itemData(i);
        if (data.typeId() == QMetaType::QString)
            setStatistic(HeadStatistic::Registered, data.toString().toStdString());
        else
            setStatistic(HeadStatistic(data.toInt()));
    });
    connect(mode_, &QComboBox::currentIndexChanged, this, [this](int i) { setDifference(i == 1); });
    connect(plot_, &QCustomPlot::mousePress, this, &HeadOverviewView::onMousePress);
    connect(plot_, &QCustomPlot::mouseMove, this, &HeadOverviewView::onMouseMove);
    // The marked head follows the selection (the report stays).
    connect(session, &Session::selectionChanged, this, &PlotView::invalidate);
}

void HeadOverviewView::setStatistic(HeadStatistic s, const std::string& registeredKey) {
    if (s == HeadStatistic::Registered && !findRegisteredStatistic(registeredKey))
        throwUsage("head statistic " + quotedText(registeredKey) + " is not a registered statistic");
    stat_ = s;
    registeredKey_ = s == HeadStatistic::Registered ? registeredKey : std::string();
    QSignalBlocker block(statistic_);
    statistic_->setCurrentIndex(s == HeadStatistic::Registered
                                    ? statistic_->findData(QString::fromStdString(registeredKey))
                                    : statistic_->findData(int(s)));
    invalidate();
}

void HeadOverviewView::setStatisticByKey(std::string_view key) {
    if (key.starts_with("registered.")) key.remove_prefix(11);  // the record's field: registered.KEY
    if (findRegisteredStatistic(key)) return setStatistic(HeadStatistic::Registered, std::string(key));
    setStatistic(parseHeadStatistic(key));
}

QString HeadOverviewView::statisticTitle() const {
    if (const RegisteredStatistic* r =
            stat_ == HeadStatistic::Registered ? findRegisteredStatistic(registeredKey_) : nullptr)
        return QString::fromStdString(r->title);
    return headStatisticName(stat_);
}

void HeadOverviewView::setDifference(bool on) {
    difference_ = on;
    QSignalBlocker block(mode_);
    mode_->setCurrentIndex(on ? 1 : 0);
    invalidate();
}

int HeadOverviewView::layerNameRoom(const QStringList& layerNames) const {
    const QFontMetrics names(QFont(plot_->font().family(), 7));
    int width = 0;
    for (const QString& name : layerNames) width = std::max(width, names.horizontalAdvance(name));
    return width + 12;  // ticks and padding
}

std::pair<int, double> HeadOverviewView::panelColumns(int panels, const QStringList& layerNames) const {
    // The arrangement with the largest square cells in this plot: many layers and few heads give
    // tall, narrow panels best put side by side in one row; few layers a grid of panels. A panel's
    // name, head axis and spacing take the room estimated here.
    if (heads_ <= 0 || layerNames.isEmpty()) return {std::max(1, panels), 1.0};
    const double width = plot_->width() - 90.0 - layerNameRoom(layerNames);  // colour bar, layer names
    const double height = plot_->height() - 80.0;                            // title and notes
    int best = std::max(1, panels);
    double bestCell = -INFINITY;
    for (int cols = 1; cols <= panels; ++cols) {
        const int rows = (panels + cols - 1) / cols;
        const double cellW = (width - cols * kPanelSpacing) / double(cols * heads_);
        const double cellH = (height - rows * 48.0) / double(rows * layerNames.size());
        const double cell = std::min(cellW, cellH);
        if (cell > bestCell + 1e-9) {
            bestCell = cell;
            best = cols;
        }
    }
    return {best, std::max(1.0, bestCell)};
}

bool HeadOverviewView::fitAspect() {
    bool changed = LayerReportView::fitAspect();
    // Square cells of one size in every panel: the layer names take room only left of each row's
    // first panel (its column is wider, columnStretch), and every panel's cells are the smallest
    // panel's.
    if (heads_ <= 0 || layers_.empty()) return changed;
    const int rows = int(layers_.size());
    double cell = INFINITY;
    for (Panel& p : panels_)
        if (p.rect) cell = std::min(cell, gridCellSize(p.rect, rows, heads_));
    if (!std::isfinite(cell) || cell < 1) cell = 1;
    for (Panel& p : panels_)
        if (p.rect) changed |= fitGridMargins(p.rect, rows, heads_, nullptr, true, 0, std::floor(cell));
    // Names centred over their grids, but never squeezed below their width by the layer names'
    // margin: then they move off centre rather than lose letters.
    for (Panel& p : panels_)
        if (p.rect && p.name) {
            QMargins m = p.rect->margins();
            const int room = p.name->outerRect().width() - m.left() - m.right();
            const int need = QFontMetrics(p.name->font()).horizontalAdvance(unwrappedText(p.name)) + 8;
            if (room < need) {
                const int give = need - room;
                m.setLeft(std::max(0, m.left() - (give + 1) / 2));
                m.setRight(std::max(0, m.right() - give / 2));
            }
            changed |= alignHorizontally(p.name, m);
        }
    return changed;
}

std::vector<std::vector<double>> HeadOverviewView::GridSource::grid(HeadStatistic stat,
                                                                    const std::string& registeredKey,
                                                                    int reportParadigm) const {
    return locality ? meanDistanceGrid(*locality, reportParadigm)
                    : headStatisticGrid(*report, stat, reportParadigm, registeredKey);
}

std::vector<int> HeadOverviewView::GridSource::unreadableLayers() const {
    std::vector<int> layers;
    for (const SkippedLayer& skip : locality ? locality->skipped : report->skipped) layers.push_back(skip.layer);
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    return layers;
}

std::optional<HeadOverviewView::GridSource> HeadOverviewView::gridSource(const QString& what) {
    GridSource source;
    if (stat_ == HeadStatistic::MeanDistance) {
        source.locality = session_->statistics().locality();
        source.scope = QStringLiteral("all %1 images").arg(session_->info().images);
        if (!source.locality) {
            const QString error = session_->statistics().localityError();
            showState(what, source.scope, error.isEmpty() && session_->isOpen() && !session_->selection().shown.empty(),
                      error, session_->statistics().localityCancelled());
            return std::nullopt;
        }
        clearState();
        layers_ = source.locality->request.layers;
        source.paradigms = &source.locality->paradigms;
        source.dump = &source.locality->dump;
        return source;
    }
    source.report = report(what);
    if (!source.report) return std::nullopt;
    layers_ = source.report->request.layers;
    source.paradigms = &source.report->paradigms;
    source.dump = &source.report->dump;
    source.scope = scopeDescription();
    return source;
}

HeadOverviewView::Panel HeadOverviewView::addPanel(QCPLayoutGrid* body, int index, int cols, const GridSource& source,
                                                   int reportParadigm, const QStringList& layerNames,
                                                   const std::vector<std::vector<double>>* base, double& lo,
                                                   double& hi) {
    const std::string& paradigmName = (*source.paradigms)[std::size_t(reportParadigm)].name;
    Panel p;
    p.paradigm = session_->paradigmIndex(paradigmName);
    p.values = source.grid(stat_, registeredKey_, reportParadigm);
    if (base)
        for (std::size_t a = 0; a < p.values.size(); ++a)
            for (std::size_t h = 0; h < p.values[a].size(); ++h) p.values[a][h] -= (*base)[a][h];
    auto* cell = new QCPLayoutGrid;
    body->addElement(index / cols, index % cols, cell);
    QCPTextElement* name = addWrappedText(plot_, 8, true);
    cell->addElement(0, 0, name);
    setWrappedText(name, QString::fromStdString(paradigmName));
    p.name = name;
    cell->setRowStretchFactor(0, 0.01);
    p.rect = new QCPAxisRect(plot_);
    cell->addElement(1, 0, p.rect);
    setupGridAxes(p.rect, int(layers_.size()), heads_, QStringLiteral("head"), QString());
    // Layer names on the left of the first panel of each row only, whose column is wider by their
    // room.
    QSharedPointer<QCPAxisTickerText> names(new QCPAxisTickerText);
    if (index % cols == 0)
        for (int a = 0; a < int(layerNames.size()); ++a) names->addTick(a, layerNames[a]);
    p.rect->axis(QCPAxis::atLeft)->setTicker(names);
    p.rect->axis(QCPAxis::atLeft)->setTickLabelFont(QFont(plot_->font().family(), 7));
    p.map = new QCPColorMap(p.rect->axis(QCPAxis::atBottom), p.rect->axis(QCPAxis::atLeft));
    p.map->setInterpolate(false);
    p.map->data()->setSize(heads_, int(layers_.size()));
    p.map->data()->setRange(QCPRange(0, std::max(0, heads_ - 1)), QCPRange(0, std::max(0, int(layers_.size()) - 1)));
    const std::vector<int> unreadable = source.unreadableLayers();
    p.cells.assign(p.values.size(), std::vector<HeadCell>(std::size_t(heads_), HeadCell::Value));
    for (std::size_t a = 0; a < p.values.size(); ++a)
        for (int h = 0; h < heads_; ++h) {
            const double v = h < int(p.values[a].size()) ? p.values[a][std::size_t(h)] : qQNaN();
            p.map->data()->setCell(h, int(a), v);
            if (std::isfinite(v)) {
                lo = std::min(lo, v);
                hi = std::max(hi, v);
            } else {
                // A layer with no value for any head after a read failure lost its records, not its values.
                const bool lost =
                    std::binary_search(unreadable.begin(), unreadable.end(), layers_[a]) &&
                    std::none_of(p.values[a].begin(), p.values[a].end(), [](double x) { return std::isfinite(x); });
                p.cells[a][std::size_t(h)] = h >= int(p.values[a].size()) ? HeadCell::NoSuchHead
                                             : lost                       ? HeadCell::Unreadable
                                                                          : HeadCell::Undefined;
            }
        }
    p.marker.create(plot_, p.rect);
    const Selection& sel = session_->selection();
    const auto at = std::find(layers_.begin(), layers_.end(), sel.layer);
    p.marker.setVisible(at != layers_.end());
    if (at != layers_.end()) p.marker.place(sel.head, double(at - layers_.begin()));
    return p;
}

void HeadOverviewView::addColourScale(double lo, double hi, bool difference) {
    auto* scale = new QCPColorScale(plot_);
    scale->setType(QCPAxis::atRight);
    scale->setBarWidth(12);
    scale->axis()->setLabel(difference ? QStringLiteral("difference") : statisticTitle());
    auto* side = new QCPLayoutGrid;
    side_ = side;
    plot_->plotLayout()->addElement(plot_->plotLayout()->rowCount() - 1, 1, side);
    side->addElement(0, 0, scale);
    plot_->plotLayout()->setColumnStretchFactor(1, 0.01);
    const Preferences& prefs = session_->preferences();
    // "x uniform" reads against 1 (what uniform attention over the admissible keys gives): a diverging
    // scale centred there, white = uniform, instead of a sequential one from 0.
    const bool aroundOne = stat_ == HeadStatistic::LocalTimesUniform3 && !difference;
    const bool diverging = difference || lo < 0 || aroundOne;
    ColorRange range = colorRangeFor(std::isfinite(lo) ? lo : 0, std::isfinite(hi) ? hi : 1, diverging);
    if (aroundOne) {
        double m = std::max(std::isfinite(lo) ? std::abs(lo - 1) : 0.0, std::isfinite(hi) ? std::abs(hi - 1) : 0.0);
        if (!(m > 0)) m = 1;
        range.lower = 1 - m;
        range.upper = 1 + m;
        scale->axis()->setLabel(statisticTitle() + QStringLiteral(" (1 = uniform, white)"));
    }
    const QCPColorGradient g = diverging ? divergingGradient(prefs.divergingMap, prefs.nanColor)
                                         : sequentialGradient(prefs.sequentialMap, prefs.nanColor);
    scale->setGradient(g);
    scale->setDataRange(QCPRange(range.lower, range.upper));
    for (Panel& p : panels_) {
        p.map->setColorScale(scale);
        p.map->setGradient(g);
        p.map->setDataRange(QCPRange(range.lower, range.upper));
    }
}

void HeadOverviewView::rebuild() {
    panels_.clear();
    side_ = nullptr;
    layers_.clear();
    heads_ = 0;
    const QString what = QStringLiteral("Heads: %1 per layer and head").arg(statisticTitle());
    const std::optional<GridSource> source = gridSource(what);
    if (!source) return;
    const std::shared_ptr<const AnalysisReport>& r = source->report;
    const std::vector<Paradigm>& paradigms = *source->paradigms;
    for (int l : layers_) heads_ = std::max(heads_, source->dump->layers[std::size_t(l)].heads);
    auto* title = resetWithTitle(plot_, QString());
    // Every paradigm of the report, in its order; with a difference, each but the first minus it.
    const bool diff = difference_ && paradigms.size() >= 2;
    QString statisticName = statisticTitle();
    if (source->locality) statisticName += QStringLiteral(" (grid units)");
    if (r && reportContent() == ReportContent::Distance)
        statisticName +=
            QStringLiteral(" (reference: %1)").arg(QString::fromStdString(r->request.options.distance.reference.name));
    setWrappedText(
        title, QStringLiteral("%1 per layer and head%2 — %3")
                   .arg(statisticName)
                   .arg(diff ? QStringLiteral(", minus %1").arg(QString::fromStdString(paradigms[0].name)) : QString())
                   .arg(source->scope));
    if (r) addReportNotes(*r);
    auto* body = addBody(plot_, plot_->plotLayout()->rowCount());
    const std::vector<std::vector<double>> base = source->grid(stat_, registeredKey_, 0);
    std::vector<int> panelParadigms;
    for (int p = 0; p < int(paradigms.size()); ++p)
        if (!diff || p != 0) panelParadigms.push_back(p);
    const int n = int(panelParadigms.size());
    double lo = INFINITY, hi = -INFINITY;
    QStringList layerNames;
    for (int l : layers_) layerNames << QString::fromStdString(source->dump->layers[std::size_t(l)].name);
    const auto [cols, cellEstimate] = panelColumns(n, layerNames);
    for (int i = 0; i < n; ++i)
        panels_.push_back(addPanel(body, i, cols, *source, panelParadigms[std::size_t(i)], layerNames,
                                   diff ? &base : nullptr, lo, hi));
    if (cols > 1) {
        const double panel = heads_ * cellEstimate + kPanelSpacing;
        body->setColumnStretchFactor(0, (panel + layerNameRoom(layerNames)) / panel);
    }
    addColourScale(lo, hi, diff);
    markCellsWithoutValue();
    fitAspect();
}

void HeadOverviewView::markCellsWithoutValue() {
    int counts[4] = {0, 0, 0, 0};
    for (const Panel& p : panels_)
        for (std::size_t a = 0; a < p.cells.size(); ++a)
            for (std::size_t h = 0; h < p.cells[a].size(); ++h) {
                const HeadCell c = p.cells[a][h];
                ++counts[int(c)];
                if (c != HeadCell::NoSuchHead && c != HeadCell::Unreadable) continue;
                // White under the hatch: the NaN colour of the map must not show through.
                for (const QBrush& brush :
                     {QBrush(Qt::white), c == HeadCell::Unreadable ? QBrush(QColor(90, 90, 90), Qt::BDiagPattern)
                                                                   : QBrush(QColor(236, 236, 236))}) {
                    auto* r = new QCPItemRect(plot_);
                    r->setClipAxisRect(p.rect);
                    r->topLeft->setAxes(p.rect->axis(QCPAxis::atBottom), p.rect->axis(QCPAxis::atLeft));
                    r->bottomRight->setAxes(p.rect->axis(QCPAxis::atBottom), p.rect->axis(QCPAxis::atLeft));
                    r->topLeft->setCoords(double(h) - 0.5, double(a) - 0.5);
                    r->bottomRight->setCoords(double(h) + 0.5, double(a) + 0.5);
                    r->setPen(Qt::NoPen);
                    r->setBrush(brush);
                }
            }
    if (!side_ ||
        !(counts[int(HeadCell::NoSuchHead)] + counts[int(HeadCell::Unreadable)] + counts[int(HeadCell::Undefined)]))
        return;
    auto* legend = new QCPLegend;
    side_->addElement(1, 0, legend);
    side_->setMinimumMargins(QMargins(0, 0, 2, 2));  // the legend's border is drawn just outside it
    side_->setRowStretchFactor(1, 0.001);
    legend->setLayer(QStringLiteral("legend"));
    legend->setFont(QFont(plot_->font().family(), 8));
    legend->setBrush(Qt::white);
    legend->setBorderPen(QPen(QColor(180, 180, 180)));
    legend->setRowSpacing(-2);
    // Swatches: bars without data, only their legend icon is drawn.
    const auto entry = [&](HeadCell kind, const QString& name, const QBrush& brush) {
        if (!counts[int(kind)]) return;
        auto* swatch =
            new QCPBars(panels_.front().rect->axis(QCPAxis::atBottom), panels_.front().rect->axis(QCPAxis::atLeft));
        swatch->removeFromLegend();
        swatch->setName(QStringLiteral("%1 (%2)").arg(name).arg(counts[int(kind)]));
        swatch->setPen(QPen(QColor(150, 150, 150)));
        swatch->setBrush(brush);
        legend->addItem(new QCPPlottableLegendItem(legend, swatch));
    };
    entry(HeadCell::Unreadable, QStringLiteral("unreadable"), QBrush(QColor(90, 90, 90), Qt::BDiagPattern));
    entry(HeadCell::Undefined, QStringLiteral("NaN / undefined"), QBrush(session_->preferences().nanColor));
    entry(HeadCell::NoSuchHead, QStringLiteral("no such head"), QBrush(QColor(236, 236, 236)));
}

bool HeadOverviewView::headAt(const QPointF& pos, const Panel** panel, int* layer, int* head) const {
    for (const Panel& p : panels_) {
        int x = 0, y = 0;
        if (!p.map || !attnlens::gui::cellAt(p.map, pos, &x, &y)) continue;
        *panel = &p;
        *layer = y;
        *head = x;
        return true;
    }
    return false;
}

void HeadOverviewView::onMousePress(QMouseEvent* e) {
    const Panel* p = nullptr;
    int layer = 0, head = 0;
    if (e->button() != Qt::LeftButton || !headAt(e->position(), &p, &layer, &head)) return;
    const int l = layers_[std::size_t(layer)];
    if (head >= session_->info().layers[std::size_t(l)].heads) return;
    session_->setLayer(l);
    session_->setHead(head);
}

void HeadOverviewView::onMouseMove(QMouseEvent* e) {
    const Panel* p = nullptr;
    int layer = 0, head = 0;
    if (!headAt(e->position(), &p, &layer, &head)) {
        Q_EMIT hoverText(QString());
        return;
    }
    const double v =
        head < int(p->values[std::size_t(layer)].size()) ? p->values[std::size_t(layer)][std::size_t(head)] : qQNaN();
    Q_EMIT hoverText(
        QStringLiteral("%1: %2, head %3: %4 = %5")
            .arg(QString::fromStdString(session_->paradigms()[std::size_t(p->paradigm)].name))
            .arg(QString::fromStdString(session_->info().layers[std::size_t(layers_[std::size_t(layer)])].name))
            .arg(head)
            .arg(statisticTitle())
            .arg(std::isfinite(v) ? formatWeight(v)
                                  : cellWithoutValue(p->cells[std::size_t(layer)][std::size_t(head)])));
}

}  // namespace attnlens::gui
