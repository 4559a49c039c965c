#include "views/confused_pairs_view.h"

#include <QHeaderView>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <cmath>

#include "document/session.h"
#include "plot/color_maps.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui {

ConfusedPairsView::ConfusedPairsView(Session* session, QWidget* parent) : PlotView(session, parent) {
    table_ = new QTableWidget(0, 4, this);
    table_->setObjectName(QStringLiteral("confusedPairs"));
    table_->setHorizontalHeaderLabels({QStringLiteral("query p"), QStringLiteral("query q"),
                                       QStringLiteral("‖A_p − A_q‖"), QStringLiteral("‖Q_p − Q_q‖")});
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::SingleSelection);
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->verticalHeader()->setVisible(false);
    table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
    table_->horizontalHeader()->setStretchLastSection(true);
    table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 6);
    table_->setMinimumHeight(3 * (table_->fontMetrics().height() + 6));
    // The table above the plot, over the view's whole width: its four columns are read in full and
    // the pair's two maps get the width (a table beside them left both cut and small at 1024 px).
    // Exports draw the plot (title, conditions, the pair's rows).
    auto* split = new QSplitter(Qt::Vertical, this);
    // replaceWidget hands back the plot's old layout item, which the caller owns (LeakSanitizer).
    delete static_cast<QVBoxLayout*>(layout())->replaceWidget(plot_, split);
    split->addWidget(table_);
    split->addWidget(plot_);
    split->setStretchFactor(0, 0);
    split->setStretchFactor(1, 1);
    split->setChildrenCollapsible(false);
    split->setSizes({7 * (table_->fontMetrics().height() + 6), 600});
    connect(table_, &QTableWidget::currentCellChanged, this, [this](int row, int, int, int) {
        if (row >= 0 && row != shownPair_) showPair(row);
    });
    for (auto signal :
         {&Session::dumpChanged, &Session::selectionChanged, &Session::paradigmsChanged, &Session::headResultsChanged})
        connect(session, signal, this, &PlotView::invalidate);
}

ConfusedPairsKey ConfusedPairsView::key() const {
    const ConfusionOptions& c = session_->preferences().analysis.confusion;
    return {session_->path().toStdString(), session_->currentKey(),
            session_->paradigmKey(session_->selection().paradigm), c.tau, c.queryRelTolerance};
}

const ConfusedPairsView::Result* ConfusedPairsView::result() const {
    if (!session_->isOpen()) return nullptr;
    const auto* r = session_->headResults().confusedPairs().find(key());
    return r ? r->get() : nullptr;
}

QString ConfusedPairsView::errorText() const {
    if (!session_->isOpen()) return {};
    const auto& store = session_->headResults().confusedPairs();
    const ConfusedPairsKey k = key();
    if (store.cancelled(k)) return QStringLiteral("Cancelled: computed again when the selection changes");
    return shortError(store.error(k), session_->path());
}

void ConfusedPairsView::showPair(int index) {
    shownPair_ = index;
    const Result* r = result();
    if (r && index >= 0 && index < int(r->list.pairs.size())) session_->setQuery(r->list.pairs[std::size_t(index)].p);
    invalidate();
}

void ConfusedPairsView::fillTable(const Result& r) {
    QSignalBlocker block(table_);
    table_->setRowCount(int(r.list.pairs.size()));
    const TokenLayout& l = session_->layout();
    for (int i = 0; i < int(r.list.pairs.size()); ++i) {
        const ConfusedPair& p = r.list.pairs[std::size_t(i)];
        const QStringList cells{QStringLiteral("%1 %2").arg(p.p).arg(tokenName(l, p.p)),
                                QStringLiteral("%1 %2").arg(p.q).arg(tokenName(l, p.q)),
                                QString::number(p.rowDistance, 'e', 3), QString::number(p.queryDistance, 'g', 4)};
        for (int c = 0; c < 4; ++c) table_->setItem(i, c, new QTableWidgetItem(cells[c]));
    }
    table_->resizeColumnsToContents();
    if (shownPair_ >= 0 && shownPair_ < table_->rowCount()) table_->selectRow(shownPair_);
}

bool ConfusedPairsView::fitAspect() {
    bool changed = false;
    for (HeatmapPanel& p : panels_) {
        if (!p.rect || builtLayout_.gridH <= 0 || !p.map->visible()) continue;
        changed |= fitGridMargins(p.rect, builtLayout_.gridH, builtLayout_.gridW, p.scale);
        if (p.scale) changed |= alignVertically(p.scale, p.rect->margins());
    }
    return changed;
}

void ConfusedPairsView::rebuild() {
    panels_[0] = panels_[1] = HeatmapPanel{};
    builtLayout_ = TokenLayout{-1, -1, -1};
    const QString what = QStringLiteral("Confused query pairs");
    if (!session_->isOpen()) {
        resetWithTitle(plot_, QString());
        table_->setRowCount(0);
        waiting_ = false;
        return;
    }
    if (showReadError(plot_, session_, what)) {
        table_->setRowCount(0);
        waiting_ = false;
        return;
    }
    const ConfusedPairsKey k = key();
    const Selection& sel = session_->selection();
    const Paradigm& paradigm = session_->paradigms()[std::size_t(sel.paradigm)];
    submitPairs(k);
    const QString error = errorText();
    const Result* r = result();
    auto* title = resetWithTitle(plot_, QString());
    waiting_ = !r && error.isEmpty();
    const QString head = QStringLiteral("%1 — image %2, layer %3, head %4")
                             .arg(QString::fromStdString(paradigm.name))
                             .arg(sel.image)
                             .arg(QString::fromStdString(session_->layerInfo().name))
                             .arg(sel.head);
    if (!r) {
        table_->setRowCount(0);
        tableKey_.reset();
        setWrappedText(title, what + QStringLiteral(": ") + head);
        auto* state = addWrappedText(plot_, 10);
        state->setTextColor(error.isEmpty() ? QColor(Qt::black) : QColor(180, 0, 0));
        plot_->plotLayout()->addElement(1, 0, state);
        setWrappedText(state, error.isEmpty() ? QStringLiteral("computing…")
                              : session_->headResults().confusedPairs().cancelled(key())
                                  ? error
                                  : QStringLiteral("FAILED: ") + error);
        return;
    }
    if (tableKey_ != k) {
        shownPair_ = r->list.pairs.empty() ? -1 : 0;  // another head: its closest pair
        tableKey_ = k;
        fillTable(*r);
    }
    const InjectivityConditions& c = r->conditions;
    setWrappedText(title, QStringLiteral("%1: %2 pairs with ‖A_p − A_q‖₂ < τ = %3 (closest %4 listed) — %5")
                              .arg(what)
                              .arg(r->list.counts.confusedPairs)
                              .arg(formatWeight(r->list.counts.tau))
                              .arg(r->list.pairs.size())
                              .arg(head));
    auto* conditions = addWrappedText(plot_, 9);
    plot_->plotLayout()->addElement(1, 0, conditions);
    plot_->plotLayout()->setRowStretchFactor(1, 0.01);
    setWrappedText(conditions,
                   QStringLiteral("Injectivity (InLine App. A): rank %1 = %2 of d = %3, rank [%1, 1] = %4 of %5 — %6")
                       .arg(paradigm.usesKernel() ? QStringLiteral("φ(K)") : QStringLiteral("K"))
                       .arg(c.rankFeatures)
                       .arg(c.features)
                       .arg(c.rankWithOnes)
                       .arg(c.features + 1)
                       .arg(QString::fromStdString(c.proposition)));
    conditions->setTextColor(c.conditionsMet ? QColor(Qt::black) : QColor(150, 60, 0));
    if (shownPair_ < 0 || shownPair_ >= int(r->list.pairs.size())) return;

    drawPair(r->list.pairs[std::size_t(shownPair_)]);
    fitAspect();
}

void ConfusedPairsView::submitPairs(const ConfusedPairsKey& k) {
    const Selection& sel = session_->selection();
    HeadResultsStore& store = session_->headResults();
    if (store.confusedPairs().find(k) || store.confusedPairs().failed(k) || store.computing(k)) return;
    ConfusedPairsJob job;
    try {
        job.head = session_->currentHead(sel.paradigm);
        job.activations = session_->activations(session_->currentKey());
    } catch (const Error& e) {
        store.confusedPairs().fail(k, JobFailure{e.kind(), QString::fromStdString(e.what())});
        return;
    }
    job.options = session_->preferences().analysis.confusion;
    job.listed = std::size_t(kListedPairs);
    store.requestConfusedPairs(k, std::move(job));
}

void ConfusedPairsView::drawPair(const ConfusedPair& pair) {
    const Selection& sel = session_->selection();
    const Paradigm& paradigm = session_->paradigms()[std::size_t(sel.paradigm)];
    // The pair's two rows on the grid, one colour range, both queries framed on both maps.
    const auto headPtr = session_->currentHead(sel.paradigm);
    const TokenLayout& l = session_->layout();
    builtLayout_ = l;
    auto* body = addBody(plot_, 2);
    RowVector rows[2] = {RowVector(headPtr->keys()), RowVector(headPtr->keys())};
    headPtr->row(pair.p, rows[0]);
    headPtr->row(pair.q, rows[1]);
    double lo = INFINITY, hi = -INFINITY;
    for (const RowVector& row : rows)
        for (Index j = 0; j < row.size(); ++j)
            if (std::isfinite(row[j])) {
                lo = std::min(lo, row[j]);
                hi = std::max(hi, row[j]);
            }
    const Preferences& prefs = session_->preferences();
    const bool diverging = paradigm.signedWeights() || lo < 0;
    const ColorRange range = colorRangeFor(std::isfinite(lo) ? lo : 0, std::isfinite(hi) ? hi : 1, diverging);
    const QCPColorGradient g = diverging ? divergingGradient(prefs.divergingMap, prefs.nanColor)
                                         : sequentialGradient(prefs.sequentialMap, prefs.nanColor);
    const Index queries[2] = {pair.p, pair.q};
    for (int i = 0; i < 2; ++i) {
        auto* cell = new QCPLayoutGrid;
        body->addElement(0, i, cell);
        HeatmapPanel& p = panels_[i];
        p = addHeatmapPanel(plot_, cell, true, 10);
        setupGridAxes(p.rect, l.gridH, l.gridW, QString(), QString());
        sizeTokenGrid(p.map, l);
        fillTokenGrid(p.map, session_->attentionLayout(), rows[i]);
        p.map->setGradient(g);
        p.map->setDataRange(QCPRange(range.lower, range.upper));
        p.scale->setGradient(g);
        p.scale->setDataRange(QCPRange(range.lower, range.upper));
        p.scale->axis()->setLabel(QStringLiteral("A[q,k] (both rows)"));
        setWrappedText(p.title, QStringLiteral("row of query %1 %2").arg(queries[i]).arg(tokenName(l, queries[i])));
        // Both queries framed: the row's own query and its partner.
        if (l.isSpatial(queries[i])) p.marker.place(l.col(queries[i]), l.row(queries[i]));
        p.marker.setVisible(l.isSpatial(queries[i]));
        CellMarker partner;
        partner.create(plot_, p.rect);
        const Index other = queries[1 - i];
        if (l.isSpatial(other)) partner.place(l.col(other), l.row(other), 0.3, 0.3);
        partner.setVisible(l.isSpatial(other));
    }
    auto* note = addWrappedText(plot_, 9);
    plot_->plotLayout()->addElement(3, 0, note);
    plot_->plotLayout()->setRowStretchFactor(3, 0.01);
    setWrappedText(note, QStringLiteral("‖A_p − A_q‖₂ = %1 · ‖Q_p − Q_q‖₂ = %2 · grid distance %3 · "
                                        "large frame: the row's query, small frame: its partner")
                             .arg(QString::number(pair.rowDistance, 'e', 3))
                             .arg(QString::number(pair.queryDistance, 'g', 4))
                             .arg(l.isSpatial(pair.p) && l.isSpatial(pair.q)
                                      ? QString::number(std::hypot(double(l.row(pair.p) - l.row(pair.q)),
                                                                   double(l.col(pair.p) - l.col(pair.q))),
                                                        'g', 4)
                                      : QStringLiteral("—")));
}

}  // namespace attnlens::gui
