#include "magnitude_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "plot_helpers.h"
#include "session.h"

namespace attnlens::gui {

// ---- magnitude scaling ------------------------------------------------------------------------------

MagnitudeView::MagnitudeView(Session* session, QWidget* parent) : PlotView(session, parent) {
    magnitudeParadigm_ = new QComboBox(this);
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
}

void MagnitudeView::rebuild() {
    if (!session_->isOpen()) {
        resetWithTitle(plot_, QStringLiteral("no dump open"));
        return;
    }
    const Selection& sel = session_->selection();
    const MagnitudeOptions& opts = session_->preferences().analysis.magnitude;
    if (showReadError(plot_, session_, QStringLiteral("Magnitude scaling"))) return;
    auto* title = resetWithTitle(plot_, QString());
    // The plots and their legend side by side under a title that spans both.
    QCPLayoutGrid* body = addBody(plot_, 1);
    auto* grid = new QCPLayoutGrid;
    body->addElement(0, 0, grid);
    QCPAxisRect* dist = addRect(plot_, 0, 0, grid);
    QCPAxisRect* maxw = addRect(plot_, 0, 1, grid);
    QCPAxisRect* ent = addRect(plot_, 1, 0, grid);
    QCPAxisRect* ratio = addRect(plot_, 1, 1, grid);

    // (a) the row at several factors, keys in the order of their weight at a = 1.
    int shown = magnitudeParadigm_->currentData().isValid() ? magnitudeParadigm_->currentData().toInt() : -1;
    if (shown < 0) shown = sel.paradigm;
    auto fh = session_->currentHead(shown);
    const RowData& base = session_->row(shown);
    std::vector<Index> order(std::size_t(base.values.size()));
    std::iota(order.begin(), order.end(), Index(0));
    std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) {
        const double va = base.values[a], vb = base.values[b];
        if (std::isnan(va)) return false;
        if (std::isnan(vb)) return true;
        return va > vb;
    });
    const int shownKeys = int(std::min<Index>(48, base.values.size()));
    std::vector<double> factors;
    const auto all = opts.factors();
    for (std::size_t i = 0; i < all.size(); i += 2) factors.push_back(all[i]);
    Matrix scaled(Index(factors.size()), fh->keys());
    fh->scaledRows(sel.query, factors, scaled);
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
        ->setLabel(QStringLiteral("A[q, key] of %1").arg(QString::fromStdString(fh->paradigm().name)));

    // (b-d) curves per shown paradigm.
    QCPLegend* legend = addSideLegend(plot_, 0, 1, body);
    std::vector<double> mv, ev, rv;
    QStringList nonPositive;
    std::vector<std::pair<int, MagnitudeCurve>> curves;
    for (int p : sel.shown) {
        curves.emplace_back(p, magnitudeCurve(*session_->currentHead(p), sel.query, opts));
        bool positive = true;
        for (double v : curves.back().second.ratio) positive &= !(std::isfinite(v) && !(v > 0));
        if (!positive) nonPositive << QString::fromStdString(session_->paradigms()[std::size_t(p)].name);
    }
    for (const auto& [p, c] : curves) {
        const QColor col = paradigmColor(p);
        const QString name = QString::fromStdString(session_->paradigms()[std::size_t(p)].name);
        const QVector<double> x(c.factors.begin(), c.factors.end());
        addLine(maxw, x, QVector<double>(c.maxWeight.begin(), c.maxWeight.end()), col, name, legend, Qt::SolidLine,
                QCPScatterStyle::ssDisc);
        addLine(ent, x, QVector<double>(c.entropy.begin(), c.entropy.end()), col, name, nullptr, Qt::SolidLine,
                QCPScatterStyle::ssDisc);
        // A log axis cannot show a non-positive ratio (signed rows): those points are gaps, and
        // the paradigms concerned are named in the axis label.
        QVector<double> r;
        for (double v : c.ratio) r << (v > 0 ? v : qQNaN());
        addLine(ratio, x, r, col, name, nullptr, Qt::SolidLine, QCPScatterStyle::ssDisc);
        mv.insert(mv.end(), c.maxWeight.begin(), c.maxWeight.end());
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
    maxw->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("max weight"));
    ent->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("entropy (nats)"));
    // The axis label stays short enough to fit the plot's height; which paradigms are missing
    // because their ratio is <= 0 somewhere (no place on a log axis) goes under the x axis.
    ratio->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("A_qm / A_qn (top / median key)"));
    if (!nonPositive.isEmpty())
        ratio->axis(QCPAxis::atBottom)
            ->setLabel(QStringLiteral("query scale factor a\nratio \u2264 0 at some a (not drawn there): %1")
                           .arg(nonPositive.join(", ")));
    setWrappedText(title,
                   QStringLiteral("Magnitude scaling (MALA Fig. 2) — query %1 (token %2), image %3, layer %4, head %5")
                       .arg(tokenName(session_->layout(), sel.query))
                       .arg(sel.query)
                       .arg(sel.image)
                       .arg(QString::fromStdString(session_->layerInfo().name))
                       .arg(sel.head));
}

}  // namespace attnlens::gui
