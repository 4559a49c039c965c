#include "views/dump_pair_view.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <cmath>

#include "document/session.h"
#include "plot/color_maps.h"
#include "plot/eliding_combo_box.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui {

DumpPairView::DumpPairView(Session* session, Session* second, QWidget* parent)
    : PlotView(session, parent), second_(second) {
    layerBox_ = new ElidingComboBox(this);
    layerBox_->setObjectName(QStringLiteral("secondLayer"));
    layerBox_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    layerBox_->setMinimumContentsLength(18);
    sameParadigmBox_ = new QCheckBox(QStringLiteral("Same paradigm as the left"), this);
    sameParadigmBox_->setObjectName(QStringLiteral("sameParadigm"));
    sameParadigmBox_->setToolTip(
        QStringLiteral("Off: the right map shows the attention its own layer's model used (the layer's "
                       "`attention`); on: the paradigm chosen for the left"));
    toolbar()->addWidget(new QLabel(QStringLiteral("Second dump's layer:"), this));
    toolbar()->addWidget(layerBox_);
    toolbar()->addSpacing(12);
    toolbar()->addWidget(sameParadigmBox_);
    toolbar()->addStretch(1);
    connect(layerBox_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (!syncing_ && i >= 0) setSecondLayer(layerBox_->itemData(i).toInt());
    });
    connect(sameParadigmBox_, &QCheckBox::toggled, this, [this](bool on) {
        if (!syncing_) setSameParadigm(on);
    });
    connect(plot_, &QCustomPlot::mousePress, this, &DumpPairView::onMousePress);
    connect(plot_, &QCustomPlot::mouseMove, this, &DumpPairView::onMouseMove);
    for (auto signal :
         {&Session::dumpChanged, &Session::selectionChanged, &Session::queryChanged, &Session::paradigmsChanged})
        connect(session, signal, this, &PlotView::invalidate);
    connect(second_, &Session::dumpChanged, this, [this]() {
        secondLayer_ = -1;
        syncControls();
        invalidate();
    });
    syncControls();
}

void DumpPairView::syncControls() {
    syncing_ = true;
    layerBox_->clear();
    layerBox_->addItem(QStringLiteral("match the left (same name, else position)"), -1);
    if (second_->isOpen())
        for (std::size_t i = 0; i < second_->info().layers.size(); ++i)
            layerBox_->addItem(QString::fromStdString(second_->info().layers[i].name), int(i));
    layerBox_->setCurrentIndex(std::max(0, layerBox_->findData(secondLayer_)));
    layerBox_->setEnabled(second_->isOpen());
    sameParadigmBox_->setChecked(sameParadigm_);
    sameParadigmBox_->setEnabled(second_->isOpen());
    syncing_ = false;
}

void DumpPairView::setSecondLayer(int layer) {
    secondLayer_ = second_->isOpen() && layer >= 0 && layer < int(second_->info().layers.size()) ? layer : -1;
    syncControls();
    invalidate();
}

void DumpPairView::setSameParadigm(bool on) {
    sameParadigm_ = on;
    syncControls();
    invalidate();
}

void DumpPairView::buildLayout() {
    const HeatmapPage page = resetHeatmapPage(plot_);
    header_ = page.header;
    note_ = page.note;
    QCPLayoutGrid* grid = page.grid;
    grid->setColumnSpacing(16);
    for (int i = 0; i < 2; ++i) {
        Panel& p = panels_[i];
        auto* cell = new QCPLayoutGrid;
        grid->addElement(0, i, cell);
        static_cast<HeatmapPanel&>(p) = addHeatmapPanel(plot_, cell, true, 10);
        p.layout = TokenLayout{-1, -1, -1};
    }
    built_ = true;
}

void DumpPairView::syncSecond() {
    if (!second_->isOpen() || !session_->isOpen()) return;
    const Selection& sel = session_->selection();
    const DumpInfo& info = second_->info();
    int layer = secondLayer_;
    if (layer < 0) {
        const std::string& name = session_->layerInfo().name;
        for (std::size_t i = 0; i < info.layers.size() && layer < 0; ++i)
            if (info.layers[i].name == name) layer = int(i);
        if (layer < 0) layer = std::min(sel.layer, int(info.layers.size()) - 1);
    }
    second_->setImage(std::min(sel.image, info.images - 1));
    second_->setLayer(layer);
    second_->setHead(std::min(sel.head, second_->layerInfo().heads - 1));
    // The query at the same place of the grid (grids of different sizes: the same relative place).
    const TokenLayout& a = session_->layout();
    const TokenLayout& b = second_->layout();
    if (a.isSpatial(sel.query) && b.gridH > 0 && b.gridW > 0)
        second_->setQuery(b.token(a.row(sel.query) * b.gridH / std::max(1, a.gridH),
                                  a.col(sel.query) * b.gridW / std::max(1, a.gridW)));
    else
        second_->setQuery(std::min<Index>(sel.query, std::max<Index>(0, std::min<Index>(b.prefix, b.tokens()) - 1)));
    if (sameParadigm_) {
        const int p = second_->paradigmIndex(session_->paradigms()[std::size_t(sel.paradigm)].name);
        if (p >= 0) second_->setParadigm(p);
    } else {
        second_->setParadigmFollowsLayer(true);
    }
}

void DumpPairView::fillPanel(Panel& p, const RowData& row, const Paradigm& paradigm) {
    fillTokenGrid(p.map, p.geometry, row.values);
    const Preferences& prefs = session_->preferences();
    const bool diverging = paradigm.signedWeights() || row.minFinite < 0 || row.withBranch;
    const ColorRange range = colorRangeFor(row.minFinite, row.maxFinite, diverging);
    const QCPColorGradient g = diverging ? divergingGradient(prefs.divergingMap, prefs.nanColor)
                                         : sequentialGradient(prefs.sequentialMap, prefs.nanColor);
    p.map->setGradient(g);
    p.map->setDataRange(QCPRange(range.lower, range.upper));
    p.scale->setGradient(g);
    p.scale->setDataRange(QCPRange(range.lower, range.upper));
    p.scale->axis()->setLabel(row.withBranch ? QStringLiteral("E_c[q,k]") : QStringLiteral("A[q,k]"));
}

bool DumpPairView::fitAspect() {
    bool changed = false;
    for (Panel& p : panels_) {
        if (!p.rect || p.layout.gridH <= 0) continue;
        changed |= fitGridMargins(p.rect, p.layout.gridH, p.layout.gridW, p.scale);
        changed |= alignVertically(p.scale, p.rect->margins());
    }
    return changed;
}

bool DumpPairView::hasFigure() const { return session_->isOpen() && second_->isOpen(); }

void DumpPairView::rebuild() {
    if (!built_) buildLayout();
    syncSecond();
    Session* sessions[2] = {session_, second_};
    for (int i = 0; i < 2; ++i) {
        Panel& p = panels_[i];
        Session* s = sessions[i];
        p.error.clear();
        QString title;
        if (!s->isOpen()) {
            p.error = i == 0 ? QStringLiteral("no dump open")
                             : QStringLiteral("File > Open second dump for comparison… to show a second dump here");
        } else if (i == 1 && session_->selection().image >= s->info().images) {
            p.error = QStringLiteral("image %1 is not in the second dump (it has %2)")
                          .arg(session_->selection().image)
                          .arg(s->info().images);
        } else if (const QString e = s->currentHeadError(); !e.isEmpty()) {
            p.error = e;
        }
        if (s->isOpen()) {
            const TokenLayout& l = s->layout();
            if (!(l == p.layout)) {
                setupGridAxes(p.rect, l.gridH, l.gridW, QString(), QString());
                sizeTokenGrid(p.map, l);
                p.layout = l;
            }
            p.geometry = s->attentionLayout();
            const Selection& sel = s->selection();
            const Paradigm& para = s->paradigms()[std::size_t(sel.paradigm)];
            title = QStringLiteral("%1 · %2 · %3")
                        .arg(QFileInfo(s->path()).fileName(), QString::fromStdString(s->layerInfo().name),
                             s->paradigmLabel(sel.paradigm));
            if (p.error.isEmpty()) {
                // The left map adds the local branch when it is on, as the token map does; the
                // right shows the plain attention of its dump.
                const RowData& row = i == 0 ? s->attentionOrBranchRow(sel.paradigm) : s->attentionRow(sel.paradigm);
                fillPanel(p, row, para);
                if (row.withBranch) title += QStringLiteral(" + M_c");
                for (int t = 0; t < p.geometry.keys.prefix; ++t)
                    title += QStringLiteral("  %1 %2").arg(prefixName(t, p.geometry.keys.prefix),
                                                           formatWeight(row.values[t]));
                if (row.status != RowStatus::Ok || row.nonFiniteEntries > 0)
                    title += QStringLiteral("  [row flagged: %1]").arg(QString::fromUtf8(toString(row.status)));
            }
            if (l.isSpatial(sel.query)) p.marker.place(l.col(sel.query), l.row(sel.query));
            p.marker.setVisible(p.error.isEmpty() && l.isSpatial(sel.query));
        } else {
            p.marker.setVisible(false);
        }
        p.map->setVisible(p.error.isEmpty());
        p.scale->setVisible(p.error.isEmpty());
        // No dump, no axes: a 0 ... 5 grid would read as one.
        p.rect->setVisible(s->isOpen());
        setWrappedText(p.title, p.error.isEmpty() ? title : title + QStringLiteral("\n") + wrapText(p.error, 60));
        p.title->setTextColor(p.error.isEmpty() ? QColor(Qt::black) : QColor(180, 0, 0));
    }
    if (session_->isOpen()) {
        const Selection& sel = session_->selection();
        setWrappedText(header_, QStringLiteral("query %1 — image %2, head %3 — two dumps side by side")
                                    .arg(tokenName(session_->layout(), sel.query))
                                    .arg(sel.image)
                                    .arg(sel.head));
    } else {
        setWrappedText(header_, QString());
    }
    setWrappedText(note_,
                   QStringLiteral("colour: A[q, k], own range per map (signed: diverging, white = 0) · query framed · "
                                  "the right dump follows the left's image, head and query position"));
    fitAspect();
}

void DumpPairView::onMousePress(QMouseEvent* e) {
    if (e->button() != Qt::LeftButton || !session_->isOpen()) return;
    for (int i = 0; i < 2; ++i) {
        const Panel& p = panels_[i];
        int x = 0, y = 0;
        if (!p.map || !p.map->visible() || !cellAt(p.map, e->position(), &x, &y)) continue;
        // A click on the right map moves the left query to the same relative grid place.
        const TokenLayout& a = session_->layout();
        if (i == 0 || (p.layout.gridH == a.gridH && p.layout.gridW == a.gridW))
            session_->setQuery(a.token(y, x));
        else
            session_->setQuery(
                a.token(y * a.gridH / std::max(1, p.layout.gridH), x * a.gridW / std::max(1, p.layout.gridW)));
        return;
    }
}

void DumpPairView::onMouseMove(QMouseEvent* e) {
    Session* sessions[2] = {session_, second_};
    for (int i = 0; i < 2; ++i) {
        const Panel& p = panels_[i];
        int x = 0, y = 0;
        if (!p.map || !p.map->visible() || !cellAt(p.map, e->position(), &x, &y)) continue;
        const Index key = p.geometry.keyToken(y, x);
        Q_EMIT hoverText(QStringLiteral("%1: A[%2, %3 %4] = %5")
                             .arg(QFileInfo(sessions[i]->path()).fileName())
                             .arg(sessions[i]->selection().query)
                             .arg(key)
                             .arg(tokenName(p.geometry.keys, key) + keyGridNote(p.geometry),
                                  formatWeight(p.map->data()->cell(x, y))));
        return;
    }
    Q_EMIT hoverText(QString());
}

}  // namespace attnlens::gui
