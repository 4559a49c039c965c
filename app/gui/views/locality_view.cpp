#include "views/locality_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <cmath>

#include "attnlens/analysis/locality.h"
#include "document/session.h"
#include "plot/color_maps.h"
#include "plot/eliding_combo_box.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui {

LocalityView::LocalityView(Session* session, QWidget* parent) : PlotView(session, parent) {
    group_ = new ElidingComboBox(this);
    group_->setObjectName(QStringLiteral("localityGroup"));
    group_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    group_->setMinimumContentsLength(14);
    paradigm_ = new ElidingComboBox(this);
    paradigm_->setObjectName(QStringLiteral("localityParadigm"));
    paradigm_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    paradigm_->setMinimumContentsLength(8);
    radiusBox_ = new QSpinBox(this);
    radiusBox_->setObjectName(QStringLiteral("localityRadius"));
    radiusBox_->setRange(1, 64);
    radiusBox_->setValue(radius_);
    radiusBox_->setToolTip(QStringLiteral("Offsets shown: |dy|, |dx| <= radius (grid cells)"));
    retry_ = new QPushButton(QStringLiteral("Retry"), this);
    retry_->setObjectName(QStringLiteral("retryLocality"));
    retry_->setVisible(false);
    toolbar()->addWidget(new QLabel(QStringLiteral("Images:"), this));
    toolbar()->addWidget(group_);
    toolbar()->addWidget(new QLabel(QStringLiteral("Map of:"), this));
    toolbar()->addWidget(paradigm_);
    toolbar()->addWidget(new QLabel(QStringLiteral("Radius:"), this));
    toolbar()->addWidget(radiusBox_);
    toolbar()->addWidget(retry_);
    toolbar()->addStretch(1);
    connect(group_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (!syncing_ && i >= 0) setGroup(i);
    });
    connect(paradigm_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (!syncing_ && i >= 0) setMapParadigm(paradigm_->itemData(i).toInt());
    });
    connect(radiusBox_, &QSpinBox::valueChanged, this, [this](int r) {
        if (!syncing_) setRadius(r);
    });
    connect(retry_, &QPushButton::clicked, this, [this]() { session_->statistics().retryLocality(); });
    for (auto signal :
         {&Session::dumpChanged, &Session::selectionChanged, &Session::paradigmsChanged, &Session::layerReportChanged})
        connect(session, signal, this, &PlotView::invalidate);
}

void LocalityView::setGroup(int group) {
    groupIndex_ = std::max(0, group);
    invalidate();
}

void LocalityView::setMapParadigm(int paradigm) {
    mapParadigm_ = paradigm;
    invalidate();
}

void LocalityView::setRadius(int radius) {
    radius_ = std::clamp(radius, 1, 64);
    invalidate();
}

void LocalityView::syncControls(const LocalityReport* report) {
    syncing_ = true;
    group_->clear();
    if (report)
        for (const LocalityGroup& g : report->groups)
            group_->addItem(QStringLiteral("%1 (%2)").arg(QString::fromStdString(g.name)).arg(g.images));
    if (report && groupIndex_ >= int(report->groups.size())) groupIndex_ = 0;
    group_->setCurrentIndex(report ? groupIndex_ : -1);
    paradigm_->clear();
    for (int p : session_->selection().shown)
        paradigm_->addItem(QString::fromStdString(session_->paradigms()[std::size_t(p)].name), p);
    const auto& shown = session_->selection().shown;
    if (std::find(shown.begin(), shown.end(), mapParadigm_) == shown.end())
        mapParadigm_ = shown.empty() ? -1 : shown.front();
    paradigm_->setCurrentIndex(std::max(0, paradigm_->findData(mapParadigm_)));
    radiusBox_->setValue(radius_);
    syncing_ = false;
}

bool LocalityView::fitAspect() {
    bool changed = layerAxis_ && fitCategoryLabels(layerAxis_, layerNames_);
    if (!mapRect_ || !map_ || !shown_) return changed;
    const int side = 2 * std::min({radius_, shown_->gridH - 1, shown_->gridW - 1}) + 1;
    changed |= fitGridMargins(mapRect_, side, side, scale_);
    changed |= alignVertically(scale_, mapRect_->margins());
    return changed;
}

void LocalityView::rebuild() {
    mapRect_ = nullptr;
    layerAxis_ = nullptr;
    map_ = nullptr;
    scale_ = nullptr;
    shown_ = nullptr;
    const QString what = QStringLiteral("Locality (mean attention distance, offset map)");
    if (!session_->isOpen() || session_->selection().shown.empty()) {
        resetWithTitle(plot_, session_->isOpen() ? what + QStringLiteral(" — no paradigm shown") : QString());
        syncControls(nullptr);
        waiting_ = false;
        return;
    }
    const auto report = session_->statistics().locality();
    syncControls(report.get());
    const QString error = report ? QString() : session_->statistics().localityError();
    const bool cancelled = !error.isEmpty() && session_->statistics().localityCancelled();
    waiting_ = !report && error.isEmpty();
    retry_->setVisible(!error.isEmpty());
    if (!report) {
        statusText_ = cancelled          ? QStringLiteral("Cancelled")
                      : !error.isEmpty() ? QStringLiteral("FAILED: ") + error
                                         : QStringLiteral("computing over all %1 images, %2… (progress below)")
                                               .arg(session_->info().images)
                                               .arg(session_->statistics().coverageText());
        resetWithTitle(plot_, what);
        auto* state = addWrappedText(plot_, 11);
        state->setTextColor(!error.isEmpty() && !cancelled ? QColor(180, 0, 0) : QColor(Qt::black));
        plot_->plotLayout()->addElement(1, 0, state);
        setWrappedText(state, statusText_ + (error.isEmpty() ? QString() : QStringLiteral(" — Retry runs it again.")));
        return;
    }
    statusText_.clear();
    const LocalityGroup& g = report->groups[std::size_t(groupIndex_)];

    auto* title = resetWithTitle(plot_, QString());
    // A damaged (image, layer) is left out, as the other statistics views do: said in the title
    // (each left out in the Issues list), since that layer's means then cover fewer images.
    const QString skipped = report->skipped.empty()
                                ? QString()
                                : QStringLiteral(" — %1 (image, layer)%2 left out, unreadable (see Issues)")
                                      .arg(report->skipped.size())
                                      .arg(report->skipped.size() == 1 ? QString() : QStringLiteral("s"));
    setWrappedText(title, QStringLiteral("Locality — %1, %2 image%3, %4%5")
                              .arg(QString::fromStdString(g.name))
                              .arg(g.images)
                              .arg(g.images == 1 ? QString() : QStringLiteral("s"))
                              .arg(session_->statistics().coverageText(), skipped));
    auto* body = addBody(plot_, 1);

    drawDistances(body, *report, g);
    if (!drawOffsetMap(body, *report, g)) return;
    body->setColumnStretchFactor(0, 1);
    body->setColumnStretchFactor(1, 0.01);
    body->setColumnStretchFactor(2, 1);
    fitAspect();
}

void LocalityView::drawDistances(QCPLayoutGrid* body, const LocalityReport& report, const LocalityGroup& g) {
    const DumpInfo& info = session_->info();
    // Left: mean distance per layer, mean over heads, a line per paradigm.
    QCPAxisRect* rect = addRect(plot_, 0, 0, body);
    QCPLegend* legend = addSideLegend(plot_, 0, 1, body);
    const std::vector<int>& layers = report.request.layers;
    QStringList names;
    for (int l : layers) names << QString::fromStdString(info.layers[std::size_t(l)].name);
    std::vector<double> all;
    for (std::size_t p = 0; p < report.paradigms.size(); ++p) {
        QVector<double> x, y;
        for (std::size_t li = 0; li < layers.size(); ++li) {
            double sum = 0;
            int heads = 0;
            for (const LocalityCell& c : g.cells)
                if (c.layer == layers[li] && c.paradigm == int(p) && std::isfinite(c.sums.meanDistance())) {
                    sum += c.sums.meanDistance();
                    ++heads;
                }
            x << double(li);
            y << (heads ? sum / heads : qQNaN());
            if (heads) all.push_back(sum / heads);
        }
        const int sessionP = session_->paradigmIndex(report.paradigms[p].name);
        addLine(rect, x, y, paradigmColor(std::max(0, sessionP)), QString::fromStdString(report.paradigms[p].name),
                legend, Qt::SolidLine, QCPScatterStyle::ssDisc);
    }
    // The yardstick: attention uniform over each row's admissible keys (its window on window layers),
    // mean over the layer's heads (they differ under per-head windows); computed with the report.
    {
        QVector<double> x, y;
        for (std::size_t li = 0; li < layers.size(); ++li) {
            const double uniform = report.layerUniformDistance(layers[li]);
            x << double(li);
            y << uniform;
            if (std::isfinite(uniform)) all.push_back(uniform);
        }
        addLine(rect, x, y, Qt::black, QStringLiteral("uniform over each\nquery's admissible keys"), legend,
                Qt::DashLine);
    }
    fitValueRange(rect->axis(QCPAxis::atLeft), all, false);
    rect->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("mean attention distance (grid cells)"));
    QCPAxis* bottom = rect->axis(QCPAxis::atBottom);
    bottom->setRange(-0.5, double(layers.size()) - 0.5);
    bottom->setLabel(QStringLiteral("layer"));
    layerAxis_ = bottom;
    layerNames_ = names;
    fitCategoryLabels(bottom, names);
}

namespace {

// The report's paradigm of that name, -1 when it has none.
int reportParadigmOf(const LocalityReport& report, const std::string& name) {
    for (std::size_t p = 0; p < report.paradigms.size(); ++p)
        if (report.paradigms[p].name == name) return int(p);
    return -1;
}

// M(dy, dx) for |dy|, |dx| <= r into the map's cells; returns the finite values' extent (lo > hi
// when there are none).
std::pair<double, double> fillOffsetMap(QCPColorMap* map, const LocalityAccumulator& sums, int r) {
    double lo = INFINITY, hi = -INFINITY;
    for (int dy = -r; dy <= r; ++dy)
        for (int dx = -r; dx <= r; ++dx) {
            const double v = sums.offsetMean(dy, dx);
            map->data()->setCell(dx + r, dy + r, v);
            if (std::isfinite(v)) {
                lo = std::min(lo, v);
                hi = std::max(hi, v);
            }
        }
    return {lo, hi};
}

// Ticks name offsets, not cells: -r .. r.
void setOffsetTicks(QCPAxisRect* rect, int r) {
    const int side = 2 * r + 1;
    for (QCPAxis* axis : {rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft)}) {
        QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
        for (int i = 0; i < side; ++i)
            if (side <= 11 || (i - r) % 2 == 0) ticker->addTick(i, QString::number(i - r));
        axis->setTicker(ticker);
    }
}

}  // namespace

bool LocalityView::drawOffsetMap(QCPLayoutGrid* body, const LocalityReport& report, const LocalityGroup& g) {
    const Selection& sel = session_->selection();
    // Right: the offset map of the selected layer and head.
    auto* mapCell = new QCPLayoutGrid;
    body->addElement(0, 2, mapCell);
    auto* mapTitle = addWrappedText(plot_, 9, true);
    mapCell->addElement(0, 0, mapTitle);
    mapCell->setRowStretchFactor(0, 0.01);
    const int reportParadigm =
        mapParadigm_ < 0 ? -1 : reportParadigmOf(report, session_->paradigms()[std::size_t(mapParadigm_)].name);
    for (const LocalityCell& c : g.cells)
        if (c.layer == sel.layer && c.head == sel.head && c.paradigm == reportParadigm) shown_ = &c.sums;
    if (!shown_) {
        setWrappedText(mapTitle, QStringLiteral("No offset map: layer %1 is not among\nthe statistics' layers (%2)")
                                     .arg(QString::fromStdString(session_->layerInfo().name))
                                     .arg(session_->statistics().coverageText()));
        mapTitle->setTextColor(QColor(180, 0, 0));
        return false;
    }
    const int r = std::min({radius_, shown_->gridH - 1, shown_->gridW - 1});
    // Spatial reduction: offsets on the key grid, from the query's key cell (format.md 1c).
    const bool onKeys = shown_->directDistance;
    setWrappedText(
        mapTitle,
        QStringLiteral("Offset map M(dy, dx), centre = %1\n%2 · head %3 · %4")
            .arg(onKeys
                     ? QStringLiteral("the query's cell of the %1 x %2 key grid").arg(shown_->gridH).arg(shown_->gridW)
                     : QStringLiteral("the query"))
            .arg(QString::fromStdString(session_->layerInfo().name))
            .arg(sel.head)
            .arg(QString::fromStdString(report.paradigms[std::size_t(reportParadigm)].name)));
    auto* mapBody = new QCPLayoutGrid;
    mapBody->setColumnSpacing(0);
    mapCell->addElement(1, 0, mapBody);
    mapRect_ = new QCPAxisRect(plot_);
    mapBody->addElement(0, 0, mapRect_);
    const int side = 2 * r + 1;
    setupGridAxes(
        mapRect_, side, side,
        onKeys ? QStringLiteral("dx (key cell column − the query's)")
               : QStringLiteral("dx (key column − query column)"),
        onKeys ? QStringLiteral("dy (key cell row − the query's)") : QStringLiteral("dy (key row − query row)"));
    map_ = new QCPColorMap(mapRect_->axis(QCPAxis::atBottom), mapRect_->axis(QCPAxis::atLeft));
    map_->setInterpolate(false);
    map_->data()->setSize(side, side);
    map_->data()->setRange(QCPRange(0, side - 1), QCPRange(0, side - 1));
    const auto [lo, hi] = fillOffsetMap(map_, *shown_, r);
    setOffsetTicks(mapRect_, r);
    const Preferences& prefs = session_->preferences();
    const bool diverging = report.paradigms[std::size_t(reportParadigm)].signedWeights() || lo < 0;
    const ColorRange range = colorRangeFor(std::isfinite(lo) ? lo : 0, std::isfinite(hi) ? hi : 1, diverging);
    const QCPColorGradient gradient = diverging ? divergingGradient(prefs.divergingMap, prefs.nanColor)
                                                : sequentialGradient(prefs.sequentialMap, prefs.nanColor);
    scale_ = new QCPColorScale(plot_);
    scale_->setType(QCPAxis::atRight);
    scale_->setBarWidth(10);
    scale_->axis()->setLabel(QStringLiteral("mean A[i, i + (dy, dx)]"));
    mapBody->addElement(0, 1, scale_);
    map_->setColorScale(scale_);
    map_->setGradient(gradient);
    map_->setDataRange(QCPRange(range.lower, range.upper));
    CellMarker centre;
    centre.create(plot_, mapRect_);
    centre.place(r, r);
    return true;
}

}  // namespace attnlens::gui
