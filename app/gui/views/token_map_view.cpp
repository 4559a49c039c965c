#include "views/token_map_view.h"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSlider>
#include <cmath>

#include "document/session.h"
#include "plot/color_maps.h"
#include "plot/image_outlines.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui {
namespace {

// Width of one prefix cell in grid units: wide enough for its label, at most a sixth of the grid.
double prefixCellWidth(const TokenLayout& l) {
    return std::max(1.0, std::min(double(l.gridW) / std::max(1, l.prefix), l.gridW / 4.0));
}

QColor labelColorOn(const QColor& background) { return background.lightnessF() > 0.55 ? Qt::black : Qt::white; }

// Why a row is flagged, for the line under the title.
QString rowFlagReason(const RowData& row) {
    switch (row.status) {
        case RowStatus::NonFinite:
            return QStringLiteral("NaN or Inf in this query's inputs or weights");
        case RowStatus::ZeroDenominator:
            return QStringLiteral("its normaliser is exactly 0, so no weight is defined");
        case RowStatus::Ok:
            break;
    }
    return QStringLiteral("non-finite weights");
}

}  // namespace

TokenMapView::TokenMapView(Session* session, QWidget* parent) : PlotView(session, parent) {
    opacityLabel_ = new QLabel(QStringLiteral("Input image outlines:"), this);
    opacity_ = new QSlider(Qt::Horizontal, this);
    opacity_->setObjectName(QStringLiteral("imageOpacity"));
    opacity_->setRange(0, 100);
    opacity_->setMaximumWidth(200);
    opacity_->setToolTip(
        QStringLiteral("Opacity of the input image's outlines (edges) drawn as lines over the map; 0 %: the map "
                       "only. Lines rather than a blend, so that every cell between them keeps a colour of the "
                       "colour bar."));
    opacityValue_ = new QLabel(this);
    opacityValue_->setObjectName(QStringLiteral("imageOpacityValue"));
    // Room for "100 %", so the toolbar does not shift while dragging.
    opacityValue_->setMinimumWidth(opacityValue_->fontMetrics().horizontalAdvance(QStringLiteral("100 %")) + 4);
    opacityValue_->setText(QStringLiteral("%1 %").arg(opacityPercent_));
    holdRange_ = new QCheckBox(QStringLiteral("Hold colour range"), this);
    holdRange_->setObjectName(QStringLiteral("holdColourRange"));
    holdRange_->setToolTip(
        QStringLiteral("Keep the current colour range while changing query, head, layer or image, so that maps can be "
                       "compared by colour"));
    toolbar()->addWidget(opacityLabel_);
    toolbar()->addWidget(opacity_);
    toolbar()->addWidget(opacityValue_);
    toolbar()->addSpacing(12);
    toolbar()->addWidget(holdRange_);
    toolbar()->addStretch(1);
    connect(opacity_, &QSlider::valueChanged, this, [this](int v) { setImageOpacity(v); });
    connect(holdRange_, &QCheckBox::toggled, this, [this](bool on) {
        if (on != colourRangeHeld()) holdColourRange(on);
    });

    connect(plot_, &QCustomPlot::mousePress, this, &TokenMapView::onMousePress);
    connect(plot_, &QCustomPlot::mouseMove, this, &TokenMapView::onMouseMove);
    connect(session, &Session::dumpChanged, this, &PlotView::invalidate);
    connect(session, &Session::selectionChanged, this, &PlotView::invalidate);
    connect(session, &Session::queryChanged, this, &PlotView::invalidate);
    connect(session, &Session::paradigmsChanged, this, &PlotView::invalidate);
    connect(session, &Session::rolloutChanged, this, &PlotView::invalidate);
}

void TokenMapView::setImageOpacity(int percent) {
    percent = std::clamp(percent, 0, 100);
    if (opacity_->value() != percent) opacity_->setValue(percent);  // re-enters once via the signal
    if (percent == opacityPercent_) return;
    opacityPercent_ = percent;
    opacityValue_->setText(QStringLiteral("%1 %").arg(percent));
    invalidate();
}

void TokenMapView::holdColourRange(bool on, std::optional<QCPRange> range) {
    if (on)
        heldRange_ = range ? *range : map_ ? map_->dataRange() : QCPRange(0, 1);
    else
        heldRange_.reset();
    QSignalBlocker block(holdRange_);
    holdRange_->setChecked(on);
    invalidate();
}

void TokenMapView::buildLayout(const TokenLayout& l) {
    const HeatmapPage page = resetHeatmapPage(plot_);
    prefixCells_.clear();
    prefixLabels_.clear();
    prefixRect_ = nullptr;
    title_ = page.header;
    note_ = page.note;
    QCPLayoutGrid* grid = page.grid;

    rect_ = new QCPAxisRect(plot_);
    grid->addElement(0, 0, rect_);
    setupGridAxes(rect_, l.gridH, l.gridW, QStringLiteral("x (token column)"), QStringLiteral("y (token row)"));

    map_ = new QCPColorMap(rect_->axis(QCPAxis::atBottom), rect_->axis(QCPAxis::atLeft));
    map_->setInterpolate(false);
    map_->setTightBoundary(false);
    map_->data()->setSize(std::max(1, l.gridW), std::max(1, l.gridH));
    map_->data()->setRange(QCPRange(0, std::max(0, l.gridW - 1)), QCPRange(0, std::max(0, l.gridH - 1)));

    scale_ = new QCPColorScale(plot_);
    scale_->setType(QCPAxis::atRight);
    scale_->setBarWidth(14);
    grid->addElement(0, 1, scale_);
    map_->setColorScale(scale_);

    // Over the map (created after it on the same layer), under the markers and window outlines.
    image_ = new QCPItemPixmap(plot_);
    image_->setClipAxisRect(rect_);
    image_->topLeft->setAxes(rect_->axis(QCPAxis::atBottom), rect_->axis(QCPAxis::atLeft));
    image_->bottomRight->setAxes(rect_->axis(QCPAxis::atBottom), rect_->axis(QCPAxis::atLeft));
    image_->topLeft->setCoords(-0.5, -0.5);
    image_->bottomRight->setCoords(l.gridW - 0.5, l.gridH - 0.5);
    // Nearest-neighbour: each drawn pixel is the map's colour or the outline's, never a blend of outline
    // and transparency that lands on colours the bar does not have.
    image_->setScaled(true, Qt::IgnoreAspectRatio, Qt::FastTransformation);
    image_->setVisible(false);
    imageShownFor_ = -1;

    addGridFrame(plot_, rect_, l.gridH, l.gridW);
    windows_.clear();
    keyLines_.clear();  // clearItems() removed them
    keyLinesFor_ = TokenLayout{-1, -1, -1};
    marker_ = {};
    marker_.create(plot_, rect_);
    prefixMarker_ = {};

    if (l.prefix > 0) buildPrefixStrip(grid, l);
    built_ = l;
}

// The prefix tokens (CLS, ...) as a strip of cells under the map, in row 1 of grid.
void TokenMapView::buildPrefixStrip(QCPLayoutGrid* grid, const TokenLayout& l) {
    prefixRect_ = new QCPAxisRect(plot_);
    grid->addElement(1, 0, prefixRect_);
    // Sizes of the outer rect (its margins follow the map's, fitAspect): a strip of about 46 px.
    prefixRect_->setSizeConstraintRect(QCPLayoutElement::scrOuterRect);
    prefixRect_->setMinimumSize(50, 52);
    prefixRect_->setMaximumSize(QWIDGETSIZE_MAX, 52);
    auto* px = prefixRect_->axis(QCPAxis::atBottom);
    auto* py = prefixRect_->axis(QCPAxis::atLeft);
    px->setVisible(false);
    py->setTicks(false);
    py->setTickLabels(false);
    py->setLabel(QStringLiteral("prefix"));
    py->grid()->setVisible(false);
    px->grid()->setVisible(false);
    py->setRange(-0.5, 0.5);
    px->setRange(-0.5, l.gridW - 0.5);
    const double w = prefixCellWidth(l);
    for (int i = 0; i < l.prefix; ++i) {
        auto* cell = new QCPItemRect(plot_);
        cell->setClipAxisRect(prefixRect_);
        for (auto* p : {cell->topLeft, cell->bottomRight}) p->setAxes(px, py);
        cell->topLeft->setCoords(-0.5 + i * w, -0.42);
        cell->bottomRight->setCoords(-0.5 + (i + 1) * w, 0.42);
        cell->setPen(QPen(Qt::gray, 0.5));
        prefixCells_.push_back(cell);
        auto* label = new QCPItemText(plot_);
        label->setClipAxisRect(prefixRect_);
        label->position->setAxes(px, py);
        label->position->setCoords(-0.5 + (i + 0.5) * w, 0);
        label->setFont(QFont(font().family(), 8));
        prefixLabels_.push_back(label);
    }
    prefixMarker_.create(plot_, prefixRect_);
    grid->setRowStretchFactor(1, 0.01);
}

bool TokenMapView::fitAspect() {
    if (!rect_ || built_.gridH <= 0) return false;
    bool changed = fitGridMargins(rect_, built_.gridH, built_.gridW, scale_);
    changed |= alignVertically(scale_, rect_->margins());
    if (prefixRect_) changed |= alignHorizontally(prefixRect_, rect_->margins());
    // A prefix cell too narrow for "CLS  0.00276" on one line shows name and weight on two.
    if (prefixRect_) {
        const QCPAxis* px = prefixRect_->axis(QCPAxis::atBottom);
        const double cellPixels = std::abs(px->coordToPixel(prefixCellWidth(built_)) - px->coordToPixel(0));
        for (std::size_t i = 0; i < prefixLabels_.size() && i < prefixLabelParts_.size(); ++i) {
            const auto& [name, value] = prefixLabelParts_[i];
            if (name.isEmpty()) continue;
            const QString oneLine = name + QStringLiteral("  ") + value;
            const QString text = QFontMetrics(prefixLabels_[i]->font()).horizontalAdvance(oneLine) + 6 <= cellPixels
                                     ? oneLine
                                     : name + '\n' + value;
            if (prefixLabels_[i]->text() != text) {
                prefixLabels_[i]->setText(text);
                changed = true;
            }
        }
    }
    return changed;
}

void TokenMapView::updateKeyCells(const AttentionLayout& g) {
    const AttentionLayout want = g.reducedKeys() ? g : AttentionLayout(TokenLayout{-1, -1, -1});
    if (want == keyLinesFor_) return;
    for (QCPItemLine* line : keyLines_) plot_->removeItem(line);
    keyLines_.clear();
    keyLinesFor_ = want;
    if (!g.reducedKeys()) return;
    // A border between query rows (columns) whose key cells differ.
    const QPen cellPen(QColor(90, 90, 90, 150), 0.8, Qt::DashLine);
    // Where the strided convolution's windows end: the rows (columns) beyond lie in no key's window.
    const QPen droppedPen(QColor(200, 30, 30, 200), 1.2, Qt::DotLine);
    auto add = [&](double x0, double y0, double x1, double y1, const QPen& pen) {
        auto* line = new QCPItemLine(plot_);
        line->setClipAxisRect(rect_);
        for (auto* p : {line->start, line->end})
            p->setAxes(rect_->axis(QCPAxis::atBottom), rect_->axis(QCPAxis::atLeft));
        line->start->setCoords(x0, y0);
        line->end->setCoords(x1, y1);
        line->setPen(pen);
        line->setSelectable(false);
        keyLines_.push_back(line);
    };
    const int h = g.queries.gridH, w = g.queries.gridW;
    for (int y = 1; y < h; ++y)
        if (g.keyRow(y) != g.keyRow(y - 1)) add(-0.5, y - 0.5, w - 0.5, y - 0.5, cellPen);
    for (int x = 1; x < w; ++x)
        if (g.keyCol(x) != g.keyCol(x - 1)) add(x - 0.5, -0.5, x - 0.5, h - 0.5, cellPen);
    if (g.coveredRows() < h) add(-0.5, g.coveredRows() - 0.5, w - 0.5, g.coveredRows() - 0.5, droppedPen);
    if (g.coveredCols() < w) add(g.coveredCols() - 0.5, -0.5, g.coveredCols() - 0.5, h - 0.5, droppedPen);
}

QString TokenMapView::titleText() const { return title_ ? unwrappedText(title_) : QString(); }
QString TokenMapView::noteText() const { return note_ ? unwrappedText(note_) : QString(); }

void TokenMapView::updateImage(const QColor& zeroColour) {
    const int image = session_->selection().image;
    const bool wanted = opacityPercent_ > 0 && session_->info().imageInfo.present;
    opacity_->setEnabled(session_->info().imageInfo.present);
    opacityLabel_->setEnabled(session_->info().imageInfo.present);
    if (!wanted) {
        image_->setVisible(false);
        return;
    }
    if (imageShownFor_ != image) {
        // An image that cannot be read (its message is in the issues list) is simply left out.
        outlineMask_ = imageOutlineMask(session_->inputImage(image));
        imageShownFor_ = outlineMask_.isNull() ? -1 : image;
        drawnOpacity_ = -1;
    }
    const QColor colour = labelColorOn(zeroColour);
    const double opacity = opacityPercent_ / 100.0;
    if (imageShownFor_ == image && (colour != outlineColour_ || opacity != drawnOpacity_)) {
        image_->setPixmap(QPixmap::fromImage(colouredOutlines(outlineMask_, colour, opacity)));
        outlineColour_ = colour;
        drawnOpacity_ = opacity;
    }
    image_->setVisible(imageShownFor_ == image);
}

void TokenMapView::rebuild() {
    if (!session_->isOpen()) {
        plot_->clearItems();
        plot_->clearPlottables();
        plot_->plotLayout()->clear();
        windows_.clear();
        keyLines_.clear();  // clearItems() deleted them
        keyLinesFor_ = TokenLayout{-1, -1, -1};
        built_ = TokenLayout{-1, -1, -1};
        rect_ = nullptr;
        map_ = nullptr;
        prefixRect_ = nullptr;
        return;
    }
    const TokenLayout& l = session_->layout();
    if (!(l == built_)) buildLayout(l);

    const Selection& sel = session_->selection();
    // With the local branch: the query's row of E_c = A + M_c (kernels have negative taps: signed).
    // With rollout: the rollout row of the rolled-out token (computed in the background).
    const RowData& row = session_->mapContentRow(sel.paradigm);
    const Index query = row.rollout ? session_->rollout().query() : sel.query;
    // An unreadable head (damaged chunk), or a rollout not computed yet or impossible: no map at
    // all, the reason in the title and the note.
    const bool unreadable = !row.error.isEmpty() || row.pending;
    map_->setVisible(!unreadable);
    // A colour bar without a map, or over a map with no finite weight (its 0 ... 1 would be no
    // range of this row), would read as data.
    const bool anyFinite = row.nonFiniteEntries < row.values.size();
    scale_->setVisible(!unreadable && anyFinite);
    const auto branch = row.withBranch ? session_->branch().kernel() : nullptr;

    // Spatial reduction: each query cell shows the weight of its key cell (the reduced grid drawn
    // over the queries' grid and the image), the key cells outlined.
    const AttentionLayout geometry = row.rollout ? AttentionLayout(l) : session_->attentionLayout();
    fillTokenGrid(map_, geometry, row.values);
    updateKeyCells(geometry);
    const auto [gradient, range] = applyColours(row, branch != nullptr);
    if (unreadable) image_->setVisible(false);  // outlines over no map would read as the map
    fillPrefixCells(row, geometry.keys, gradient, range);
    placeQueryMarkers(row, query);

    const LayerInfo& layer = session_->layerInfo();
    if (row.rollout)
        setWrappedText(title_, QStringLiteral("%1 rollout of %2 (token %3) — image %4, up to layer %5")
                                   .arg(session_->paradigmLabel(sel.paradigm), tokenName(l, query))
                                   .arg(query)
                                   .arg(sel.image)
                                   .arg(QString::fromStdString(layer.name)));
    else
        setWrappedText(title_,
                       QStringLiteral("%1 — query %2 (token %3) — image %4, layer %5, head %6")
                           .arg(session_->paradigmLabel(sel.paradigm) + (branch ? QStringLiteral(" + M_c") : QString()),
                                tokenName(l, sel.query))
                           .arg(sel.query)
                           .arg(sel.image)
                           .arg(QString::fromStdString(layer.name))
                           .arg(sel.head));
    bool alarming = false;
    const QString note = rowNote(row, geometry, branch.get(), query, alarming);
    note_->setTextColor(alarming ? QColor(180, 0, 0) : QColor(Qt::black));
    setWrappedText(note_, note);
    if (unreadable) showWithoutMap(row, query);
    fitAspect();
}

std::pair<QCPColorGradient, QCPRange> TokenMapView::applyColours(const RowData& row, bool withBranch) {
    const Paradigm& paradigm = session_->paradigms()[std::size_t(session_->selection().paradigm)];
    const Preferences& prefs = session_->preferences();
    // A clipped or absolute rollout is non-negative whatever the paradigm: diverging only when it
    // holds negative values.
    const bool diverging = (!row.rollout && paradigm.signedWeights()) || row.minFinite < 0 || withBranch ||
                           (heldRange_ && heldRange_->lower < 0);
    ColorRange range = colorRangeFor(row.colourMin, row.colourMax, diverging);
    if (heldRange_) range = heldColorRange(heldRange_->lower, heldRange_->upper, diverging);
    clipped_ = heldRange_ ? clippedValues(row.values.data(), row.values.size(), range) : ClippedValues{};
    QCPColorGradient gradient = diverging ? divergingGradient(prefs.divergingMap, prefs.nanColor)
                                          : sequentialGradient(prefs.sequentialMap, prefs.nanColor);
    map_->setGradient(gradient);
    map_->setDataRange(QCPRange(range.lower, range.upper));
    scale_->setGradient(gradient);
    scale_->setDataRange(QCPRange(range.lower, range.upper));
    // Shorter forms for a short colour bar (fitColourBarLabels shows the longest that fits).
    const QStringList scaleLabels =
        row.rollout  ? (diverging ? QStringList{QStringLiteral("rollout weight (signed, 0 = white)"),
                                               QStringLiteral("rollout (signed, 0 = white)"), QStringLiteral("rollout")}
                                  : QStringList{QStringLiteral("rollout weight of token k"),
                                               QStringLiteral("rollout weight"), QStringLiteral("rollout")})
        : withBranch ? QStringList{QStringLiteral("E_c[q,k] = A[q,k] + M_c[q,k] (signed, 0 = white)"),
                                   QStringLiteral("E_c[q,k] (signed, 0 = white)"), QStringLiteral("E_c[q,k]")}
        : diverging  ? QStringList{QStringLiteral("attention weight A[q,k] (signed, 0 = white)"),
                                  QStringLiteral("A[q,k] (signed, 0 = white)"), QStringLiteral("A[q,k]")}
                     : QStringList{QStringLiteral("attention weight A[q,k]"), QStringLiteral("A[q,k]")};
    QStringList labels = scaleLabels;
    if (clipped_.any())  // the end colours also stand for the weights beyond them
        for (QString& form : labels) form += QStringLiteral(" · ends clipped");
    if (labels != scale_->property("attnlensLabelForms").toStringList()) setColourBarLabels(scale_, labels);

    updateImage(QColor::fromRgba(
        gradient.color(std::clamp(0.0, range.lower, range.upper), QCPRange(range.lower, range.upper))));
    return {gradient, QCPRange(range.lower, range.upper)};
}

void TokenMapView::fillPrefixCells(const RowData& row, const TokenLayout& keys, QCPColorGradient gradient,
                                   const QCPRange& range) {
    const TokenLayout& l = session_->layout();
    const Preferences& prefs = session_->preferences();
    // Prefix tokens share the colour range of the grid (keys' prefix tokens: a reduced layer's keys
    // may keep fewer than the queries).
    prefixValues_.assign(std::size_t(l.prefix), NAN);
    prefixLabelParts_.assign(std::size_t(l.prefix), {});
    for (int i = 0; i < l.prefix && i < int(prefixCells_.size()); ++i) {
        const double v = i < keys.prefix ? row.values[i] : NAN;
        prefixValues_[std::size_t(i)] = v;
        const QColor c = std::isfinite(v) ? QColor::fromRgba(gradient.color(v, range)) : prefs.nanColor;
        prefixCells_[std::size_t(i)]->setBrush(c);
        prefixLabelParts_[std::size_t(i)] = {prefixName(i, l.prefix), formatWeight(v)};
        prefixLabels_[std::size_t(i)]->setText(QStringLiteral("%1  %2").arg(prefixName(i, l.prefix), formatWeight(v)));
        prefixLabels_[std::size_t(i)]->setColor(labelColorOn(c));
    }
}

void TokenMapView::placeQueryMarkers(const RowData& row, Index query) {
    const TokenLayout& l = session_->layout();
    // Window attention: the windows as the model cut them, the query's outlined (not for rollout,
    // which runs over many layers).
    const LayerInfo& layerOfMap = session_->layerInfo();
    const int mapHead = session_->selection().head;
    windows_.update(plot_, rect_,
                    !row.rollout && layerOfMap.window ? &layerOfMap.window->partitionOf(mapHead) : nullptr, query);
    if (l.isSpatial(query)) {
        marker_.place(l.col(query), l.row(query));
        marker_.setVisible(true);
        prefixMarker_.setVisible(false);
    } else {
        marker_.setVisible(false);
        const double w = prefixCellWidth(l);
        prefixMarker_.place(-0.5 + (double(query) + 0.5) * w, 0, w / 2, 0.45);
        prefixMarker_.setVisible(true);
    }
}

QString TokenMapView::rowNote(const RowData& row, const AttentionLayout& geometry, const BranchKernel* branch,
                              Index query, bool& alarming) const {
    const TokenLayout& l = session_->layout();
    const TokenLayout& keys = geometry.keys;
    const Selection& sel = session_->selection();
    const Paradigm& paradigm = session_->paradigms()[std::size_t(sel.paradigm)];
    const LayerInfo& layerOfMap = session_->layerInfo();
    const int mapHead = sel.head;
    double sum = 0;
    for (Index j = 0; j < row.values.size(); ++j)
        if (std::isfinite(row.values[j])) sum += row.values[j];
    const bool flagged = row.status != RowStatus::Ok || row.nonFiniteEntries > 0;
    // A flagged row's sum over its finite weights (often none: "0.0000") would read as a result.
    QString note =
        flagged
            ? QStringLiteral("ROW FLAGGED (%1): %2 of %3 weights non-finite, drawn in the NaN colour")
                      .arg(row.rollout ? QStringLiteral("a row on the rollout's path is flagged or, clipped, has no "
                                                        "positive weight")
                                       : rowFlagReason(row))
                      .arg(row.nonFiniteEntries)
                      .arg(row.values.size()) +
                  (row.nonFiniteEntries == row.values.size() ? QStringLiteral(" (no finite weight: no colour bar)")
                                                             : QString())
            : QStringLiteral("row sum %1 · min %2 · max %3 · %4 = %5")
                  .arg(QString::number(sum, 'f', 4), formatWeight(row.minFinite), formatWeight(row.maxFinite))
                  .arg(geometry.reducedKeys() ? QStringLiteral("n") : QStringLiteral("N"))
                  .arg(row.values.size());
    if (heldRange_) {
        note += QStringLiteral(" · colour range held") + clippedNote(clipped_);
        alarming = alarming || clipped_.any();
    } else if (row.rollout && !flagged && (row.colourMax < row.maxFinite || row.colourMin > row.minFinite))
        note += QStringLiteral(" · colour range without %1's own %2")
                    .arg(tokenName(l, query), formatWeight(row.values[query]));
    // Whether the branch is included, and which channel (nothing for dumps without any branch).
    const QString branchError = row.rollout ? QString() : session_->branch().error();
    if (row.rollout)
        note = wrapText(session_->rollout().description(), 90) +
               (session_->branch().status().isEmpty() ? QString() : QStringLiteral(" (local branch not included)")) +
               '\n' + note;
    else if (branch)
        note = QStringLiteral("E_c = A + M_c, local branch %1\n").arg(branch->describe()) + note;
    else if (!branchError.isEmpty())
        note = branchErrorNote(branchError, session_->path()) + '\n' + note;
    else if (const QString status = session_->branch().status(); !status.isEmpty())
        note = QStringLiteral("A, %1 · ").arg(status) + note;
    if (!row.rollout && layerOfMap.window)
        note = (layerOfMap.window->perHead() ? QStringLiteral("head %1's ").arg(mapHead) : QString()) +
               QString::fromStdString(describe(layerOfMap.window->ruleOf(mapHead))) +
               QStringLiteral(", the query's window outlined\n") + note;
    // The note is for a paradigm other than the layer's own (whose kernel is the one applied).
    if (!row.rollout && sel.paradigm != session_->layerParadigm()) {
        const int shownLayer = sel.layer;
        if (const QString kernel =
                kernelAppliedNote(session_->info(), std::span(&shownLayer, 1), std::span(&paradigm, 1));
            !kernel.isEmpty())
            note = kernel + '\n' + note;
    }
    if (geometry.reducedKeys()) {
        // Which rule groups the query cells (format.md 1c), and what a strided convolution drops.
        QString rule = geometry.strideY > 0
                           ? QStringLiteral("stride %1 x %2: each drawn over its window's query cells (dashed)")
                                 .arg(geometry.strideY)
                                 .arg(geometry.strideX)
                           : QStringLiteral("each drawn over the query cells whose centres it holds (dashed)");
        if (geometry.coveredRows() < geometry.queries.gridH || geometry.coveredCols() < geometry.queries.gridW)
            rule += QStringLiteral("; beyond the dotted line no window: nearest key");
        note = QStringLiteral("spatial reduction: keys on a %1 x %2 grid%3, %4\n")
                   .arg(keys.gridH)
                   .arg(keys.gridW)
                   .arg(keys.prefix > 0 ? QStringLiteral(" + %1 prefix").arg(keys.prefix) : QString(), rule) +
               note;
    }
    alarming = alarming || flagged || !branchError.isEmpty();
    return note;
}

// A rollout still computing, or a map that cannot be had (an unreadable head, a rollout that
// cannot be computed): no marker, grey prefix cells, and the reason.
void TokenMapView::showWithoutMap(const RowData& row, Index query) {
    const TokenLayout& l = session_->layout();
    const Selection& sel = session_->selection();
    const Paradigm& paradigm = session_->paradigms()[std::size_t(sel.paradigm)];
    const LayerInfo& layer = session_->layerInfo();
    if (row.pending) {
        marker_.setVisible(false);
        prefixMarker_.setVisible(false);
        for (int i = 0; i < l.prefix && i < int(prefixCells_.size()); ++i) {
            prefixCells_[std::size_t(i)]->setBrush(QColor(235, 235, 235));
            prefixLabels_[std::size_t(i)]->setText(QStringLiteral("%1  …").arg(prefixName(i, l.prefix)));
            prefixLabelParts_[std::size_t(i)] = {prefixName(i, l.prefix), QStringLiteral("…")};
            prefixLabels_[std::size_t(i)]->setColor(Qt::black);
        }
        setWrappedText(title_, QStringLiteral("%1 rollout — query %2 (token %3) — image %4: computing…")
                                   .arg(QString::fromStdString(paradigm.name), tokenName(l, query))
                                   .arg(query)
                                   .arg(sel.image));
        setWrappedText(note_, wrapText(session_->rollout().description(), 90));
        note_->setTextColor(QColor(Qt::black));
    } else {
        marker_.setVisible(false);
        prefixMarker_.setVisible(false);
        for (int i = 0; i < l.prefix && i < int(prefixCells_.size()); ++i) {
            prefixCells_[std::size_t(i)]->setBrush(QColor(235, 235, 235));
            prefixLabels_[std::size_t(i)]->setText(QStringLiteral("%1  —").arg(prefixName(i, l.prefix)));
            prefixLabelParts_[std::size_t(i)] = {prefixName(i, l.prefix), QStringLiteral("—")};
            prefixLabels_[std::size_t(i)]->setColor(Qt::black);
        }
        const QString where = row.rollout ? QStringLiteral("rollout — image %1, up to layer %2")
                                                .arg(sel.image)
                                                .arg(QString::fromStdString(layer.name))
                                          : QStringLiteral("image %1, layer %2, head %3")
                                                .arg(sel.image)
                                                .arg(QString::fromStdString(layer.name))
                                                .arg(sel.head);
        setWrappedText(title_, QStringLiteral("%1 %2: NOT SHOWN").arg(QString::fromStdString(paradigm.name), where));
        setWrappedText(note_, wrapText(row.error, 90));
        note_->setTextColor(QColor(180, 0, 0));
    }
}

void TokenMapView::onMousePress(QMouseEvent* e) {
    if (e->button() != Qt::LeftButton || !map_ || !session_->isOpen()) return;
    const TokenLayout& l = session_->layout();
    int x = 0, y = 0;
    if (cellAt(map_, e->position(), &x, &y)) {
        session_->setQuery(l.token(y, x));
        return;
    }
    if (prefixRect_ && prefixRect_->rect().contains(e->position().toPoint())) {
        const double cx = prefixRect_->axis(QCPAxis::atBottom)->pixelToCoord(e->position().x());
        const int i = int(std::floor((cx + 0.5) / prefixCellWidth(l)));
        if (i >= 0 && i < l.prefix) session_->setQuery(i);
    }
}

void TokenMapView::onMouseMove(QMouseEvent* e) {
    if (!map_ || !session_->isOpen()) return;
    const TokenLayout& l = session_->layout();
    const Selection& sel = session_->selection();
    const QString name = QString::fromStdString(session_->paradigms()[std::size_t(sel.paradigm)].name);
    const QString sym = session_->selection().rolloutShown() ? QStringLiteral("rollout")
                        : session_->branch().kernel()        ? QStringLiteral("E_c")
                                                             : QStringLiteral("A");
    const Index query = session_->selection().rolloutShown() ? session_->rollout().query() : sel.query;
    int x = 0, y = 0;
    if (!map_->visible()) {
        // No map is drawn (the head could not be read): its cells hold no weights, NaN or other.
        const QString error = session_->currentHeadError();
        Q_EMIT hoverText(
            error.isEmpty()
                ? QString()
                : QStringLiteral("%1: %2 not read: %3").arg(name, sym, shortError(error, session_->path())));
        return;
    }
    if (cellAt(map_, e->position(), &x, &y)) {
        const AttentionLayout g =
            session_->selection().rolloutShown() ? AttentionLayout(l) : session_->attentionLayout();
        const Index key = g.keyToken(y, x);
        Q_EMIT hoverText(QStringLiteral("%1: %2[%3, %4 %5] = %6")
                             .arg(name, sym)
                             .arg(query)
                             .arg(key)
                             .arg(tokenName(g.keys, key) + keyGridNote(g), formatWeight(map_->data()->cell(x, y))));
        return;
    }
    if (prefixRect_ && prefixRect_->rect().contains(e->position().toPoint())) {
        const double cx = prefixRect_->axis(QCPAxis::atBottom)->pixelToCoord(e->position().x());
        const int i = int(std::floor((cx + 0.5) / prefixCellWidth(l)));
        if (i >= 0 && i < l.prefix) {
            Q_EMIT hoverText(QStringLiteral("%1: %2[%3, %4 %5] = %6")
                                 .arg(name, sym)
                                 .arg(query)
                                 .arg(i)
                                 .arg(prefixName(i, l.prefix), formatWeight(prefixValue(i))));
            return;
        }
    }
    Q_EMIT hoverText(QString());
}

}  // namespace attnlens::gui
