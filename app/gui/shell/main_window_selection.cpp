// MainWindow's selection dock: its form (image, layer, head, query, paradigm, rollout, local branch,
// the paradigms shown, what the statistics cover), its signals to the Session, and the widgets
// following the Session (main_window.h).
#include "shell/main_window.h"

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QShortcut>
#include <QSpinBox>
#include <QStandardPaths>
#include <QStatusBar>
#include <QStyle>
#include <QTabWidget>
#include <QTextBrowser>
#include <QTimer>
#include <QToolButton>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "attnlens/analysis/report.h"
#include "attnlens/io/atomic_file.h"
#include "attnlens/io/error.h"
#include "document/example_dump.h"
#include "document/session.h"
#include "plot/elided_label.h"
#include "plot/eliding_combo_box.h"
#include "shell/export_dialog.h"
#include "shell/preferences_dialog.h"
#include "shell/session_file.h"
#include "views/compare_view.h"
#include "views/confused_pairs_view.h"
#include "views/dump_pair_view.h"
#include "views/head_overview_view.h"
#include "views/locality_view.h"
#include "views/matrix_view.h"
#include "views/stats_views.h"
#include "views/sweep_view.h"
#include "views/token_map_view.h"
#include "views/view_registry.h"

namespace attnlens::gui {
namespace {

// Item data of the "Statistics over" box beside model names (which cannot start with \x01).
constexpr const char* kFollowModel = "\x01follow";
constexpr const char* kChosenLayers = "\x01layers";

// A paradigm's entry in the paradigm box: the layer's own paradigm is marked.
QString paradigmItemText(const Session& session, int i) {
    const QString name = QString::fromStdString(session.paradigms()[std::size_t(i)].name);
    return session.isOpen() && i == session.layerParadigm() ? name + QStringLiteral("  (this layer's model)") : name;
}

}  // namespace

QWidget* MainWindow::createSelectionForm() {
    auto* w = new QWidget;
    auto* form = new QFormLayout(w);
    image_ = new QSpinBox;
    image_->setObjectName(QStringLiteral("image"));
    imageLabel_ = new QLabel;
    model_ = new ElidingComboBox;
    model_->setObjectName(QStringLiteral("model"));
    model_->setToolTip(
        QStringLiteral("The model the selected layer belongs to (layer names <model>.<block>); "
                       "PgUp / PgDn stay within it"));
    layer_ = new ElidingComboBox;
    layer_->setObjectName(QStringLiteral("layer"));
    layer_->setToolTip(QStringLiteral("Layer: name and the attention its model used (the `attention` attribute)"));
    layerAttention_ = new QLabel;
    layerAttention_->setObjectName(QStringLiteral("layerAttention"));
    layerAttention_->setWordWrap(true);
    statsModel_ = new ElidingComboBox;
    statsModel_->setObjectName(QStringLiteral("statsModel"));
    statsModel_->setToolTip(
        QStringLiteral("Which layers the per-layer statistics (local mass, confusion, "
                       "entropy) cover: one model's, every layer of the dump, or layers you choose"));
    head_ = new QSpinBox;
    head_->setObjectName(QStringLiteral("head"));
    query_ = new QSpinBox;
    query_->setObjectName(QStringLiteral("query"));
    queryName_ = new QLabel;
    paradigm_ = new ElidingComboBox;
    paradigm_->setObjectName(QStringLiteral("paradigm"));
    shown_ = new QListWidget;
    shown_->setObjectName(QStringLiteral("shownParadigms"));
    form->addRow(QStringLiteral("Image"), image_);
    form->addRow(QString(), imageLabel_);
    form->addRow(QStringLiteral("Model"), model_);
    form->addRow(QStringLiteral("Layer"), layer_);
    form->addRow(QString(), layerAttention_);
    form->addRow(QStringLiteral("Head"), head_);
    form->addRow(QStringLiteral("Query token"), query_);
    form->addRow(QString(), queryName_);
    form->addRow(QStringLiteral("Paradigm"), paradigm_);
    addRolloutControls(form);
    branch_ = new QCheckBox(QStringLiteral("With local branch"));
    branch_->setObjectName(QStringLiteral("localBranch"));
    branchChannel_ = new ElidingComboBox;
    branchChannel_->setObjectName(QStringLiteral("localBranchChannel"));
    branchChannel_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    branchChannel_->setMinimumContentsLength(12);
    form->addRow(branch_);
    form->addRow(QStringLiteral("Branch channel"), branchChannel_);
    form->addRow(new QLabel(QStringLiteral("Paradigms shown (comparison, statistics):")));
    form->addRow(shown_);
    form->addRow(QStringLiteral("Statistics over"), statsModel_);
    return w;
}

void MainWindow::addRolloutControls(QFormLayout* form) {
    mapContent_ = new ElidingComboBox;
    mapContent_->setObjectName(QStringLiteral("mapContent"));
    mapContent_->addItem(QStringLiteral("attention of the head"), QString::fromUtf8(toString(MapContent::Attention)));
    mapContent_->addItem(QStringLiteral("rollout of the query"),
                         QString::fromUtf8(toString(MapContent::RolloutOfQuery)));
    mapContent_->addItem(QStringLiteral("rollout of CLS"), QString::fromUtf8(toString(MapContent::RolloutOfCls)));
    mapContent_->setToolTip(
        QStringLiteral("What the token map and the paradigm comparison show: the selected head's attention row, or "
                       "the attention rollout (Abnar and Zuidema 2020) of the query or of CLS through the layer's "
                       "model up to the selected layer, all heads fused (R)"));
    rolloutFusion_ = new ElidingComboBox;
    rolloutFusion_->setObjectName(QStringLiteral("rolloutFusion"));
    for (HeadFusion f : {HeadFusion::Mean, HeadFusion::Max, HeadFusion::Min})
        rolloutFusion_->addItem(QString::fromUtf8(toString(f)));
    rolloutFusion_->setToolTip(QStringLiteral("How the rollout fuses a layer's heads"));
    rolloutWeights_ = new ElidingComboBox;
    rolloutWeights_->setObjectName(QStringLiteral("rolloutWeights"));
    for (RolloutWeights w : {RolloutWeights::Clipped, RolloutWeights::Signed, RolloutWeights::Absolute})
        rolloutWeights_->addItem(QString::fromUtf8(toString(w)));
    rolloutWeights_->setToolTip(
        QStringLiteral("InLine and MALA rows hold negative weights: clipped = max(A, 0) with rows renormalised "
                       "(default), signed = A as it is, absolute = |A| renormalised"));
    // Sized by a few characters, not by their longest item, so that the dock stays as narrow as
    // without them (the window must fit 1024 px with the comparison's panels).
    for (auto [box, chars] :
         {std::pair{mapContent_, 14}, std::pair{rolloutFusion_, 4}, std::pair{rolloutWeights_, 6}}) {
        box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
        box->setMinimumContentsLength(chars);
    }
    rolloutResidual_ = new QDoubleSpinBox;
    rolloutResidual_->setObjectName(QStringLiteral("rolloutResidual"));
    rolloutResidual_->setRange(0, 1);
    rolloutResidual_->setSingleStep(0.05);
    rolloutResidual_->setDecimals(2);
    rolloutResidual_->setPrefix(QStringLiteral("w "));
    rolloutResidual_->setToolTip(QStringLiteral("Residual w: each layer's R = (1 - w) F + w I, rows renormalised"));
    rolloutDiscard_ = new QDoubleSpinBox;
    rolloutDiscard_->setObjectName(QStringLiteral("rolloutDiscard"));
    rolloutDiscard_->setRange(0, 0.99);
    rolloutDiscard_->setSingleStep(0.05);
    rolloutDiscard_->setDecimals(2);
    rolloutDiscard_->setPrefix(QStringLiteral("discard "));
    rolloutDiscard_->setToolTip(
        QStringLiteral("Discard ratio: this fraction of each fused layer matrix's lowest entries set to 0 (forms the "
                       "N x N matrix)"));
    auto* rolloutRow1 = new QHBoxLayout;
    rolloutRow1->setContentsMargins(0, 0, 0, 0);
    rolloutRow1->addWidget(rolloutFusion_);
    rolloutRow1->addWidget(rolloutWeights_);
    auto* rolloutRow2 = new QHBoxLayout;
    rolloutRow2->setContentsMargins(0, 0, 0, 0);
    rolloutRow2->addWidget(rolloutResidual_);
    rolloutRow2->addWidget(rolloutDiscard_);
    form->addRow(QStringLiteral("Maps show"), mapContent_);
    form->addRow(QStringLiteral("Rollout"), rolloutRow1);
    form->addRow(QString(), rolloutRow2);
}

void MainWindow::connectSelectionControls() {
    connect(image_, &QSpinBox::valueChanged, this, [this](int v) {
        if (!syncing_) session_->setImage(v);
    });
    connect(layer_, &QComboBox::currentIndexChanged, this, [this](int v) {
        if (!syncing_ && v >= 0) session_->setLayer(v);
    });
    connect(model_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (syncing_ || i < 0) return;
        const std::vector<int> layers = session_->modelLayers(model_->itemData(i).toString().toStdString());
        if (!layers.empty()) session_->setLayer(layers.front());
    });
    connect(statsModel_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (syncing_ || i < 0) return;
        const QString data = statsModel_->itemData(i).toString();
        if (data == QLatin1String(kChosenLayers)) {
            chooseStatsLayers();
            return;
        }
        try {
            if (data == QLatin1String(kFollowModel))
                session_->statistics().setModelFollowsLayer(true);
            else
                session_->statistics().setModel(data.toStdString());
        } catch (const Error& e) {
            addIssue(Issue{IssueKind::Error, QString::fromStdString(e.what())});
        }
    });
    // Choosing "N chosen layers (change…)" again reopens the list (the index does not change).
    connect(statsModel_, &QComboBox::activated, this, [this](int i) {
        if (statsModel_->itemData(i).toString() == QLatin1String(kChosenLayers)) chooseStatsLayers();
    });
    connect(head_, &QSpinBox::valueChanged, this, [this](int v) {
        if (!syncing_) session_->setHead(v);
    });
    connect(query_, &QSpinBox::valueChanged, this, [this](int v) {
        if (!syncing_) session_->setQuery(v);
    });
    connect(paradigm_, &QComboBox::currentIndexChanged, this, [this](int v) {
        if (!syncing_ && v >= 0) session_->setParadigm(v);
    });
    connect(mapContent_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (syncing_ || i < 0) return;
        session_->setMapContent(parseMapContent(mapContent_->itemData(i).toString().toStdString()));
    });
    for (QComboBox* box : {rolloutFusion_, rolloutWeights_})
        connect(box, &QComboBox::currentIndexChanged, this, [this]() { applyRolloutOptions(); });
    for (QDoubleSpinBox* box : {rolloutResidual_, rolloutDiscard_})
        connect(box, &QDoubleSpinBox::valueChanged, this, [this]() { applyRolloutOptions(); });
    connect(branch_, &QCheckBox::toggled, this, [this](bool on) {
        if (!syncing_) session_->setLocalBranch(on);
    });
    connect(branchChannel_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (!syncing_ && i >= 0) session_->setLocalChannel(branchChannel_->itemData(i).toInt());
    });
    connect(shown_, &QListWidget::itemChanged, this, [this]() {
        if (syncing_) return;
        std::vector<int> shown;
        for (int i = 0; i < shown_->count(); ++i)
            if (shown_->item(i)->checkState() == Qt::Checked) shown.push_back(i);
        session_->setShown(shown);
    });
}

// ---- selection widgets ----------------------------------------------------------------------------

void MainWindow::syncParadigmWidgets() {
    syncing_ = true;
    const auto& ps = session_->paradigms();
    paradigm_->clear();
    shown_->clear();
    for (std::size_t i = 0; i < ps.size(); ++i) {
        const QString name = QString::fromStdString(ps[i].name);
        const QString tip = QString::fromStdString(ps[i].toJson().dump(1));
        paradigm_->addItem(paradigmItemText(*session_, int(i)));
        paradigm_->setItemData(int(i), tip, Qt::ToolTipRole);
        auto* item = new QListWidgetItem(name, shown_);
        item->setToolTip(tip);
        // The paradigm's plot colour as a swatch: coloured text is unreadable for the light
        // colours of the palette on a light background.
        QPixmap swatch(12, 12);
        swatch.fill(paradigmColor(int(i)));
        {
            QPainter frame(&swatch);
            frame.setPen(QColor(60, 60, 60));
            frame.drawRect(0, 0, 11, 11);
        }
        item->setIcon(QIcon(swatch));
        item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
        const auto& s = session_->selection().shown;
        item->setCheckState(std::find(s.begin(), s.end(), int(i)) != s.end() ? Qt::Checked : Qt::Unchecked);
    }
    paradigm_->setCurrentIndex(session_->selection().paradigm);
    syncing_ = false;
}

void MainWindow::syncStatsCoverage() {
    const bool was = syncing_;
    syncing_ = true;
    const int chosen = statsModel_->findData(QLatin1String(kChosenLayers));
    const auto& layers = session_->statistics().layers();
    if (chosen >= 0)
        statsModel_->setItemText(
            chosen, layers.empty() ? QStringLiteral("chosen layers…")
                                   : QStringLiteral("%1 (change…)").arg(session_->statistics().coverageText()));
    statsModel_->setCurrentIndex(
        !layers.empty() ? chosen
        : session_->statistics().modelFollowsLayer()
            ? 0
            : std::max(1, statsModel_->findData(QString::fromStdString(session_->statistics().model()))));
    statsModel_->setEnabled(session_->isOpen() && session_->info().layers.size() > 1);
    if (!layers.empty()) {
        QStringList names;
        for (int l : layers) names << QString::fromStdString(session_->info().layers[std::size_t(l)].name);
        statsModel_->setToolTip(
            QStringLiteral("Statistics over the chosen layers: %1").arg(names.join(QStringLiteral(", "))));
    } else {
        statsModel_->setToolTip(
            QStringLiteral("Which layers the per-layer statistics (local mass, confusion, "
                           "entropy) cover: one model's, every layer of the dump, or layers you choose"));
    }
    syncing_ = was;
}

void MainWindow::chooseStatsLayers() {
    // Non-modal, so the views stay readable while choosing; the box shows the state until OK.
    syncStatsCoverage();
    if (!session_->isOpen()) return;
    if (statsLayersDialog_) {
        statsLayersDialog_->raise();
        statsLayersDialog_->activateWindow();
        return;
    }
    auto* dialog = new QDialog(this);
    statsLayersDialog_ = dialog;
    dialog->setObjectName(QStringLiteral("statsLayersDialog"));
    dialog->setWindowTitle(QStringLiteral("Statistics over chosen layers"));
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    auto* layout = new QVBoxLayout(dialog);
    layout->addWidget(new QLabel(QStringLiteral("Layers the per-layer statistics cover (in dump order):")));
    auto* list = new QListWidget;
    list->setObjectName(QStringLiteral("statsLayers"));
    const std::vector<int> covered = session_->statistics().coveredLayers();
    const DumpInfo& info = session_->info();
    for (std::size_t i = 0; i < info.layers.size(); ++i) {
        const LayerInfo& l = info.layers[i];
        auto* item = new QListWidgetItem(
            l.attention.empty()
                ? QString::fromStdString(l.name)
                : QStringLiteral("%1 · %2").arg(QString::fromStdString(l.name), QString::fromStdString(l.attention)),
            list);
        item->setData(Qt::UserRole, int(i));
        item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
        item->setCheckState(std::find(covered.begin(), covered.end(), int(i)) != covered.end() ? Qt::Checked
                                                                                               : Qt::Unchecked);
    }
    layout->addWidget(list, 1);
    auto* row = new QHBoxLayout;
    auto* all = new QPushButton(QStringLiteral("All"));
    auto* none = new QPushButton(QStringLiteral("None"));
    row->addWidget(all);
    row->addWidget(none);
    row->addStretch(1);
    layout->addLayout(row);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    layout->addWidget(buttons);
    auto checkAll = [list](Qt::CheckState state) {
        for (int i = 0; i < list->count(); ++i) list->item(i)->setCheckState(state);
    };
    connect(all, &QPushButton::clicked, dialog, [checkAll]() { checkAll(Qt::Checked); });
    connect(none, &QPushButton::clicked, dialog, [checkAll]() { checkAll(Qt::Unchecked); });
    QPushButton* ok = buttons->button(QDialogButtonBox::Ok);
    auto updateOk = [list, ok]() {
        int checked = 0;
        for (int i = 0; i < list->count(); ++i) checked += list->item(i)->checkState() == Qt::Checked;
        ok->setEnabled(checked > 0);
        ok->setToolTip(checked > 0 ? QString() : QStringLiteral("choose at least one layer"));
    };
    connect(list, &QListWidget::itemChanged, dialog, updateOk);
    updateOk();
    connect(buttons, &QDialogButtonBox::rejected, dialog, &QDialog::reject);
    connect(buttons, &QDialogButtonBox::accepted, dialog, [this, dialog, list]() {
        std::vector<int> layers;
        for (int i = 0; i < list->count(); ++i)
            if (list->item(i)->checkState() == Qt::Checked) layers.push_back(list->item(i)->data(Qt::UserRole).toInt());
        try {
            session_->statistics().setLayers(layers);
        } catch (const Error& e) {
            addIssue(Issue{IssueKind::Error, QString::fromStdString(e.what())});
        }
        syncStatsCoverage();
        dialog->accept();
    });
    // A dump opened meanwhile makes the positions meaningless.
    connect(session_, &Session::dumpChanged, dialog, &QDialog::reject);
    dialog->resize(360, 420);
    dialog->open();
}

void MainWindow::syncSelectionWidgets() {
    syncing_ = true;
    const bool open = session_->isOpen();
    for (QWidget* w : std::initializer_list<QWidget*>{image_, layer_, head_, query_, model_, statsModel_})
        w->setEnabled(open);
    if (open) {
        const DumpInfo& info = session_->info();
        const Selection& sel = session_->selection();
        image_->setRange(0, std::max(0, info.images - 1));
        image_->setValue(sel.image);
        if (layer_->count() != int(info.layers.size()) ||
            (layer_->count() > 0 && layer_->itemData(0).toString() != QString::fromStdString(info.layers[0].name))) {
            layer_->clear();
            // Hierarchical dumps (grids differ between layers): each layer's grid and layout beside
            // its name, so that the stages read from the list.
            const bool hierarchical = std::any_of(info.layers.begin(), info.layers.end(), [&](const LayerInfo& l) {
                return !(l.layout == info.layers.front().layout) || l.reducedKeys() || l.window;
            });
            // A stage: consecutive layers of one model on one grid (a new grid starts the next).
            int stage = 0;
            const LayerInfo* previous = nullptr;
            for (const LayerInfo& l : info.layers) {
                const QString name = QString::fromStdString(l.name);
                if (!previous || modelOfLayer(previous->name) != modelOfLayer(l.name))
                    stage = 1;
                else if (!(previous->layout == l.layout))
                    ++stage;
                previous = &l;
                // The attention the model used beside the name, so the box says which is which.
                QString text = l.attention.empty()
                                   ? name
                                   : QStringLiteral("%1 · %2").arg(name, QString::fromStdString(l.attention));
                if (hierarchical) text = QStringLiteral("S%1 · %2 · %3").arg(stage).arg(text, layerLayoutLabel(l));
                layer_->addItem(text, name);
            }
            model_->clear();
            statsModel_->clear();
            statsModel_->addItem(QStringLiteral("the selected layer's model"), QLatin1String(kFollowModel));
            statsModel_->addItem(QStringLiteral("every layer (all models)"), QString());
            for (const LayerModel& m : layerModels(info)) {
                const QString name = QString::fromStdString(m.name);
                const QString text = QStringLiteral("%1 (%2 layers)")
                                         .arg(name.isEmpty() ? QStringLiteral("(unnamed)") : name)
                                         .arg(m.layers.size());
                model_->addItem(text, name);
                if (!m.name.empty()) statsModel_->addItem(QStringLiteral("model %1").arg(text), name);
            }
            statsModel_->addItem(QStringLiteral("chosen layers…"), QLatin1String(kChosenLayers));
        }
        layer_->setCurrentIndex(sel.layer);
        model_->setCurrentIndex(std::max(0, model_->findData(QString::fromStdString(session_->layerModel()))));
        model_->setEnabled(model_->count() > 1);
        syncStatsCoverage();
        const LayerInfo& li = session_->layerInfo();
        layerAttention_->setText(
            li.attention.empty()
                ? QStringLiteral("the dump does not say which attention this layer's model used")
                : QStringLiteral("model used: <b>%1</b>%2")
                      .arg(QString::fromStdString(li.attention).toHtmlEscaped(),
                           session_->layerParadigm() < 0 ? QStringLiteral(" (no paradigm of that name)") : QString()));
        for (int i = 0; i < paradigm_->count(); ++i) paradigm_->setItemText(i, paradigmItemText(*session_, i));
        head_->setRange(0, std::max(0, session_->layerInfo().heads - 1));
        head_->setValue(sel.head);
        query_->setRange(0, int(session_->layout().tokens() - 1));
        query_->setValue(int(sel.query));
        queryName_->setText(tokenName(session_->layout(), sel.query));
        paradigm_->setCurrentIndex(sel.paradigm);
        imageLabel_->setText(session_->imageLabel(sel.image));
    }
    syncing_ = false;
    syncBranchWidgets();
    syncRolloutWidgets();
}

void MainWindow::syncRolloutWidgets() {
    const bool was = syncing_;
    syncing_ = true;
    const bool open = session_->isOpen();
    const Selection& sel = session_->selection();
    mapContent_->setEnabled(open);
    mapContent_->setCurrentIndex(std::max(0, mapContent_->findData(QString::fromUtf8(toString(sel.map)))));
    const RolloutOptions& o = session_->rollout().options();
    rolloutFusion_->setCurrentText(QString::fromUtf8(toString(o.fusion)));
    rolloutWeights_->setCurrentText(QString::fromUtf8(toString(o.weights)));
    rolloutResidual_->setValue(o.residual);
    rolloutDiscard_->setValue(o.discardRatio);
    for (QWidget* w :
         std::initializer_list<QWidget*>{rolloutFusion_, rolloutWeights_, rolloutResidual_, rolloutDiscard_})
        w->setEnabled(open && session_->selection().rolloutShown());
    syncing_ = was;
}

void MainWindow::applyRolloutOptions() {
    if (syncing_) return;
    RolloutOptions o;
    o.fusion = parseHeadFusion(rolloutFusion_->currentText().toStdString());
    o.weights = parseRolloutWeights(rolloutWeights_->currentText().toStdString());
    o.residual = rolloutResidual_->value();
    o.discardRatio = rolloutDiscard_->value();
    session_->rollout().setOptions(o);  // the widgets' ranges are the options' ranges
}

void MainWindow::syncBranchWidgets() {
    syncing_ = true;
    const bool open = session_->isOpen();
    const bool dumpHas = open && session_->branch().inDump();
    const bool layerHas = open && session_->branch().inLayer();
    const Selection& sel = session_->selection();
    const LayerInfo& layer = session_->layerInfo();
    const int dv = layerHas ? layer.valueDim : 0;
    // Unchecked while the layer has none (the views show plain A), but the wish is kept: back on a
    // layer with a branch, the branch is shown again.
    branch_->setChecked(layerHas && sel.localBranch);
    branch_->setEnabled(layerHas);
    branchChannel_->setEnabled(layerHas);
    if (!open || !dumpHas) {
        branch_->setToolTip(open ? QStringLiteral("this dump has no local branch (no layer has a local_branch group)")
                                 : QStringLiteral("no dump open"));
    } else if (!layerHas) {
        branch_->setToolTip(QStringLiteral("this layer has no local branch"));
    } else {
        // The text stays short (the dock's width); kind and shape are in the tooltip and the titles.
        const LocalBranchInfo& b = *layer.localBranch;
        branch_->setToolTip(QStringLiteral("Show E_c = A + M_c instead of A: the depthwise %1×%2 convolution of V "
                                           "(%3, %4 weight channels, %5%6) as a matrix added to the attention, "
                                           "in the token map, the comparison, the matrix and the spectrum (B)")
                                .arg(b.kernelH)
                                .arg(b.kernelW)
                                .arg(QString::fromStdString(b.kind))
                                .arg(b.channels)
                                .arg(b.perImage ? QStringLiteral("per image") : QStringLiteral("shared by all images"))
                                .arg(b.hasBias ? QStringLiteral(", bias not part of E_c") : QString()));
    }
    syncBranchChannels(layerHas, dv);
    syncBranchStatus(dumpHas);
    syncing_ = false;
}

// The branch channel box: the mean, then every V channel of the selected head, with tooltips.
void MainWindow::syncBranchChannels(bool layerHas, int dv) {
    const Selection& sel = session_->selection();
    const bool rebuild = branchChannel_->count() != dv + 1 || (dv == 0 && branchChannel_->count() == 0);
    if (rebuild) {
        branchChannel_->clear();
        branchChannel_->addItem(QStringLiteral("mean over channels"), -1);
        for (int c = 0; c < dv; ++c) branchChannel_->addItem(QStringLiteral("channel %1").arg(c), c);
    }
    if (layerHas) {
        const LocalBranchInfo& b = *session_->layerInfo().localBranch;
        branchChannel_->setItemData(0,
                                    QStringLiteral("A + M_mean: the mean kernel over the head's %1 V channels "
                                                   "(the mean of their E_c)")
                                        .arg(dv),
                                    Qt::ToolTipRole);
        for (int c = 0; c < dv; ++c)
            branchChannel_->setItemData(c + 1,
                                        QStringLiteral("V channel %1 of head %2: weight channel %3 (%4)")
                                            .arg(c)
                                            .arg(sel.head)
                                            .arg(b.weightChannel(sel.head, c, dv))
                                            .arg(QString::fromUtf8(toString(b.channelMap))),
                                        Qt::ToolTipRole);
        branchChannel_->setToolTip(
            QStringLiteral("Which channel's equivalent matrix E_c = A + M_c the views show "
                           "(Shift+B: next)"));
    } else {
        branchChannel_->setToolTip(branch_->toolTip());
    }
    const int idx = branchChannel_->findData(sel.localChannel);
    branchChannel_->setCurrentIndex(idx >= 0 ? idx : 0);
}

// The status bar always says whether the views include the branch, and which channel.
void MainWindow::syncBranchStatus(bool dumpHas) {
    const QString status = session_->branch().status();
    branchLabel_->setText(status.isEmpty() ? QString() : QStringLiteral("· %1").arg(status));
    branchLabel_->setVisible(!status.isEmpty());
    const QString error = session_->branch().error();
    branchLabel_->setStyleSheet(error.isEmpty() ? QString() : QStringLiteral("color: #b40000"));
    if (!error.isEmpty()) {
        branchLabel_->setToolTip(error);
    } else if (dumpHas) {
        int withBranch = 0;
        QStringList kinds;
        for (const LayerInfo& l : session_->info().layers)
            if (l.localBranch) {
                ++withBranch;
                const QString k = QString::fromStdString(l.localBranch->kind);
                if (!kinds.contains(k)) kinds << k;
            }
        branchLabel_->setToolTip(
            QStringLiteral("local branch (%1) in %2 of %3 layers; B: on / off, Shift+B: next channel")
                .arg(kinds.join(QStringLiteral(", ")))
                .arg(withBranch)
                .arg(session_->info().layers.size()));
    }
}

// Next or previous layer within the selected layer's model; at the model's first or last layer the
// selection stays and the status bar says so.
void MainWindow::stepLayer(int step) {
    if (!session_->isOpen()) return;
    const std::string model = session_->layerModel();
    const std::vector<int> layers = session_->modelLayers(model);
    const auto it = std::find(layers.begin(), layers.end(), session_->selection().layer);
    if (it == layers.end()) return;
    const auto pos = (it - layers.begin()) + step;
    if (pos < 0 || pos >= std::ptrdiff_t(layers.size())) {
        statusBar()->showMessage(QStringLiteral("%1 layer of %2 (Ctrl+PgUp / Ctrl+PgDn cross models)")
                                     .arg(step > 0 ? QStringLiteral("last") : QStringLiteral("first"),
                                          model.empty() ? QStringLiteral("the dump")
                                                        : QStringLiteral("model ") + QString::fromStdString(model)),
                                 4000);
        return;
    }
    session_->setLayer(layers[std::size_t(pos)]);
}
}  // namespace attnlens::gui
