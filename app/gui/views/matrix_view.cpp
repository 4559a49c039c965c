#include "views/matrix_view.h"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <algorithm>
#include <cmath>

#include "attnlens/io/error.h"
#include "document/session.h"
#include "plot/color_maps.h"
#include "plot/elided_label.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui {

MatrixImage buildMatrixImage(const Eigen::Ref<const Eigen::Matrix<double, -1, -1, Eigen::RowMajor>>& a,
                             bool signedParadigm, bool logScale) {
    MatrixImage m;
    const Index n = a.rows();
    m.tokens = n;
    m.keys = a.cols();
    double lo = INFINITY, hi = -INFINITY, maxAbs = 0;
    for (Index i = 0; i < n; ++i) {
        bool flagged = false;
        for (Index j = 0; j < a.cols(); ++j) {
            const double v = a(i, j);
            if (std::isfinite(v)) {
                lo = std::min(lo, v);
                hi = std::max(hi, v);
                maxAbs = std::max(maxAbs, std::abs(v));
            } else {
                flagged = true;
            }
        }
        m.flaggedRows += flagged;
    }
    if (!std::isfinite(lo)) lo = hi = 0;
    m.diverging = signedParadigm || lo < 0;
    m.data = std::make_shared<QCPColorMapData>(int(a.cols()), int(n), QCPRange(0, double(a.cols() - 1)),
                                               QCPRange(0, double(n - 1)));
    std::function<double(double)> f = [](double v) { return v; };
    m.transform = QStringLiteral("linear");
    if (logScale && !m.diverging) {
        m.floor = hi > 0 ? hi * 1e-6 : 1e-300;
        const double fl = m.floor;
        f = [fl](double v) { return std::isfinite(v) ? std::log10(std::max(v, fl)) : v; };
        m.transform = QStringLiteral("log10 A");
    } else if (logScale) {
        const double t = maxAbs > 0 ? maxAbs * 1e-4 : 1.0;
        m.floor = t;
        f = [t](double v) { return std::isfinite(v) ? std::copysign(std::log10(1.0 + std::abs(v) / t), v) : v; };
        m.transform = QStringLiteral("symlog");
    }
    double tlo = INFINITY, thi = -INFINITY;
    for (Index i = 0; i < n; ++i)
        for (Index j = 0; j < a.cols(); ++j) {
            const double v = f(a(i, j));
            m.data->setCell(int(j), int(i), v);
            if (std::isfinite(v)) {
                tlo = std::min(tlo, v);
                thi = std::max(thi, v);
            }
        }
    if (!std::isfinite(tlo)) tlo = thi = 0;
    ColorRange r;
    if (m.transform == QStringLiteral("log10 A")) {
        r.lower = tlo;
        r.upper = thi > tlo ? thi : tlo + 1;
    } else {
        r = colorRangeFor(tlo, thi, m.diverging);
    }
    m.lower = r.lower;
    m.upper = r.upper;
    return m;
}

MatrixView::MatrixView(Session* session, QWidget* parent) : PlotView(session, parent) {
    logBox_ = new QCheckBox(QStringLiteral("Logarithmic colour scale"), this);
    logBox_->setObjectName(QStringLiteral("matrixLog"));
    toolbar()->addWidget(logBox_);
    windowBox_ = new QCheckBox(QStringLiteral("Order tokens by window"), this);
    windowBox_->setObjectName(QStringLiteral("matrixByWindow"));
    windowBox_->setToolTip(
        QStringLiteral("Window attention: rows and columns window by window, so that the windows "
                       "are the diagonal blocks (token order otherwise)"));
    windowBox_->setChecked(true);
    toolbar()->addWidget(windowBox_);
    connect(windowBox_, &QCheckBox::toggled, this, &MatrixView::setOrderByWindow);
    auto* hint = new ElidedLabel(QStringLiteral("  wheel: zoom · drag: pan · double-click: reset"), this);
    hint->setToolTip(hint->text().trimmed());
    toolbar()->addWidget(hint);
    toolbar()->addStretch(1);
    connect(logBox_, &QCheckBox::toggled, this, &MatrixView::setLogScale);

    // Title above a row holding the matrix and its colour bar, so that the title spans both.
    title_ = addWrappedText(plot_, 11, true);
    rect_ = plot_->axisRect();
    plot_->plotLayout()->take(rect_);
    plot_->plotLayout()->simplify();
    auto* body = new QCPLayoutGrid;
    body->setColumnSpacing(0);
    subtitle_ = addWrappedText(plot_, 9);
    plot_->plotLayout()->addElement(0, 0, title_);
    plot_->plotLayout()->addElement(1, 0, subtitle_);
    plot_->plotLayout()->addElement(2, 0, body);
    plot_->plotLayout()->setRowStretchFactor(0, 0.01);
    plot_->plotLayout()->setRowStretchFactor(1, 0.01);
    body->addElement(0, 0, rect_);
    rect_->axis(QCPAxis::atBottom)->setLabel(QStringLiteral("key token j"));
    rect_->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("query token i"));
    rect_->axis(QCPAxis::atLeft)->setRangeReversed(true);
    for (QCPAxis* ax : {rect_->axis(QCPAxis::atBottom), rect_->axis(QCPAxis::atLeft)}) ax->grid()->setVisible(false);
    map_ = new QCPColorMap(rect_->axis(QCPAxis::atBottom), rect_->axis(QCPAxis::atLeft));
    map_->setInterpolate(false);
    scale_ = new QCPColorScale(plot_);
    scale_->setType(QCPAxis::atRight);
    scale_->setBarWidth(14);
    body->addElement(0, 1, scale_);
    map_->setColorScale(scale_);
    highlight_ = new QCPItemRect(plot_);
    highlight_->setClipAxisRect(rect_);
    highlight_->setPen(QPen(QColor(0, 220, 255), 2.0));
    highlight_->setBrush(QColor(0, 220, 255, 40));
    plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);

    connect(plot_, &QCustomPlot::mousePress, this, &MatrixView::onMousePress);
    connect(plot_, &QCustomPlot::mouseMove, this, &MatrixView::onMouseMove);
    connect(plot_, &QCustomPlot::mouseDoubleClick, this, [this](QMouseEvent*) {
        userZoomed_ = false;
        fitAspect();
        replotQueued();
    });
    connect(plot_, &QCustomPlot::mouseWheel, this, [this](QWheelEvent*) { userZoomed_ = true; });
    connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
        if (e->buttons() & Qt::LeftButton) userZoomed_ = true;
    });
    connect(session, &Session::dumpChanged, this, [this]() {
        shownImage_.reset();
        shownKey_.reset();
        invalidate();
    });
    connect(session, &Session::headResultsChanged, this, &PlotView::invalidate);
    connect(session, &Session::selectionChanged, this, &PlotView::invalidate);
    connect(session, &Session::queryChanged, this, &PlotView::invalidate);
    connect(session, &Session::paradigmsChanged, this, &PlotView::invalidate);
    connect(session, &Session::spectraChanged, this, &PlotView::invalidate);
}

void MatrixView::setLogScale(bool on) {
    if (logBox_->isChecked() != on) logBox_->setChecked(on);
    if (on == log_) return;
    log_ = on;
    invalidate();
}

void MatrixView::setOrderByWindow(bool on) {
    if (windowBox_->isChecked() != on) windowBox_->setChecked(on);
    if (on == byWindow_) return;
    byWindow_ = on;
    invalidate();
}

const MatrixImage* MatrixView::shownImage() const { return shownKey_ ? shownImage_.get() : nullptr; }

QString MatrixView::titleText() const {
    const QString title = unwrappedText(title_), subtitle = unwrappedText(subtitle_);
    return subtitle.isEmpty() ? title : title + '\n' + subtitle;
}

MatrixKey MatrixView::currentKey() const {
    const Selection& s = session_->selection();
    const auto branch = session_->branch().kernel();
    return {session_->path().toStdString(),         session_->currentKey(),
            session_->paradigmKey(s.paradigm),      log_,
            branch ? branch->key() : std::string(), byWindow_ && session_->layerInfo().window};
}

bool MatrixView::fitAspect() {
    if (shownTokens_ <= 0 || rect_->outerRect().width() < 16 || rect_->outerRect().height() < 16) return false;
    // The axis rect gets the matrix's (square) aspect from its margins, so the axes sit on the
    // matrix's edges and the colour bar next to it. Until the user zooms or pans the whole matrix
    // is shown; afterwards the zoom is kept and only the y span follows the x span.
    // Square cells, except for an N x n matrix (spatial reduction, n << N), whose key columns are
    // widened until the matrix is at most twice as tall as wide.
    const bool rectangular = shownKeys_ != shownTokens_;
    const int shownWidth = rectangular ? int(std::max(shownKeys_, shownTokens_ / 2)) : int(shownKeys_);
    bool changed = fitGridMargins(rect_, int(shownTokens_), shownWidth, scale_, false);
    if (!userZoomed_) {
        rect_->axis(QCPAxis::atBottom)->setRange(-0.5, double(shownKeys_) - 0.5);
        rect_->axis(QCPAxis::atLeft)->setRange(-0.5, double(shownTokens_) - 0.5);
    }
    changed |= alignVertically(scale_, rect_->margins());
    if (!rectangular && userZoomed_ && rect_->width() >= 4 && rect_->height() >= 4) {
        QCPAxis* x = rect_->axis(QCPAxis::atBottom);
        QCPAxis* y = rect_->axis(QCPAxis::atLeft);
        const double wantY = x->range().size() * rect_->height() / rect_->width();
        if (std::abs(y->range().size() - wantY) > 1e-6 * wantY) {
            const double c = y->range().center();
            y->setRange(c - wantY / 2, c + wantY / 2);
            changed = true;
        }
    }
    return changed;
}

void MatrixView::rebuild() {
    if (!session_->isOpen()) {
        map_->setVisible(false);
        scale_->setVisible(false);  // no bar without its map
        highlight_->setVisible(false);
        setWrappedText(title_, QStringLiteral("no dump open"));
        setWrappedText(subtitle_, QString());
        return;
    }
    // On layers without windows the box is off and disabled (there is no window order to show);
    // the choice comes back on the next window layer.
    const bool windowed = session_->layerInfo().window.has_value();
    windowBox_->setEnabled(windowed);
    {
        const QSignalBlocker block(windowBox_);
        windowBox_->setChecked(windowed && byWindow_);
    }
    const Selection& sel = session_->selection();
    const MatrixKey key = currentKey();
    // With the local branch the matrix is E_c = A + M_c (computed on the worker with A).
    const auto branch = session_->branch().kernel();
    const QString where = QStringLiteral("%1 — image %2, layer %3, head %4")
                              .arg(session_->paradigmLabel(sel.paradigm) +
                                   (branch ? QStringLiteral(" + local branch: E_c = A + M_c") : QString()))
                              .arg(sel.image)
                              .arg(QString::fromStdString(session_->layerInfo().name))
                              .arg(sel.head);

    // An unreadable head (damaged chunk) or a failed job: the reason instead of a matrix.
    auto& images = session_->headResults().matrixImages();
    QString readError = session_->currentHeadError();
    if (readError.isEmpty() && images.cancelled(key))
        readError = QStringLiteral("Cancelled: computed again when the selection changes");
    else if (readError.isEmpty() && images.failed(key))
        readError = shortError(images.error(key), session_->path());
    if (!readError.isEmpty()) {
        showNotShown(where, readError);
        return;
    }
    if (!images.find(key) && session_->headResults().computing(key)) {
        waiting_ = true;  // already on its way; resubmitting would only restart it
        return;
    }
    if (!images.find(key) && !submitMatrix(key, branch)) {
        if (!images.failed(key)) {
            const LayerInfo& layer = session_->layerInfo();
            setWrappedText(title_, where);
            setWrappedText(subtitle_,
                           QStringLiteral("computing the %1 x %2 matrix…").arg(layer.tokens).arg(layer.keyTokens()));
            subtitle_->setTextColor(Qt::black);
            map_->setVisible(false);
            scale_->setVisible(false);
            highlight_->setVisible(false);
        }
        return;
    }
    const std::shared_ptr<const MatrixImage> image = *images.find(key);
    showImage(image, key, branch != nullptr);
    const SpectrumResult* s = session_->spectra().spectrum(sel.paradigm);
    const SpectrumResult* e = branch ? session_->spectra().branchSpectrum(sel.paradigm) : nullptr;
    QString rank = rankLine(*image, branch.get(), s, e);
    const QString branchError = session_->branch().error();
    if (!branchError.isEmpty())
        rank += '\n' + branchErrorNote(branchError, session_->path());
    else if (const QString status = session_->branch().status(); !branch && !status.isEmpty())
        rank += QStringLiteral(" · ") + status;
    if (image->flaggedRows > 0) rank += QStringLiteral(" · %1 flagged rows (NaN colour)").arg(image->flaggedRows);
    setWrappedText(title_, where);
    setWrappedText(subtitle_, rank);
    subtitle_->setTextColor(branchError.isEmpty() ? QColor(Qt::black) : QColor(180, 0, 0));
    // Exports and screenshots wait for the rank too.
    waiting_ = !s || (branch && !e);
    fitAspect();
}

void MatrixView::showNotShown(const QString& where, const QString& reason) {
    session_->headResults().discardMatrix();  // an older head's matrix must not land
    waiting_ = false;
    setWrappedText(title_, where + QStringLiteral(": NOT SHOWN"));
    setWrappedText(subtitle_, wrapText(reason, 110));
    subtitle_->setTextColor(QColor(180, 0, 0));
    map_->setVisible(false);
    scale_->setVisible(false);  // no bar without its map
    highlight_->setVisible(false);
    shownKey_.reset();
    shownImage_.reset();
    // The empty axes are the selected layer's, never those of the matrix shown before (another
    // layer's or another file's size and key grid).
    const LayerInfo& layer = session_->layerInfo();
    shownTokens_ = layer.tokens;
    shownKeys_ = layer.keyTokens();
    userZoomed_ = false;
    rect_->axis(QCPAxis::atBottom)->setLabel(QStringLiteral("key token j"));
    rect_->axis(QCPAxis::atLeft)->setLabel(QStringLiteral("query token i"));
    rect_->axis(QCPAxis::atBottom)->setRange(-0.5, double(shownKeys_) - 0.5);
    rect_->axis(QCPAxis::atLeft)->setRange(-0.5, double(shownTokens_) - 0.5);
}

bool MatrixView::submitMatrix(const MatrixKey& key, const std::shared_ptr<const BranchKernel>& branch) {
    const Selection& sel = session_->selection();
    const Paradigm& para = session_->paradigms()[std::size_t(sel.paradigm)];
    HeadResultsStore& store = session_->headResults();
    waiting_ = true;
    MatrixJob job;
    try {
        job.head = session_->currentHead(sel.paradigm);
    } catch (const Error& e) {
        store.matrixImages().fail(key, JobFailure{e.kind(), QString::fromStdString(e.what())});
        waiting_ = false;
        invalidate();
        return false;
    }
    job.branch = branch;
    job.signedWeights = para.signedWeights() || branch != nullptr;  // kernels have negative taps
    job.logScale = log_;
    // The windows' tokens one after the other (each in position order).
    if (byWindow_ && session_->layerInfo().window) {
        const WindowPartition& p = session_->layerInfo().window->partitionOf(sel.head);
        for (int w = 0; w < p.windows(); ++w)
            for (Index t : p.windowTokens(w)) job.order.push_back(t);
    }
    job.where = session_->layerWhere();
    store.requestMatrix(key, std::move(job));
    return store.matrixImages().find(key) != nullptr;  // a synchronous runner has delivered already
}

void MatrixView::showImage(const std::shared_ptr<const MatrixImage>& image, const MatrixKey& key, bool withBranch) {
    const Selection& sel = session_->selection();
    const MatrixImage& img = *image;
    const Preferences& prefs = session_->preferences();
    if (shownKey_ != key) {
        map_->setData(img.data.get(), true);
        const QCPColorGradient g = img.diverging ? divergingGradient(prefs.divergingMap, prefs.nanColor)
                                                 : sequentialGradient(prefs.sequentialMap, prefs.nanColor);
        map_->setGradient(g);
        map_->setDataRange(QCPRange(img.lower, img.upper));
        scale_->setGradient(g);
        scale_->setDataRange(QCPRange(img.lower, img.upper));
        const QString m = withBranch ? QStringLiteral("E_c") : QStringLiteral("A");
        QString label = img.transform == QStringLiteral("linear")
                            ? (withBranch ? QStringLiteral("E_c[i,j] = A[i,j] + M_c[i,j]") : QStringLiteral("A[i,j]"))
                        : img.transform == QStringLiteral("log10 A")
                            ? QStringLiteral("log10 %1[i,j] (floor %2)").arg(m, formatWeight(img.floor))
                            : QStringLiteral("sign(%1) log10(1 + |%1|/%2)").arg(m, formatWeight(img.floor));
        scale_->axis()->setLabel(label);
        if (shownTokens_ != img.tokens || shownKeys_ != img.keys) {
            rect_->axis(QCPAxis::atBottom)->setRange(-0.5, img.keys - 0.5);
            rect_->axis(QCPAxis::atLeft)->setRange(-0.5, img.tokens - 0.5);
            userZoomed_ = false;
        }
        shownTokens_ = img.tokens;
        shownKeys_ = img.keys;
        shownKey_ = key;
        shownImage_ = image;
    }
    map_->setVisible(true);
    scale_->setVisible(true);
    const double queryRow = double(img.displayOf(sel.query));
    highlight_->topLeft->setCoords(-0.5, queryRow - 0.5);
    highlight_->bottomRight->setCoords(img.keys - 0.5, queryRow + 0.5);
    const AttentionLayout geometry = session_->attentionLayout();
    rect_->axis(QCPAxis::atBottom)
        ->setLabel(
            !img.order.empty() ? QStringLiteral("key j, ordered by window")
            : geometry.reducedKeys()
                ? QStringLiteral("key j on the reduced %1 x %2 grid").arg(geometry.keys.gridH).arg(geometry.keys.gridW)
                : QStringLiteral("key token j"));
    rect_->axis(QCPAxis::atLeft)
        ->setLabel(img.order.empty() ? QStringLiteral("query token i") : QStringLiteral("query i, ordered by window"));
    highlight_->setVisible(true);
}

QString MatrixView::rankLine(const MatrixImage& img, const BranchKernel* branch, const SpectrumResult* s,
                             const SpectrumResult* e) const {
    // The rank line: A's alone, or E_c's beside A's (both with A's tolerance rule).
    QString rank;
    // An N x n matrix has at most min(N, n) singular values (its tolerance uses max(N, n)).
    const bool rectangular = img.keys != img.tokens;
    const long long rankCeiling = std::min(img.keys, img.tokens);
    if (branch) {
        const QString with = QStringLiteral("with local branch (%1)").arg(branch->describe());
        if (e && s) {
            rank = QStringLiteral("numerical rank %1 / %2 %3; %4 without · effective rank %5 vs %6")
                       .arg(e->rank)
                       .arg(rectangular ? rankCeiling : e->size)
                       .arg(with)
                       .arg(s->rank)
                       .arg(QString::number(e->effectiveRank, 'f', 1), QString::number(s->effectiveRank, 'f', 1));
        } else if (e) {
            rank = QStringLiteral("numerical rank %1 / %2 %3; without: computing…")
                       .arg(e->rank)
                       .arg(rectangular ? rankCeiling : e->size)
                       .arg(with);
        } else {
            rank = QStringLiteral("rank %1: computing…").arg(with);
        }
    } else if (s) {
        rank = QStringLiteral("numerical rank %1 / %2%3 (σ > %4) · effective rank %5")
                   .arg(s->rank)
                   .arg(rectangular ? rankCeiling : s->size)
                   .arg(rectangular ? QStringLiteral(" (N x n = %1 x %2)").arg(img.tokens).arg(img.keys) : QString())
                   .arg(formatWeight(s->tolerance))
                   .arg(QString::number(s->effectiveRank, 'f', 1));
        // Beside the rank, what the paradigm's algebra allows (FLatten Sec. 4.2): a linear head at its bound d is
        // as full as it can be, one far below it is not.
        if (s->bound > 0)
            rank += QStringLiteral(" · bound %1: %2").arg(s->bound).arg(QString::fromStdString(s->boundRule));
        if (!s->windowRanks.empty()) {
            const auto [lo, hi] = std::minmax_element(s->windowRanks.begin(), s->windowRanks.end());
            rank += QStringLiteral(" · %1 windows of %2 tokens, each of rank %3")
                        .arg(s->windowRanks.size())
                        .arg(session_->layerInfo().window->ruleOf(session_->selection().head).windowTokens())
                        .arg(*lo == *hi ? QString::number(*lo) : QStringLiteral("%1 to %2").arg(*lo).arg(*hi));
        }
    } else {
        rank = QStringLiteral("rank: computing…");
    }
    return rank;
}

void MatrixView::onMousePress(QMouseEvent* e) {
    if (e->button() != Qt::LeftButton || !map_->visible()) return;
    int j = 0, i = 0;
    const MatrixImage* img = shownImage();
    if (img && cellAt(map_, e->position(), &j, &i) && e->modifiers() & Qt::ControlModifier)
        session_->setQuery(img->tokenAt(i));
}

void MatrixView::onMouseMove(QMouseEvent* e) {
    int j = 0, i = 0;
    const MatrixImage* img = shownImage();
    if (img && map_->visible() && cellAt(map_, e->position(), &j, &i)) {
        const AttentionLayout g = session_->attentionLayout();
        const double value = map_->data()->cell(j, i);
        i = int(img->tokenAt(i));
        j = int(img->tokenAt(j));
        Q_EMIT hoverText(QStringLiteral("%1[%2 %3, %4 %5] → %6 (%7)")
                             .arg(session_->branch().kernel() ? QStringLiteral("E_c") : QStringLiteral("A"))
                             .arg(i)
                             .arg(tokenName(g.queries, i))
                             .arg(j)
                             .arg(tokenName(g.keys, j) + keyGridNote(g), formatWeight(value), scale_->axis()->label()));
    } else {
        Q_EMIT hoverText(QString());
    }
}

}  // namespace attnlens::gui
