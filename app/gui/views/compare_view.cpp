#include "views/compare_view.h"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <algorithm>
#include <cmath>

#include "attnlens/analysis/statistics.h"
#include "document/session.h"
#include "plot/color_maps.h"
#include "plot/eliding_combo_box.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui {

CompareView::CompareView(Session* session, QWidget* parent) : PlotView(session, parent) {
    rangeMode_ = new ElidingComboBox(this);
    rangeMode_->setObjectName(QStringLiteral("rangeMode"));
    rangeMode_->addItems({QStringLiteral("Range per panel"), QStringLiteral("Shared range")});
    rangeMode_->setToolTip(QStringLiteral("Colour range: each panel its own, or one shared by every paradigm panel"));
    diffOn_ = new QCheckBox(QStringLiteral("Difference"), this);
    diffOn_->setObjectName(QStringLiteral("differenceOn"));
    diffA_combo_ = new ElidingComboBox(this);
    diffB_combo_ = new ElidingComboBox(this);
    // Boxes that shrink to a few characters (full names in the drop-down), so that the toolbar does
    // not set the window's minimum width: the whole window fits 1024 px with the docks.
    for (QComboBox* c : {rangeMode_, diffA_combo_, diffB_combo_}) {
        c->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
        c->setMinimumContentsLength(c == rangeMode_ ? 15 : 8);
    }
    toolbar()->addWidget(rangeMode_);
    toolbar()->addSpacing(12);
    toolbar()->addWidget(diffOn_);
    toolbar()->addWidget(diffA_combo_);
    toolbar()->addWidget(new QLabel(QStringLiteral("−"), this));
    toolbar()->addWidget(diffB_combo_);
    holdRange_ = new QCheckBox(QStringLiteral("Hold colour range"), this);
    holdRange_->setObjectName(QStringLiteral("holdColourRange"));
    holdRange_->setToolTip(
        QStringLiteral("Keep the current colour range (one for every paradigm panel) while changing query, head, "
                       "layer or image"));
    toolbar()->addSpacing(12);
    toolbar()->addWidget(holdRange_);
    toolbar()->addStretch(1);
    connect(holdRange_, &QCheckBox::toggled, this, [this](bool on) {
        if (on != colourRangeHeld()) holdColourRange(on);
    });

    connect(rangeMode_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (!syncing_) setSharedRange(i == 1);
    });
    auto diffChanged = [this]() {
        if (syncing_) return;
        if (diffOn_->isChecked())
            setDifference(diffA_combo_->currentData().toInt(), diffB_combo_->currentData().toInt());
        else
            setDifference(-1, -1);
    };
    connect(diffOn_, &QCheckBox::toggled, this, diffChanged);
    connect(diffA_combo_, &QComboBox::currentIndexChanged, this, diffChanged);
    connect(diffB_combo_, &QComboBox::currentIndexChanged, this, diffChanged);

    connect(plot_, &QCustomPlot::mousePress, this, &CompareView::onMousePress);
    connect(plot_, &QCustomPlot::mouseMove, this, &CompareView::onMouseMove);
    connect(session, &Session::dumpChanged, this, &PlotView::invalidate);
    connect(session, &Session::selectionChanged, this, &PlotView::invalidate);
    connect(session, &Session::queryChanged, this, &PlotView::invalidate);
    connect(session, &Session::rolloutChanged, this, &PlotView::invalidate);
    connect(session, &Session::paradigmsChanged, this, [this]() {
        syncControls();
        invalidate();
    });
    syncControls();
}

void CompareView::syncControls() {
    syncing_ = true;
    const auto& ps = session_->paradigms();
    for (QComboBox* c : {diffA_combo_, diffB_combo_}) {
        const int keep = c->currentData().isValid() ? c->currentData().toInt() : -1;
        c->clear();
        for (std::size_t i = 0; i < ps.size(); ++i) c->addItem(QString::fromStdString(ps[i].name), int(i));
        if (keep >= 0 && keep < int(ps.size())) c->setCurrentIndex(keep);
    }
    if (diffA_ < 0) {
        // Defaults that show the papers' contrast: softmax against InLine.
        const int a = session_->paradigmIndex("softmax"), b = session_->paradigmIndex("inline");
        if (a >= 0) diffA_combo_->setCurrentIndex(a);
        if (b >= 0) diffB_combo_->setCurrentIndex(b);
    }
    rangeMode_->setCurrentIndex(sharedRange_ ? 1 : 0);
    diffOn_->setChecked(diffA_ >= 0);
    syncing_ = false;
}

void CompareView::setSharedRange(bool shared) {
    if (shared == sharedRange_) return;
    sharedRange_ = shared;
    syncControls();
    invalidate();
}

void CompareView::setDifference(int a, int b) {
    const int n = int(session_->paradigms().size());
    if (a < 0 || b < 0 || a >= n || b >= n) a = b = -1;
    diffA_ = a;
    diffB_ = b;
    syncing_ = true;
    if (a >= 0) {
        diffA_combo_->setCurrentIndex(a);
        diffB_combo_->setCurrentIndex(b);
    }
    diffOn_->setChecked(a >= 0);
    syncing_ = false;
    invalidate();
}

void CompareView::holdColourRange(bool on, std::optional<QCPRange> range) {
    heldRange_.reset();
    if (on && range) {
        heldRange_ = *range;
    } else if (on) {
        // What the paradigm panels show now, as one range.
        QCPRange span(0, 1);
        bool first = true;
        for (const Panel& p : panels_) {
            if (p.paradigm < 0) continue;
            const QCPRange r = p.map->dataRange();
            span = first ? r : QCPRange(std::min(span.lower, r.lower), std::max(span.upper, r.upper));
            first = false;
        }
        heldRange_ = span;
    }
    QSignalBlocker block(holdRange_);
    holdRange_->setChecked(on);
    invalidate();
}

void CompareView::buildLayout() {
    const HeatmapPage page = resetHeatmapPage(plot_);
    panels_.clear();
    shared_ = nullptr;

    const TokenLayout& l = session_->layout();
    std::vector<int> wanted = session_->selection().shown;
    if (diffA_ >= 0) wanted.push_back(-1);
    const int n = int(wanted.size());
    const int cols = std::max(1, int(std::ceil(std::sqrt(double(n)))));

    auto* layout = plot_->plotLayout();
    header_ = page.header;
    note_ = page.note;
    QCPLayoutGrid* grid = page.grid;
    grid->setColumnSpacing(8);
    grid->setRowSpacing(4);

    if (sharedRange_) {
        shared_ = new QCPColorScale(plot_);
        shared_->setType(QCPAxis::atRight);
        shared_->setBarWidth(14);
        auto* side = new QCPLayoutGrid;
        layout->addElement(2, 1, side);
        side->addElement(0, 0, shared_);
        layout->setColumnStretchFactor(1, 0.01);
    }

    for (int i = 0; i < n; ++i) {
        // The title spans the panel (map and colour bar), which fitAspect keeps centred.
        auto* cell = new QCPLayoutGrid;
        grid->addElement(i / cols, i % cols, cell);
        const int paradigm = wanted[std::size_t(i)];
        const bool ownScale = !(sharedRange_ && paradigm >= 0);
        Panel p;
        static_cast<HeatmapPanel&>(p) = addHeatmapPanel(plot_, cell, ownScale, 8);
        p.paradigm = paradigm;
        setupGridAxes(p.rect, l.gridH, l.gridW, QString(), QString());
        sizeTokenGrid(p.map, l);
        if (!ownScale) p.map->setColorScale(shared_);
        addGridFrame(plot_, p.rect, l.gridH, l.gridW);
        panels_.push_back(std::move(p));
    }
    builtFor_ = wanted;
    builtLayout_ = l;
    builtShared_ = sharedRange_;
}

bool CompareView::fitAspect() {
    bool changed = false;
    for (Panel& p : panels_) {
        changed |= fitGridMargins(p.rect, builtLayout_.gridH, builtLayout_.gridW, p.scale);
        if (p.scale) changed |= alignVertically(p.scale, p.rect->margins());
    }
    return changed;
}

// An unreadable head (damaged chunk): every panel is empty and the note says why. With rollout,
// the rollout rows (each panel's own: pending, or failed when a layer on the way is unreadable).
QString CompareView::shownRowsError(bool rollout, bool& pending) const {
    QString readError = rollout ? QString() : session_->currentHeadError();
    pending = false;
    if (rollout)
        for (const Panel& p : panels_) {
            const int para = p.paradigm >= 0 ? p.paradigm : diffA_;
            for (int q : {para, p.paradigm >= 0 ? -1 : diffB_}) {
                if (q < 0) continue;
                const RowData& r = session_->mapContentRow(q);
                pending |= r.pending;
                if (readError.isEmpty() && !r.error.isEmpty()) readError = r.error;
            }
        }
    if (pending && readError.isEmpty()) readError = QStringLiteral("computing the rollouts…");
    return readError;
}

// Pass 1: each paradigm panel's data, and the extent over them all.
CompareView::SharedExtent CompareView::fillMaps(bool withBranch) {
    const auto& ps = session_->paradigms();
    SharedExtent extent;
    extent.anySigned = withBranch;
    for (Panel& p : panels_) {
        if (p.paradigm < 0) continue;
        const RowData& r = session_->mapContentRow(p.paradigm);
        fillTokenGrid(p.map, session_->attentionLayout(), r.values);
        extent.lo = std::min(extent.lo, r.colourMin);
        extent.hi = std::max(extent.hi, r.colourMax);
        extent.anySigned |= (!r.rollout && ps[std::size_t(p.paradigm)].signedWeights()) || r.minFinite < 0;
    }
    return extent;
}

// Pass 2: colours, bars, titles and the query's marker. Returns the paradigm panels whose row has
// no finite weight.
int CompareView::colourPanels(const SharedExtent& extent, bool rollout, const QString& readError) {
    const Preferences& prefs = session_->preferences();
    const TokenLayout& l = session_->layout();
    int panelsWithoutFinite = 0;
    for (Panel& p : panels_) {
        ColorRange range;
        const QString title = p.paradigm >= 0 ? paradigmPanel(p, extent, readError, range)
                                              : differencePanel(p, rollout, readError, range);
        const QCPColorGradient g = range.diverging ? divergingGradient(prefs.divergingMap, prefs.nanColor)
                                                   : sequentialGradient(prefs.sequentialMap, prefs.nanColor);
        p.map->setGradient(g);
        p.map->setDataRange(QCPRange(range.lower, range.upper));
        // A row with no finite weight has nothing to put on a bar (its 0 ... 1 would read as data).
        const RowData* shownRow = p.paradigm >= 0 ? &session_->mapContentRow(p.paradigm) : nullptr;
        const bool anyFinite = !shownRow || shownRow->nonFiniteEntries < shownRow->values.size();
        if (shownRow && !anyFinite) ++panelsWithoutFinite;
        if (p.scale) {
            p.scale->setGradient(g);
            p.scale->setDataRange(QCPRange(range.lower, range.upper));
            p.scale->axis()->setLabel(!shownRow              ? QStringLiteral("difference")
                                      : shownRow->rollout    ? QStringLiteral("rollout")
                                      : shownRow->withBranch ? QStringLiteral("E_c[q,k]")
                                                             : QStringLiteral("A[q,k]"));
            if (!anyFinite) p.scale->setVisible(false);
        } else if (shared_) {
            shared_->setGradient(g);
            shared_->setDataRange(QCPRange(range.lower, range.upper));
            shared_->axis()->setLabel(extent.anySigned ? QStringLiteral("attention weight (signed, shared range)")
                                                       : QStringLiteral("attention weight (shared range)"));
        }
        setWrappedText(p.title, title);
        const Index query = rollout ? session_->rollout().query() : session_->selection().query;
        if (l.isSpatial(query)) {
            p.marker.place(l.col(query), l.row(query));
            p.marker.setVisible(true);
        } else {
            p.marker.setVisible(false);
        }
    }
    return panelsWithoutFinite;
}

QString CompareView::headerText(bool rollout) const {
    const Selection& sel = session_->selection();
    const TokenLayout& l = session_->layout();
    return rollout ? QStringLiteral("rollout of %1 (token %2) — image %3, up to layer %4")
                         .arg(tokenName(l, session_->rollout().query()))
                         .arg(session_->rollout().query())
                         .arg(sel.image)
                         .arg(QString::fromStdString(session_->layerInfo().name))
                   : QStringLiteral("query %1 (token %2) — image %3, layer %4, head %5")
                         .arg(tokenName(l, sel.query))
                         .arg(sel.query)
                         .arg(sel.image)
                         .arg(QString::fromStdString(session_->layerInfo().name))
                         .arg(sel.head);
}

void CompareView::rebuild() {
    if (!session_->isOpen()) {
        plot_->clearItems();
        plot_->clearPlottables();
        plot_->plotLayout()->clear();
        panels_.clear();
        builtFor_.clear();
        return;
    }
    std::vector<int> wanted = session_->selection().shown;
    if (diffA_ >= 0) wanted.push_back(-1);
    if (wanted != builtFor_ || !(session_->layout() == builtLayout_) || builtShared_ != sharedRange_) buildLayout();

    // With the local branch every panel is that paradigm's E_c = A + M_c (the same M_c for all).
    const auto branch = session_->branch().kernel();
    const bool rollout = session_->selection().rolloutShown();
    bool pending = false;
    const QString readError = shownRowsError(rollout, pending);
    // Colour bars go with their maps: a bar beside an empty panel would read as data.
    for (Panel& p : panels_) {
        p.map->setVisible(readError.isEmpty());
        if (p.scale) p.scale->setVisible(readError.isEmpty());
    }
    if (shared_) shared_->setVisible(readError.isEmpty());
    const SharedExtent extent = fillMaps(branch != nullptr);
    int paradigmPanels = 0;
    for (const Panel& p : panels_) paradigmPanels += p.paradigm >= 0;
    const int panelsWithoutFinite = colourPanels(extent, rollout, readError);
    if (shared_ && panelsWithoutFinite == paradigmPanels) shared_->setVisible(false);
    const QString branchError = rollout ? QString() : session_->branch().error();
    QString note = noteText(branch.get(), rollout, branchError);
    if (readError.isEmpty() && panelsWithoutFinite > 0)
        note += (note.isEmpty() ? QString() : QStringLiteral(" · ")) +
                QStringLiteral("%1 of %2 rows have no finite weight (no colour bar)")
                    .arg(panelsWithoutFinite)
                    .arg(paradigmPanels);
    if (!readError.isEmpty()) {
        for (Panel& p : panels_) p.marker.setVisible(false);
        note = wrapText(readError, 110);
    }
    setWrappedText(note_, note);
    note_->setTextColor(branchError.isEmpty() && (readError.isEmpty() || pending) ? QColor(Qt::black)
                                                                                  : QColor(180, 0, 0));
    setWrappedText(header_, headerText(rollout));
    fitAspect();
}

QString CompareView::paradigmPanel(Panel& p, const SharedExtent& extent, const QString& readError,
                                   ColorRange& range) const {
    const auto& ps = session_->paradigms();
    const TokenLayout& keys = session_->keyLayout();  // the row's weights (format.md 1c)
    const double lo = extent.lo, hi = extent.hi;
    const bool anySigned = extent.anySigned;
    bool diverging = false;
    QString title;
    const Paradigm& para = ps[std::size_t(p.paradigm)];
    const RowData& r = session_->mapContentRow(p.paradigm);
    diverging = sharedRange_ ? anySigned : ((!r.rollout && para.signedWeights()) || r.minFinite < 0 || r.withBranch);
    if (heldRange_) diverging = anySigned || heldRange_->lower < 0;
    range = sharedRange_ ? colorRangeFor(lo, hi, diverging) : colorRangeFor(r.colourMin, r.colourMax, diverging);
    if (heldRange_) range = heldColorRange(heldRange_->lower, heldRange_->upper, diverging);
    p.clipped =
        heldRange_ && readError.isEmpty() ? clippedValues(r.values.data(), r.values.size(), range) : ClippedValues{};
    title = QString::fromStdString(para.name);
    // "rollout" is in the header: a longer title per panel would widen the grid of panels.
    if (r.withBranch) title += QStringLiteral(" + M_c");
    if (!readError.isEmpty()) {
        // Nothing was computed: no weights, and no flag on rows that do not exist.
        title += QStringLiteral(" (not shown)");
    } else {
        for (int i = 0; i < keys.prefix; ++i)
            title += QStringLiteral("  %1 %2").arg(prefixName(i, keys.prefix), formatWeight(r.values[i]));
        if (r.status != RowStatus::Ok)
            title += QStringLiteral("  [FLAGGED: %1]").arg(QString::fromUtf8(toString(r.status)));
        else if (r.nonFiniteEntries > 0)
            title += QStringLiteral("  [FLAGGED: %1 non-finite weights]").arg(r.nonFiniteEntries);
    }
    range.diverging = diverging;
    return title;
}

QString CompareView::differencePanel(Panel& p, bool rollout, const QString& readError, ColorRange& range) const {
    const auto& ps = session_->paradigms();
    const TokenLayout& keys = session_->keyLayout();
    QString title;
    // E_a - E_b = A_a - A_b: the branch cancels, so the plain rows are used (or the rollouts).
    const RowData& a = rollout ? session_->mapContentRow(diffA_) : session_->attentionRow(diffA_);
    const RowData& b = rollout ? session_->mapContentRow(diffB_) : session_->attentionRow(diffB_);
    const RowVector diff = a.values - b.values;
    fillTokenGrid(p.map, session_->attentionLayout(), diff);
    double dlo = INFINITY, dhi = -INFINITY;
    for (Index j = 0; j < diff.size(); ++j)
        if (std::isfinite(diff[j])) {
            dlo = std::min(dlo, diff[j]);
            dhi = std::max(dhi, diff[j]);
        }
    range = colorRangeFor(std::isfinite(dlo) ? dlo : 0, std::isfinite(dhi) ? dhi : 0, true);
    title = QStringLiteral("%1 − %2").arg(QString::fromStdString(ps[std::size_t(diffA_)].name),
                                          QString::fromStdString(ps[std::size_t(diffB_)].name));
    if (!readError.isEmpty()) {
        title += QStringLiteral(" (not shown)");
    } else {
        for (int i = 0; i < keys.prefix; ++i)
            title += QStringLiteral("  %1 %2").arg(prefixName(i, keys.prefix), formatWeight(diff[i]));
        // The query's distance, by the analyze statistic's definitions (symmetric in a, b).
        if (!rollout && a.status == RowStatus::Ok && b.status == RowStatus::Ok) {
            DistanceReference reference;
            reference.name = ps[std::size_t(diffB_)].name;
            reference.matrix = b.values;
            const DistanceResult d = distanceToReference(Matrix(a.values), {}, reference);
            title += QStringLiteral("  · this query: total variation %1").arg(d.totalVariation.mean, 0, 'g', 3);
            if (d.jensenShannon.count > 0)
                title += QStringLiteral(", Jensen-Shannon %1 nats").arg(d.jensenShannon.mean, 0, 'g', 3);
        }
    }
    return title;
}

QString CompareView::shownNote() const { return note_ ? note_->text() : QString(); }

QString CompareView::noteText(const BranchKernel* branch, bool rollout, const QString& branchError) const {
    const Selection& sel = session_->selection();
    const QString what = rollout  ? QStringLiteral("rollout")
                         : branch ? QStringLiteral("E_c[q, k]")
                                  : QStringLiteral("A[q, k]");
    QString note = sharedRange_ ? QStringLiteral(
                                      "colour: %1, one range for all paradigm panels · query framed · "
                                      "prefix-token weights in the titles")
                                      .arg(what)
                                : QStringLiteral(
                                      "colour: %1, own range per panel (signed: diverging, white = 0) · "
                                      "query framed · prefix-token weights in the titles")
                                      .arg(what);
    if (rollout)  // one paragraph, wrapped: the note's width is the grid's minimum width
        note = wrapText(session_->rollout().description() + QStringLiteral(" · ") + note, 110);
    else if (branch)
        note = QStringLiteral("with local branch (%1): every panel is E_c = A + M_c of its paradigm\n")
                   .arg(branch->describe()) +
               note;
    else if (!branchError.isEmpty())
        note = branchErrorNote(branchError, session_->path()) + '\n' + note;
    else if (const QString status = session_->branch().status(); !status.isEmpty())
        note = QStringLiteral("A, %1\n").arg(status) + note;
    if (heldRange_) {
        ClippedValues clipped;
        for (const Panel& p : panels_) {
            clipped.below += p.clipped.below;
            clipped.above += p.clipped.above;
        }
        note += QStringLiteral(" · colour range held (all paradigm panels)") +
                clippedNote(clipped, QStringLiteral("panel weights"));
    }
    if (!rollout) {
        std::vector<Paradigm> shown;
        for (int i : session_->selection().shown) shown.push_back(session_->paradigms()[std::size_t(i)]);
        const int layer = sel.layer;
        if (const QString kernel = kernelAppliedNote(session_->info(), std::span(&layer, 1), shown); !kernel.isEmpty())
            note += '\n' + kernel;
    }
    return note;
}

void CompareView::onMousePress(QMouseEvent* e) {
    if (e->button() != Qt::LeftButton || !session_->isOpen()) return;
    for (Panel& p : panels_) {
        int x = 0, y = 0;
        if (cellAt(p.map, e->position(), &x, &y)) {
            session_->setQuery(builtLayout_.token(y, x));
            return;
        }
    }
}

void CompareView::onMouseMove(QMouseEvent* e) {
    if (!session_->isOpen()) return;
    for (Panel& p : panels_) {
        int x = 0, y = 0;
        if (cellAt(p.map, e->position(), &x, &y)) {
            const Index key = session_->attentionLayout().keyToken(y, x);
            const bool rollout = session_->selection().rolloutShown();
            const bool e = !rollout && p.paradigm >= 0 && session_->branch().kernel() != nullptr;
            Q_EMIT hoverText(
                QStringLiteral("%1: %2[%3, %4 %5] = %6")
                    .arg(unwrappedText(p.title).section(QStringLiteral("  "), 0, 0), rollout ? QStringLiteral("rollout")
                                                                                     : e     ? QStringLiteral("E_c")
                                                                                             : QStringLiteral("A"))
                    .arg(rollout ? session_->rollout().query() : session_->selection().query)
                    .arg(key)
                    .arg(tokenName(session_->keyLayout(), key) + keyGridNote(session_->attentionLayout()),
                         formatWeight(p.map->data()->cell(x, y))));
            return;
        }
    }
    Q_EMIT hoverText(QString());
}

}  // namespace attnlens::gui
