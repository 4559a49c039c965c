#include "views/magnitude_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "attnlens/io/error.h"
#include "document/head_results.h"
#include "document/session.h"
#include "plot/eliding_combo_box.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui {

// ---- magnitude scaling ------------------------------------------------------------------------------

MagnitudeView::MagnitudeView(Session* session, QWidget* parent) : PlotView(session, parent) {
    magnitudeParadigm_ = new ElidingComboBox(this);
    magnitudeParadigm_->setObjectName(QStringLiteral("magnitudeParadigm"));
    toolbar()->addWidget(new QLabel(QStringLiteral("Distribution of:"), this));
    toolbar()->addWidget(magnitudeParadigm_);
    toolbar()->addStretch(1);
    auto sync = [this]() {
        QSignalBlocker block(magnitudeParadigm_);
        const int keep = magnitudeParadigm_->currentData().isValid() ? magnitudeParadigm_->currentData().toInt() : -1;
        magnitudeParadigm_->clear();
        magnitudeParadigm_->addItem(QStringLiteral("the selected paradigm"), -1);
        const auto& ps = session_->paradigms();
        for (std::size_t i = 0; i < ps.size(); ++i)
            magnitudeParadigm_->addItem(QString::fromStdString(ps[i].name), int(i));
        const int idx = magnitudeParadigm_->findData(keep);
        magnitudeParadigm_->setCurrentIndex(idx >= 0 ? idx : 0);
    };
    sync();
    connect(magnitudeParadigm_, &QComboBox::currentIndexChanged, this, &PlotView::invalidate);
    connect(session, &Session::paradigmsChanged, this, sync);
    connect(session, &Session::paradigmsChanged, this, &PlotView::invalidate);
    connect(session, &Session::dumpChanged, this, &PlotView::invalidate);
    connect(session, &Session::selectionChanged, this, &PlotView::invalidate);
    connect(session, &Session::queryChanged, this, &PlotView::invalidate);
    connect(session, &Session::headResultsChanged, this, &PlotView::invalidate);
}

MagnitudeKey MagnitudeView::curvesKey(int rowParadigm) const {
    const Selection& sel = session_->selection();
    MagnitudeKey k{session_->dumpEpoch(),
                   session_->currentKey(),
                   sel.query,
                   session_->paradigmKey(rowParadigm),
                   {},
                   session_->preferences().analysis.toJson()["magnitude"].dump()};
    for (int p : sel.shown) k.shown.push_back(session_->paradigmKey(p));
    return k;
}

void MagnitudeView::rebuild() {
    shown_.reset();
    if (!session_->isOpen()) {
        resetWithTitle(plot_, QStringLiteral("no dump open"));
        return;
    }
    const Selection& sel = session_->selection();
    if (showReadError(plot_, session_, QStringLiteral("Magnitude scaling"))) return;
    // (a) the row at several factors, keys in the order of their weight at a = 1.
    int shown = magnitudeParadigm_->currentData().isValid() ? magnitudeParadigm_->currentData().toInt() : -1;
    if (shown < 0) shown = sel.paradigm;
    const QString where = QStringLiteral("query %1 (token %2), image %3, layer %4, head %5")
                              .arg(tokenName(session_->layout(), sel.query))
                              .arg(sel.query)
                              .arg(sel.image)
                              .arg(QString::fromStdString(session_->layerInfo().name))
                              .arg(sel.head);
    auto& store = session_->headResults().magnitudeCurves();
    const MagnitudeKey key = curvesKey(shown);
    submitCurves(key, shown);
    const auto* found = store.find(key);  // a synchronous runner has delivered already
    waiting_ = found == nullptr && !store.failed(key);
    shown_ = found ? *found : nullptr;
    if (!found) {
        auto* title = resetWithTitle(plot_, QString());
        setWrappedText(title, QStringLiteral("Magnitude scaling (MALA Fig. 2) — ") + where);
        auto* state = addWrappedText(plot_, 10);
        const bool failed = store.failed(key);
        state->setTextColor(failed && !store.cancelled(key) ? QColor(180, 0, 0) : QColor(Qt::black));
        plot_->plotLayout()->addElement(1, 0, state);
        setWrappedText(state, !failed ? QStringLiteral("computing…")
                              : store.cancelled(key)
                                  ? QStringLiteral("Cancelled: computed again when the selection changes")
                                  : QStringLiteral("FAILED: ") + shortError(store.error(key), session_->path()));
        return;
    }
    const std::shared_ptr<const MagnitudeCurves> data = *found;
    auto* title = resetWithTitle(plot_, QString());
    // The plots and their legend side by side under a title that spans both.
    QCPLayoutGrid* body = addBody(plot_, 1);
    auto* grid = new QCPLayoutGrid;
    body->addElement(0, 0, grid);
    QCPAxisRect* dist = addRect(plot_, 0, 0, grid);
    QCPAxisRect* maxw = addRect(plot_, 0, 1, grid);
    QCPAxisRect* ent = addRect(plot_, 1, 0, grid);
    QCPAxisRect* ratio = addRect(plot_, 1, 1, grid);

    drawDistribution(dist, *data, shown);
    drawCurves(maxw, ent, ratio, addSideLegend(plot_, 0, 1, body), *data);
    setWrappedText(title, QStringLiteral("Magnitude scaling (MALA Fig. 2) — ") + where);
}

void MagnitudeView::submitCurves(const MagnitudeKey& key, int shown) {
    const Selection& sel = session_->selection();
    HeadResultsStore& store = session_->headResults();
    if (store.magnitudeCurves().find(key) || store.magnitudeCurves().failed(key) || store.computing(key)) return;
    MagnitudeJob job;
    try {
        job.rowHead = session_->currentHead(shown);
        for (int p : sel.shown) job.heads.emplace_back(p, session_->currentHead(p));
    } catch (const Error& e) {
        store.magnitudeCurves().fail(key, JobFailure{e.kind(), QString::fromStdString(e.what())});
        return;
    }
    job.rowParadigm = shown;
    job.query = sel.query;
    job.options = session_->preferences().analysis.magnitude;
    store.requestMagnitudeCurves(key, std::move(job));
}

void MagnitudeView::drawDistribution(QCPAxisRect* dist, const MagnitudeCurves& data, int shown) {
    const RowData& base = session_->attentionRow(shown);
    std::vector<Index> order(std::size_t(base.values.size()));
    std::iota(order.begin(), order.end(), Index(0));
    std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) {
        const double va = base.values[a], vb = base.values[b];
        if (std::isnan(va)) return false;
        if (std::isnan(vb)) return true;
        return va > vb;
    });
    const int shownKeys = int(std::min<Index>(48, base.values.size()));
    const std::vector<double>& factors = data.rowFactors;
    const Matrix& scaled = data.scaledRows;
    QCPLegend* distLegend = addLegend(plot_, dist, Qt::AlignTop | Qt::AlignRight);
    std::vector<double> distValues;
    QCPColorGradient fg;  // light to dark as a grows (no yellow: invisible on white)
    fg.clearColorStops();
    fg.setColorStopAt(0, QColor(120, 190, 240));
    fg.setColorStopAt(0.5, QColor(200, 60, 120));
    fg.setColorStopAt(1, QColor(40, 0, 60));
    for (std::size_t f = 0; f < factors.size(); ++f) {
        QVector<double> x, y;
        for (int r = 0; r < shownKeys; ++r) {
            x << r + 1;
            y << scaled(Index(f), order[std::size_t(r)]);
            distValues.push_back(y.back());
        }
        const QColor c =
            QColor::fromRgb(fg.color(double(f), QCPRange(0, double(std::max<std::size_t>(1, factors.size() - 1)))));
        addLine(dist, x, y, c, QStringLiteral("a = %1").arg(factors[f]), distLegend);
    }
    fitValueRange(dist->axis(QCPAxis::atLeft), distValues, false);
    dist->axis(QCPAxis::atBottom)->setRange(0.5, shownKeys + 0.5);
    dist->axis(QCPAxis::atBottom)->setLabel(QStringLiteral("key rank at a = 1 (top %1 keys)").arg(shownKeys));
    dist->axis(QCPAxis::atLeft)
        ->setLabel(QStringLiteral("A[q, key] of %1")
                       .arg(QString::fromStdString(session_->paradigms()[std::size_t(shown)].name)));
}

void MagnitudeView::drawCurves(QCPAxisRect* maxw, QCPAxisRect* ent, QCPAxisRect* ratio, QCPLegend* legend,
                               const MagnitudeCurves& data) {
    const MagnitudeOptions& opts = session_->preferences().analysis.magnitude;
    // (b-d) curves per shown paradigm.
    std::vector<double> mv, ev, rv;
    QStringList nonPositive;
    for (const auto& [p, c] : data.curves) {
        bool positive = true;
        for (double v : c.ratio) positive &= !(std::isfinite(v) && !(v > 0));
        if (!positive) nonPositive << QString::fromStdString(session_->paradigms()[std::size_t(p)].name);
    }
    for (const auto& [p, c] : data.curves) {
        const QColor col = paradigmColor(p);
        const QString name = QString::fromStdString(session_->paradigms()[std::size_t(p)].name);
        const QVector<double> x(c.factors.begin(), c.factors.end());
        addLine(maxw, x, QVector<double>(c.maxWeight.begin(), c.maxWeight.end()), col, name, legend, Qt::SolidLine,
                QCPScatterStyle::ssDisc);
        // The spread beside the max weight, in the same units: it does not turn back on signed rows.
        addLine(maxw, x, QVector<double>(c.spread.begin(), c.spread.end()), col, name, nullptr, Qt::DashLine,
                QCPScatterStyle::ssCircle);
        addLine(ent, x, QVector<double>(c.entropy.begin(), c.entropy.end()), col, name, nullptr, Qt::SolidLine,
                QCPScatterStyle::ssDisc);
        // A log axis cannot show a non-positive ratio (signed rows): those points are gaps, and
        // the paradigms concerned are named in the axis label.
        QVector<double> r;
        for (double v : c.ratio) r << (v > 0 ? v : qQNaN());
        addLine(ratio, x, r, col, name, nullptr, Qt::SolidLine, QCPScatterStyle::ssDisc);
        mv.insert(mv.end(), c.maxWeight.begin(), c.maxWeight.end());
        mv.insert(mv.end(), c.spread.begin(), c.spread.end());
        ev.insert(ev.end(), c.entropy.begin(), c.entropy.end());
        rv.insert(rv.end(), c.ratio.begin(), c.ratio.end());
    }
    for (QCPAxisRect* r : {maxw, ent, ratio}) {
        setLogAxis(r->axis(QCPAxis::atBottom), 2);
        r->axis(QCPAxis::atBottom)->setRange(std::exp2(opts.log2Min) / 1.2, std::exp2(opts.log2Max) * 1.2);
        r->axis(QCPAxis::atBottom)->setLabel(QStringLiteral("query scale factor a"));
    }
    fitValueRange(maxw->axis(QCPAxis::atLeft), mv, false);
    fitValueRange(ent->axis(QCPAxis::atLeft), ev, false);
    setLogAxis(ratio->axis(QCPAxis::atLeft));
    fitValueRange(ratio->axis(QCPAxis::atLeft), rv, true);
    maxw->axis(QCPAxis::atLeft)
        ->setLabel(QStringLiteral("max weight (solid)\nspread \u2016A \u2212 \u0100\u2016 / |\u03a3A| (dashed)"));
    ent->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("entropy of max(A, 0) (nats)"));
    // The axis label stays short enough to fit the plot's height; which paradigms are missing
    // because their ratio is <= 0 somewhere (no place on a log axis) goes under the x axis.
    ratio->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("A_qm / A_qn (top / median key)"));
    if (!nonPositive.isEmpty())
        ratio->axis(QCPAxis::atBottom)
            ->setLabel(QStringLiteral("query scale factor a\nratio \u2264 0 at some a (not drawn there): %1")
                           .arg(nonPositive.join(", ")));
}

}  // namespace attnlens::gui
