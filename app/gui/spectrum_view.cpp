#include "spectrum_view.h"

#include <QHBoxLayout>
#include <QLabel>
#include <algorithm>

#include "plot_helpers.h"
#include "session.h"

namespace attnlens::gui {

// ---- spectrum -----------------------------------------------------------------------------------

SpectrumView::SpectrumView(Session* session, QWidget* parent) : PlotView(session, parent) {
    help_ = new QLabel(
        QStringLiteral("Singular values of the selected head's attention matrix, one line per shown paradigm"), this);
    toolbar()->addWidget(help_);
    toolbar()->addStretch(1);
    connect(session, &Session::dumpChanged, this, &PlotView::invalidate);
    connect(session, &Session::selectionChanged, this, &PlotView::invalidate);
    connect(session, &Session::paradigmsChanged, this, &PlotView::invalidate);
    connect(session, &Session::spectraChanged, this, &PlotView::invalidate);
}

void SpectrumView::rebuild() {
    if (!session_->isOpen()) {
        resetWithTitle(plot_, QStringLiteral("no dump open"));
        return;
    }
    const Selection& sel = session_->selection();
    if (showReadError(plot_, session_, QStringLiteral("Singular value spectrum"))) {
        session_->requestSpectra(sel.shown);  // cancels spectra of the head shown before
        waiting_ = false;
        return;
    }
    auto* title = resetWithTitle(plot_, QString());
    // With the local branch: each paradigm's A and E_c = A + M_c, each with its own threshold
    // (the same tolerance rule, relative to its own sigma_max). A second, smaller title line says
    // whether the branch is included and which channel.
    const auto branch = session_->localBranch();
    const QString branchError = session_->localBranchError();
    const QString status = session_->localBranchStatus();
    // The title stays short: it shares its column with the plot, and a wider title would squeeze
    // the legend beside the plot out of a small window. The rest goes into a smaller second line.
    auto* subtitle = new QCPTextElement(plot_, QString(), QFont(plot_->font().family(), 9));
    plot_->plotLayout()->addElement(1, 0, subtitle);
    plot_->plotLayout()->setRowStretchFactor(1, 0.01);
    auto* body = new QCPLayoutGrid;
    plot_->plotLayout()->addElement(2, 0, body);
    QCPAxisRect* rect = addRect(plot_, 0, 0, body);
    QCPLegend* legend = addSideLegend(plot_, 0, 1, body);
    setLogAxis(rect->axis(QCPAxis::atLeft));
    rect->axis(QCPAxis::atBottom)->setLabel(QStringLiteral("index k (descending order)"));
    help_->setText(
        branch
            ? QStringLiteral("Singular values of A (thin) and of E_c = A + M_c (thick) of the selected head, "
                             "per shown paradigm")
            : QStringLiteral("Singular values of the selected head's attention matrix, one line per shown paradigm"));
    rect->axis(QCPAxis::atLeft)
        ->setLabel(branch ? QStringLiteral("singular value σ_k of A, of E_c = A + M_c")
                          : QStringLiteral("singular value σ_k of A (dimensionless)"));
    session_->requestSpectra(sel.shown);
    if (branch) session_->requestBranchSpectra(sel.shown);
    std::vector<double> all;
    int missing = 0;
    long long size = 0;
    auto draw = [&](const SpectrumResult& s, const QColor& c, const QString& name, double width,
                    Qt::PenStyle thresholdStyle) {
        size = std::max<long long>(size, s.size);
        QVector<double> x, y;
        for (std::size_t k = 0; k < s.singularValues.size(); ++k) {
            const double v = s.singularValues[k];
            x << double(k + 1);
            // Zero singular values have no place on a log axis: a gap, not a fake value.
            y << (v > 0 ? v : qQNaN());
            if (v > 0) all.push_back(v);
        }
        // With the branch the legend has twice the entries: the rank only (N is on the x axis,
        // effective ranks are in the matrix view).
        const QString label = branch ? QStringLiteral("%1: rank %2").arg(name).arg(s.rank)
                                     : QStringLiteral("%1: rank %2/%3, eff. %4")
                                           .arg(name)
                                           .arg(s.rank)
                                           .arg(s.size)
                                           .arg(QString::number(s.effectiveRank, 'f', 1));
        QCPGraph* g = addLine(rect, x, y, c, label, legend);
        g->setPen(QPen(c, width));
        if (s.tolerance > 0) {
            auto* line = new QCPItemStraightLine(plot_);
            line->setClipAxisRect(rect);
            for (auto* pt : {line->point1, line->point2})
                pt->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
            line->point1->setCoords(0, s.tolerance);
            line->point2->setCoords(1, s.tolerance);
            line->setPen(QPen(c, 1.0, thresholdStyle));
            all.push_back(s.tolerance);
        }
    };
    for (int p : sel.shown) {
        const QString name = QString::fromStdString(session_->paradigms()[std::size_t(p)].name);
        const QColor c = paradigmColor(p);
        if (const SpectrumResult* s = session_->spectrum(p, false))
            draw(*s, branch ? c.lighter(125) : c, branch ? name + QStringLiteral(" A") : name, branch ? 1.2 : 1.6,
                 Qt::DashLine);
        else
            ++missing;
        if (!branch) continue;
        if (const SpectrumResult* e = session_->branchSpectrum(p, false))
            draw(*e, c.darker(125), name + QStringLiteral(" A+M_c"), 2.4, Qt::DotLine);
        else
            ++missing;
    }
    if (branch) {
        // Which threshold line is which (the lines themselves are items, not legend entries).
        for (const auto& [style, text] : {std::pair{Qt::DashLine, QStringLiteral("rank threshold of A")},
                                          std::pair{Qt::DotLine, QStringLiteral("rank threshold of A + M_c")}}) {
            auto* key = new QCPGraph(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
            key->setPen(QPen(QColor(90, 90, 90), 1.0, style));
            key->setName(text);
            key->addToLegend(legend);
        }
    }
    waiting_ = missing > 0;
    // The floor keeps round-off singular values (1e-30) from squashing the informative range.
    double top = 0;
    for (double v : all) top = std::max(top, v);
    fitValueRange(rect->axis(QCPAxis::atLeft), all, true, top * 1e-18);
    rect->axis(QCPAxis::atBottom)->setRange(0, double(std::max<long long>(size, 2)) + 1);
    QString text = QStringLiteral("Singular value spectrum — image %1, layer %2, head %3")
                       .arg(sel.image)
                       .arg(QString::fromStdString(session_->layerInfo().name))
                       .arg(sel.head);
    title->setText(text);
    QString sub;
    if (branch)
        sub = QStringLiteral("with local branch (%1): A thin, E_c = A + M_c thick").arg(branch->describe());
    else if (!branchError.isEmpty())
        sub = branchErrorNote(branchError, session_->path(), 72) + QStringLiteral("\ndashed: rank threshold");
    else if (!status.isEmpty())
        sub = QStringLiteral("A, %1 · dashed: rank threshold").arg(status);
    else
        sub = QStringLiteral("dashed: rank threshold");
    if (missing) sub += QStringLiteral(" · computing %1 more…").arg(missing);
    subtitle->setText(sub);
    subtitle->setTextColor(branchError.isEmpty() ? QColor(Qt::black) : QColor(180, 0, 0));
}

}  // namespace attnlens::gui
