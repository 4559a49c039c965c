// QtTest suite that drives the real AttnLens window on the offscreen platform: opening, clicking
// tokens, switching paradigm/layer/head/image, the views against the core's numbers, background
// jobs (stale results, cancel, cache), exports (PNG/SVG/PDF/JSON, atomic, failures), bad files,
// NaN rows, preferences, the headless `attnlens render`, and the local branch (E_c = A + M_c).
#include <QCheckBox>
#include <QComboBox>
#include <QDropEvent>
#include <QElapsedTimer>
#include <QFile>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QMessageBox>
#include <QMimeData>
#include <QProcess>
#include <QSet>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTextStream>
#include <QTreeWidget>
#include <QXmlStreamReader>
#include <QtTest>
#include <cmath>
#include <memory>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention.h"
#include "attnlens/dump.h"
#include "attnlens/error.h"
#include "attnlens/open_check.h"
#include "attnlens/synth.h"
#include "compare_view.h"
#include "example_dump.h"
#include "figure_export.h"
#include "main_window.h"
#include "matrix_view.h"
#include "preferences.h"
#include "preferences_dialog.h"
#include "render_command.h"
#include "session.h"
#include "stats_views.h"
#include "token_map_view.h"

using namespace attnlens;
using namespace attnlens::gui;

namespace {

// The core's row, computed without any GUI code: a second reader, a fresh AttentionHead.
RowVector coreRow(const QString& path, int image, int layer, int head, const std::string& paradigm, Index query,
                  RowStatus* status = nullptr) {
    auto reader = DumpReader::open(path.toStdString());
    const HeadActivations acts = reader->readHead(image, layer, head);
    const LayerInfo& l = reader->info().layers[std::size_t(layer)];
    HeadInputs in{&acts.q, &acts.k, l.scale, l.kernelApplied};
    AttentionHead h(presetParadigm(paradigm), in);
    RowVector r(h.tokens());
    const RowStatus s = h.row(query, r);
    if (status) *status = s;
    return r;
}

bool sameValue(double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return std::abs(a - b) <= 1e-12 * (1 + std::abs(b));
}

// Every spatial cell of a colour map equals the row's weight for that token.
bool mapShowsRow(QCPColorMap* map, const TokenLayout& l, const RowVector& row, QString* why) {
    for (int y = 0; y < l.gridH; ++y)
        for (int x = 0; x < l.gridW; ++x) {
            const double shown = map->data()->cell(x, y), want = row[l.token(y, x)];
            if (!sameValue(shown, want)) {
                *why = QStringLiteral("cell (y %1, x %2): shown %3, core %4").arg(y).arg(x).arg(shown).arg(want);
                return false;
            }
        }
    return true;
}

QPoint pixelOf(QCPAxisRect* rect, double x, double y) {
    return QPoint(qRound(rect->axis(QCPAxis::atBottom)->coordToPixel(x)),
                  qRound(rect->axis(QCPAxis::atLeft)->coordToPixel(y)));
}

int distinctColours(const QImage& image) {
    QSet<QRgb> colours;
    const QImage img = image.convertToFormat(QImage::Format_RGB32);
    for (int y = 0; y < img.height(); y += 2)
        for (int x = 0; x < img.width(); x += 2) colours.insert(img.pixel(x, y));
    return int(colours.size());
}

// A small float32 dump with the given layer names (one head, one image, grid h x w, one prefix).
void writeNamedLayersDump(const QString& path, const std::vector<std::string>& layers, int h, int w) {
    const int n = 1 + h * w, d = 6;
    DumpWriter writer(path.toStdString());
    writer.setRootAttribute("format", std::string("attnlens.dump"));
    writer.setRootAttribute("format_version", std::int64_t(1));
    writer.setRootAttribute("grid", std::vector<std::int64_t>{h, w});
    writer.setRootAttribute("prefix_tokens", std::int64_t(1));
    for (std::size_t l = 0; l < layers.size(); ++l) {
        std::vector<float> q(std::size_t(n * d)), k(std::size_t(n * d));
        for (int i = 0; i < n * d; ++i) {
            q[std::size_t(i)] = float(std::sin(0.37 * i + double(l)));
            k[std::size_t(i)] = float(std::cos(0.23 * i - 0.5 * double(l)));
        }
        const std::vector<std::uint64_t> shape{1, 1, std::uint64_t(n), std::uint64_t(d)};
        writer.writeFloatDataset("/layers/" + layers[l] + "/q", shape, q, DType::Float32);
        writer.writeFloatDataset("/layers/" + layers[l] + "/k", shape, k, DType::Float32);
    }
    writer.commit();
}

// A dump with a local branch in its first layer only (resources/format.md 1a): 2 images, 2 heads,
// grid 4 x 4 + CLS, d = d_v = 4; layer "blocks.0" has per-image 3 x 3 weights over all 8 channels
// (InLine's layout), with a NaN in image 1's channel 5 when nanInImage1; "blocks.1" has none.
void writeMixedBranchDump(const QString& path, bool nanInImage1) {
    const int b = 2, heads = 2, h = 4, w = 4, n = 1 + h * w, d = 4, c = heads * d, k = 3;
    DumpWriter writer(path.toStdString());
    writer.setRootAttribute("format", std::string("attnlens.dump"));
    writer.setRootAttribute("format_version", std::int64_t(1));
    writer.setRootAttribute("grid", std::vector<std::int64_t>{h, w});
    writer.setRootAttribute("prefix_tokens", std::int64_t(1));
    const std::vector<std::uint64_t> shape{std::uint64_t(b), std::uint64_t(heads), std::uint64_t(n), std::uint64_t(d)};
    for (int l = 0; l < 2; ++l) {
        const std::string group = "/layers/blocks." + std::to_string(l);
        std::vector<float> q(std::size_t(b * heads * n * d)), kk(q.size()), v(q.size());
        for (std::size_t i = 0; i < q.size(); ++i) {
            q[i] = float(std::sin(0.37 * double(i) + l));
            kk[i] = float(std::cos(0.23 * double(i) - 0.5 * l));
            v[i] = float(std::sin(0.11 * double(i) + 1.0));
        }
        writer.writeFloatDataset(group + "/q", shape, q, DType::Float32);
        writer.writeFloatDataset(group + "/k", shape, kk, DType::Float32);
        writer.writeFloatDataset(group + "/v", shape, v, DType::Float32);
        writer.setGroupAttribute(group, "index", std::int64_t(l));
        if (l == 0) {
            std::vector<float> weight(std::size_t(b * c * k * k));
            for (std::size_t i = 0; i < weight.size(); ++i) weight[i] = float(0.3 * std::cos(0.7 * double(i)));
            if (nanInImage1) weight[std::size_t((1 * c + 5) * k * k + 4)] = NAN;
            writer.setGroupAttribute(group + "/local_branch", "kind", std::string("inline_residual"));
            writer.setGroupAttribute(group + "/local_branch", "channels", std::string("all"));
            writer.writeFloatDataset(group + "/local_branch/weight",
                                     {std::uint64_t(b), std::uint64_t(c), std::uint64_t(k), std::uint64_t(k)}, weight,
                                     DType::Float32);
        }
    }
    writer.commit();
}

// The core's M_c for (image, layer, head, V channel), from a second reader; channel -1: the mean
// of the head's d_v channels' M_c (as matrices, not through meanOver).
Matrix coreBranchMatrix(const QString& path, int image, int layer, int head, int channel) {
    auto reader = DumpReader::open(path.toStdString());
    const LayerInfo& l = reader->info().layers[std::size_t(layer)];
    const LocalBranchWeights w = reader->readLocalBranch(image, layer);
    if (channel >= 0)
        return localBranchMatrix(w.kernel(l.localBranch->weightChannel(head, channel, l.valueDim)), l.layout);
    Matrix sum = Matrix::Zero(l.tokens, l.tokens);
    for (int c = 0; c < l.valueDim; ++c)
        sum += localBranchMatrix(w.kernel(l.localBranch->weightChannel(head, c, l.valueDim)), l.layout);
    return sum / double(l.valueDim);
}

bool closeValue(double a, double b, double tol) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return std::abs(a - b) <= tol * (1 + std::abs(b));
}

// Total height of the plotted data of a bars plottable (its values summed).
double barsTotal(QCPBars* bars) {
    double t = 0;
    for (auto it = bars->data()->constBegin(); it != bars->data()->constEnd(); ++it) t += it->value;
    return t;
}

}  // namespace

class AppTests : public QObject {
    Q_OBJECT
private:
    QTemporaryDir dir_;
    QString small_, nanDump_, broken_, truncated_, dwc_, mixed_;
    std::unique_ptr<MainWindow> window_;

    MainWindow& openWindow(const QString& path) {
        window_ = std::make_unique<MainWindow>();
        window_->resize(1280, 860);
        window_->show();
        if (!QTest::qWaitForWindowExposed(window_.get())) qWarning("window not exposed");
        if (!window_->openFile(path)) qWarning("open failed: %s", qPrintable(window_->lastError()));
        return *window_;
    }
    // Lays the shown plot out now so that pixel <-> coordinate conversions are current.
    static void layoutNow(PlotView* v) {
        v->refreshNow();
        v->plot()->replot(QCustomPlot::rpImmediateRefresh);
        v->plot()->replot(QCustomPlot::rpImmediateRefresh);  // after the square-cell fix
    }
    void waitIdle(Session* s) { QTRY_VERIFY_WITH_TIMEOUT(!s->jobs().busy(), 60000); }

private Q_SLOTS:
    void initTestCase();
    void cleanup();

    void opensBundledExample();
    void exampleClickSwitchAndStatusBar();
    void clickOnTokenShowsCoreRow();
    void clickOnClsCellSelectsCls();
    void arrowKeysMoveQuery();
    void switchingParadigmLayerHeadImageUpdatesMap();
    void signedParadigmUsesSymmetricRangeWithoutClipping();
    void hoverShowsValueUnderCursor();
    void compareViewShowsEveryParadigmAndDifference();
    void compareViewClickUpdatesAllPanels();
    void matrixViewShowsMatrixRowAndRank();
    void staleMatrixResultIsDropped();
    void cancelStopsWholeDumpStatistics();
    void flickingBackUsesCache();
    void statisticsViewsMatchAnalyzeDump();
    void confusionHistogramIsOverAllImages();
    void layerPlotsBreakBetweenModels();
    void colourBarsSitNextToTheirMaps();
    void exportPngSvgPdfOfCurrentView();
    void exportAllViews();
    void exportFailureSaysWhyAndLeavesNoFile();
    void exportStatisticsJsonValidAgainstSchema();
    void brokenFileKeepsPreviousDump();
    void nanRowIsDrawnAndListed();
    void preferencesRoundTripAndApply();
    void preferencesDialogRejectsBadInput();
    void dropAndRecentFiles();
    void renderMatchesWindowExport();
    void renderCommandLine();
    void localBranchTokenMapIsAPlusMc();
    void localBranchRaisesRankInMatrixAndSpectrum();
    void localBranchAbsentDisablesToggle();
    void localBranchNanWeightShowsInlineError();
    void localBranchPersistsAndRenders();
    void damagedChunkShowsInlineErrorInEveryView();
    void damagedMetadataThatCrashesOrStallsHdf5KeepsPreviousDump();
};

void AppTests::initTestCase() {
    QVERIFY(dir_.isValid());
    // For looking at the test dumps in the program: ATTNLENS_KEEP_TEST_DUMPS=1 keeps the directory.
    if (qEnvironmentVariableIsSet("ATTNLENS_KEEP_TEST_DUMPS")) {
        dir_.setAutoRemove(false);
        qInfo("test dumps kept in %s", qPrintable(dir_.path()));
    }
    small_ = dir_.filePath("small.h5");
    SynthOptions o;
    o.layers = 3;
    o.heads = 2;
    o.gridH = 6;
    o.gridW = 7;
    o.prefix = 1;
    o.dim = 8;
    o.images = 3;
    writeSynthDump(small_.toStdString(), o);

    // FLatten's DWC on a 6 x 6 grid with d = 4: linear attention has rank <= d + 1, E_c nearly full.
    dwc_ = dir_.filePath("dwc.h5");
    SynthOptions od;
    od.layers = 2;
    od.heads = 2;
    od.gridH = od.gridW = 6;
    od.prefix = 1;
    od.dim = 4;
    od.images = 2;
    od.localBranch = "dwc";
    writeSynthDump(dwc_.toStdString(), od);
    mixed_ = dir_.filePath("mixed.h5");
    writeMixedBranchDump(mixed_, true);

    // A dump whose layer 0, head 0, image 0 has a NaN in the query of token 3.
    nanDump_ = dir_.filePath("nan.h5");
    {
        const int n = 1 + 3 * 3, d = 4;
        DumpWriter w(nanDump_.toStdString());
        w.setRootAttribute("format", std::string("attnlens.dump"));
        w.setRootAttribute("format_version", std::int64_t(1));
        w.setRootAttribute("grid", std::vector<std::int64_t>{3, 3});
        w.setRootAttribute("prefix_tokens", std::int64_t(1));
        std::vector<float> q(std::size_t(n * d)), k(std::size_t(n * d));
        for (int i = 0; i < n * d; ++i) {
            q[std::size_t(i)] = float(std::sin(0.7 * i));
            k[std::size_t(i)] = float(std::cos(0.3 * i));
        }
        q[std::size_t(3 * d + 1)] = NAN;
        w.writeFloatDataset("/layers/l0/q", {1, 1, std::uint64_t(n), std::uint64_t(d)}, q, DType::Float32);
        w.writeFloatDataset("/layers/l0/k", {1, 1, std::uint64_t(n), std::uint64_t(d)}, k, DType::Float32);
        w.commit();
    }

    broken_ = dir_.filePath("broken.h5");
    QFile b(broken_);
    QVERIFY(b.open(QIODevice::WriteOnly));
    b.write("this is not an HDF5 file\n");
    b.close();

    truncated_ = dir_.filePath("truncated.h5");
    QFile full(small_);
    QVERIFY(full.open(QIODevice::ReadOnly));
    const QByteArray head = full.read(full.size() / 3);
    QFile t(truncated_);
    QVERIFY(t.open(QIODevice::WriteOnly));
    t.write(head);
}

void AppTests::cleanup() {
    if (window_) {
        window_->session()->jobs().cancelAll();
        window_->session()->jobs().waitForIdle();
    }
    window_.reset();
}

void AppTests::opensBundledExample() {
    MainWindow w;
    w.show();
    QVERIFY(w.openExample());
    QVERIFY(w.session()->isOpen());
    const QString path = w.session()->path();
    QVERIFY2(exampleDumpCandidates().contains(path) || path.contains("attnlens-dev-synthetic"), qPrintable(path));
    // The first map is on screen: the token map's colour map has the layer's grid.
    const TokenLayout& l = w.session()->layout();
    QCOMPARE(w.tokenMapView()->colorMap()->data()->keySize(), l.gridW);
    QCOMPARE(w.tokenMapView()->colorMap()->data()->valueSize(), l.gridH);
    QString why;
    const Selection& s = w.session()->selection();
    QVERIFY2(
        mapShowsRow(w.tokenMapView()->colorMap(), l, coreRow(path, s.image, s.layer, s.head, "softmax", s.query), &why),
        qPrintable(why));
    w.session()->jobs().waitForIdle();
}

// The issue's scenario on the bundled example itself: click a token at a known grid position and
// compare with the core's row; CLS; switch paradigm, layer and head; the status bar and the image.
void AppTests::exampleClickSwitchAndStatusBar() {
    window_ = std::make_unique<MainWindow>();
    MainWindow& w = *window_;
    w.resize(1280, 860);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY2(w.openExample(), qPrintable(w.lastError()));
    Session* s = w.session();
    const QString path = s->path();
    const DumpInfo& info = s->info();
    TokenMapView* v = w.tokenMapView();
    layoutNow(v);
    const TokenLayout& l = s->layout();
    QVERIFY(l.gridH >= 4 && l.gridW >= 4);

    // Status bar: file, B, N, d, grid.
    const QString shape = w.findChild<QLabel*>("shape")->text();
    const LayerInfo& l0 = info.layers.front();
    for (const QString& part :
         {QString("B=%1").arg(info.images), QString("N=%1").arg(l0.tokens), QString("d=%1").arg(l0.dim),
          QString("%1x%2").arg(l0.layout.gridH).arg(l0.layout.gridW)})
        QVERIFY2(shape.contains(part), qPrintable(shape + " lacks " + part));
    QCOMPARE(w.findChild<QLabel*>("file")->text(), QFileInfo(path).fileName());

    // Click the cell (y 3, x gridW - 4).
    const int y = 3, x = l.gridW - 4;
    QTest::mouseClick(v->plot(), Qt::LeftButton, {}, pixelOf(v->gridRect(), x, y));
    QCOMPARE(s->selection().query, l.token(y, x));
    QString why;
    RowVector want = coreRow(path, 0, 0, 0, "softmax", l.token(y, x));
    QVERIFY2(mapShowsRow(v->colorMap(), l, want, &why), qPrintable(why));
    for (int i = 0; i < l.prefix; ++i) QVERIFY(sameValue(v->prefixValue(i), want[i]));
    QVERIFY2(v->titleText().contains(QString("(y %1, x %2)").arg(y).arg(x)), qPrintable(v->titleText()));
    QCOMPARE(w.findChild<QSpinBox*>("query")->value(), int(l.token(y, x)));

    // Switch paradigm (selector), layer (PgDown) and head (]): each map is the core's row.
    const Index q = s->selection().query;
    w.findChild<QComboBox*>("paradigm")->setCurrentIndex(s->paradigmIndex("mala"));
    QVERIFY2(mapShowsRow(v->colorMap(), l, coreRow(path, 0, 0, 0, "mala", q), &why), qPrintable(why));
    QTest::keyClick(&w, Qt::Key_PageDown);
    QCOMPARE(s->selection().layer, 1);
    QVERIFY2(mapShowsRow(v->colorMap(), s->layout(), coreRow(path, 0, 1, 0, "mala", s->selection().query), &why),
             qPrintable(why));
    QTest::keyClick(&w, Qt::Key_BracketRight);
    QCOMPARE(s->selection().head, 1);
    QVERIFY2(mapShowsRow(v->colorMap(), s->layout(), coreRow(path, 0, 1, 1, "mala", s->selection().query), &why),
             qPrintable(why));
    // Signed paradigm: diverging range centred on zero that contains every weight.
    const RowVector mala = coreRow(path, 0, 1, 1, "mala", s->selection().query);
    QCOMPARE(v->colorMap()->dataRange().lower, -v->colorMap()->dataRange().upper);
    QVERIFY(v->colorMap()->dataRange().upper >= std::max(-mala.minCoeff(), mala.maxCoeff()));

    // CLS cell.
    layoutNow(v);
    if (l.prefix > 0) {
        QCPItemRect* cls = v->prefixCells().front();
        const QPointF centre = (cls->topLeft->pixelPosition() + cls->bottomRight->pixelPosition()) / 2;
        QTest::mouseClick(v->plot(), Qt::LeftButton, {}, centre.toPoint());
        QCOMPARE(s->selection().query, Index(0));
        QVERIFY2(mapShowsRow(v->colorMap(), s->layout(), coreRow(path, 0, 1, 1, "mala", 0), &why), qPrintable(why));
    }

    // The input image under the map (the example has /images): shown at 40 %, and it changes the
    // picture; hidden at 0 %.
    if (info.imageInfo.present) {
        v->setImageOpacity(0);
        layoutNow(v);
        QVERIFY(!v->imageShown());
        const QImage without = v->plot()->toPixmap().toImage();
        v->setImageOpacity(40);
        layoutNow(v);
        QVERIFY(v->imageShown());
        QVERIFY(v->plot()->toPixmap().toImage() != without);
    }
}

void AppTests::clickOnTokenShowsCoreRow() {
    MainWindow& w = openWindow(small_);
    TokenMapView* v = w.tokenMapView();
    layoutNow(v);
    const TokenLayout& l = w.session()->layout();
    const int y = 2, x = 3;
    QTest::mouseClick(v->plot(), Qt::LeftButton, {}, pixelOf(v->gridRect(), x, y));
    QCOMPARE(w.session()->selection().query, l.token(y, x));
    const RowVector want = coreRow(small_, 0, 0, 0, "softmax", l.token(y, x));
    QString why;
    QVERIFY2(mapShowsRow(v->colorMap(), l, want, &why), qPrintable(why));
    QVERIFY(sameValue(v->prefixValue(0), want[0]));
    QVERIFY(v->titleText().contains("(y 2, x 3)"));

    // A click just inside the far corner of the last cell selects that cell.
    QTest::mouseClick(v->plot(), Qt::LeftButton, {}, pixelOf(v->gridRect(), l.gridW - 1 + 0.45, l.gridH - 1 + 0.45));
    QCOMPARE(w.session()->selection().query, l.token(l.gridH - 1, l.gridW - 1));
}

void AppTests::clickOnClsCellSelectsCls() {
    MainWindow& w = openWindow(small_);
    TokenMapView* v = w.tokenMapView();
    layoutNow(v);
    QVERIFY(v->prefixRect());
    QCOMPARE(int(v->prefixCells().size()), 1);
    QCPItemRect* cls = v->prefixCells().front();
    const QPointF centre = (cls->topLeft->pixelPosition() + cls->bottomRight->pixelPosition()) / 2;
    QVERIFY(v->prefixRect()->rect().contains(centre.toPoint()));
    QTest::mouseClick(v->plot(), Qt::LeftButton, {}, centre.toPoint());
    QCOMPARE(w.session()->selection().query, Index(0));
    QString why;
    QVERIFY2(mapShowsRow(v->colorMap(), w.session()->layout(), coreRow(small_, 0, 0, 0, "softmax", 0), &why),
             qPrintable(why));
    QVERIFY(v->titleText().contains("CLS"));
}

void AppTests::arrowKeysMoveQuery() {
    MainWindow& w = openWindow(small_);
    TokenMapView* v = w.tokenMapView();
    layoutNow(v);
    const TokenLayout& l = w.session()->layout();
    QTest::mouseClick(v->plot(), Qt::LeftButton, {}, pixelOf(v->gridRect(), 1, 1));
    QCOMPARE(w.session()->selection().query, l.token(1, 1));
    v->plot()->setFocus();
    QTest::keyClick(v->plot(), Qt::Key_Right);
    QCOMPARE(w.session()->selection().query, l.token(1, 2));
    QTest::keyClick(v->plot(), Qt::Key_Down);
    QCOMPARE(w.session()->selection().query, l.token(2, 2));
    QTest::keyClick(v->plot(), Qt::Key_Left);
    QTest::keyClick(v->plot(), Qt::Key_Up);
    QTest::keyClick(v->plot(), Qt::Key_Up);
    QTest::keyClick(v->plot(), Qt::Key_Up);  // clamped at the top row
    QCOMPARE(w.session()->selection().query, l.token(0, 1));
    QString why;
    QVERIFY2(mapShowsRow(v->colorMap(), l, coreRow(small_, 0, 0, 0, "softmax", l.token(0, 1)), &why), qPrintable(why));
}

void AppTests::switchingParadigmLayerHeadImageUpdatesMap() {
    MainWindow& w = openWindow(small_);
    TokenMapView* v = w.tokenMapView();
    Session* s = w.session();
    const Index q = s->selection().query;
    QString why;

    auto* paradigm = w.findChild<QComboBox*>("paradigm");
    QVERIFY(paradigm);
    paradigm->setCurrentIndex(s->paradigmIndex("inline"));
    QCOMPARE(s->paradigms()[std::size_t(s->selection().paradigm)].name, std::string("inline"));
    QVERIFY2(mapShowsRow(v->colorMap(), s->layout(), coreRow(small_, 0, 0, 0, "inline", q), &why), qPrintable(why));

    QTest::keyClick(&w, Qt::Key_PageDown);  // next layer
    QCOMPARE(s->selection().layer, 1);
    QVERIFY2(mapShowsRow(v->colorMap(), s->layout(), coreRow(small_, 0, 1, 0, "inline", q), &why), qPrintable(why));

    QTest::keyClick(&w, Qt::Key_BracketRight);  // next head
    QCOMPARE(s->selection().head, 1);
    QVERIFY2(mapShowsRow(v->colorMap(), s->layout(), coreRow(small_, 0, 1, 1, "inline", q), &why), qPrintable(why));

    QTest::keyClick(&w, Qt::Key_Period);  // next image
    QCOMPARE(s->selection().image, 1);
    QVERIFY2(mapShowsRow(v->colorMap(), s->layout(), coreRow(small_, 1, 1, 1, "inline", q), &why), qPrintable(why));

    QTest::keyClick(&w, Qt::Key_PageUp);
    QCOMPARE(s->selection().layer, 0);
    QTest::keyClick(&w, Qt::Key_P);  // next paradigm after inline
    QCOMPARE(s->paradigms()[std::size_t(s->selection().paradigm)].name, std::string("inline_relu"));
    QVERIFY2(mapShowsRow(v->colorMap(), s->layout(), coreRow(small_, 1, 0, 1, "inline_relu", q), &why),
             qPrintable(why));

    // The selection widgets follow the keyboard.
    QCOMPARE(w.findChild<QComboBox*>("layer")->currentIndex(), 0);
    QCOMPARE(w.findChild<QSpinBox*>("head")->value(), 1);
    QCOMPARE(w.findChild<QSpinBox*>("image")->value(), 1);
}

void AppTests::signedParadigmUsesSymmetricRangeWithoutClipping() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    TokenMapView* v = w.tokenMapView();
    s->setParadigm(s->paradigmIndex("mala"));
    const RowVector row = coreRow(small_, 0, 0, 0, "mala", s->selection().query);
    const QCPRange r = v->colorMap()->dataRange();
    QCOMPARE(r.lower, -r.upper);
    QVERIFY(r.lower <= row.minCoeff());
    QVERIFY(r.upper >= row.maxCoeff());
    QVERIFY(std::max(-row.minCoeff(), row.maxCoeff()) == r.upper);  // tight: the extreme value is the end
    QVERIFY(row.minCoeff() < 0);  // the synthetic data does produce negative MALA weights

    s->setParadigm(s->paradigmIndex("softmax"));
    const RowVector soft = coreRow(small_, 0, 0, 0, "softmax", s->selection().query);
    QCOMPARE(v->colorMap()->dataRange().lower, 0.0);
    QCOMPARE(v->colorMap()->dataRange().upper, soft.maxCoeff());
}

void AppTests::hoverShowsValueUnderCursor() {
    MainWindow& w = openWindow(small_);
    TokenMapView* v = w.tokenMapView();
    layoutNow(v);
    const TokenLayout& l = w.session()->layout();
    QSignalSpy spy(v, &PlotView::hoverText);
    QTest::mouseMove(v->plot(), pixelOf(v->gridRect(), 4, 1));
    QTRY_VERIFY(!spy.isEmpty());
    const RowVector row = coreRow(small_, 0, 0, 0, "softmax", w.session()->selection().query);
    const QString text = spy.last().first().toString();
    QVERIFY2(text.contains(QString::number(row[l.token(1, 4)], 'g', 4)), qPrintable(text));
    QVERIFY2(text.contains("(y 1, x 4)"), qPrintable(text));
    QCOMPARE(w.findChild<QLabel*>("hover")->text(), text);
}

void AppTests::compareViewShowsEveryParadigmAndDifference() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    w.showView("compare");
    CompareView* c = w.compareView();
    c->refreshNow();
    QCOMPARE(c->panels().size(), s->selection().shown.size());
    QCOMPARE(int(c->panels().size()), 8);
    const Index q = s->selection().query;
    QString why;
    for (const auto& p : c->panels()) {
        const std::string name = s->paradigms()[std::size_t(p.paradigm)].name;
        QVERIFY2(mapShowsRow(p.map, s->layout(), coreRow(small_, 0, 0, 0, name, q), &why),
                 qPrintable(QString::fromStdString(name) + ": " + why));
        QVERIFY(p.title->text().startsWith(QString::fromStdString(name)));
    }
    c->setDifference(s->paradigmIndex("softmax"), s->paradigmIndex("inline"));
    c->refreshNow();
    QCOMPARE(int(c->panels().size()), 9);
    const auto& diff = c->panels().back();
    QCOMPARE(diff.paradigm, -1);
    const RowVector d = coreRow(small_, 0, 0, 0, "softmax", q) - coreRow(small_, 0, 0, 0, "inline", q);
    QVERIFY2(mapShowsRow(diff.map, s->layout(), d, &why), qPrintable(why));
    QCOMPARE(diff.map->dataRange().lower, -diff.map->dataRange().upper);

    c->setSharedRange(true);
    c->refreshNow();
    QVERIFY(c->sharedScale());
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& p : c->panels()) {
        if (p.paradigm < 0) continue;
        QCOMPARE(p.map->colorScale(), c->sharedScale());
        const RowVector r = coreRow(small_, 0, 0, 0, s->paradigms()[std::size_t(p.paradigm)].name, q);
        lo = std::min(lo, r.minCoeff());
        hi = std::max(hi, r.maxCoeff());
    }
    const QCPRange shared = c->sharedScale()->dataRange();
    QVERIFY(shared.lower <= lo && shared.upper >= hi);  // no panel is clipped
}

void AppTests::compareViewClickUpdatesAllPanels() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    w.showView("compare");
    CompareView* c = w.compareView();
    layoutNow(c);
    const auto& third = c->panels()[2];
    QTest::mouseClick(c->plot(), Qt::LeftButton, {}, pixelOf(third.rect, 5, 4));
    const Index q = s->layout().token(4, 5);
    QCOMPARE(s->selection().query, q);
    QString why;
    for (const auto& p : c->panels()) {
        const std::string name = s->paradigms()[std::size_t(p.paradigm)].name;
        QVERIFY2(mapShowsRow(p.map, s->layout(), coreRow(small_, 0, 0, 0, name, q), &why), qPrintable(why));
        QVERIFY(p.marker.outer->visible());
        QCOMPARE(p.marker.outer->topLeft->coords(), QPointF(4.5, 3.5));
    }
}

void AppTests::matrixViewShowsMatrixRowAndRank() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    s->setParadigm(s->paradigmIndex("linear_relu"));
    w.showView("matrix");
    MatrixView* m = w.matrixView();
    QTRY_VERIFY_WITH_TIMEOUT(!m->waitingForResults() && m->titleText().contains("numerical rank"), 30000);

    auto reader = DumpReader::open(small_.toStdString());
    const HeadActivations acts = reader->readHead(0, 0, 0);
    const LayerInfo& l = reader->info().layers[0];
    HeadInputs in{&acts.q, &acts.k, l.scale, l.kernelApplied};
    AttentionHead h(presetParadigm("linear_relu"), in);
    const Matrix a = h.matrix();
    for (Index i = 0; i < a.rows(); ++i)
        for (Index j = 0; j < a.cols(); ++j)
            QVERIFY2(sameValue(m->colorMap()->data()->cell(int(j), int(i)), a(i, j)),
                     qPrintable(QString("A[%1,%2]").arg(i).arg(j)));
    const SpectrumResult spec = spectrum(h, l.layout, SpectrumOptions{});
    QVERIFY2(m->titleText().contains(QString("numerical rank %1 / %2").arg(spec.rank).arg(spec.size)),
             qPrintable(m->titleText()));
    const Index q = s->selection().query;
    QCOMPARE(m->rowHighlight()->topLeft->coords().y(), q - 0.5);
    QCOMPARE(m->rowHighlight()->bottomRight->coords().y(), q + 0.5);

    // Log colour: log10 of the weights, floored at 1e-6 of the largest.
    m->setLogScale(true);
    QTRY_VERIFY_WITH_TIMEOUT(!m->waitingForResults() && m->colorMap()->visible(), 30000);
    const double floor = a.maxCoeff() * 1e-6;
    QVERIFY(sameValue(m->colorMap()->data()->cell(2, 1), std::log10(std::max(a(1, 2), floor))));
}

void AppTests::staleMatrixResultIsDropped() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    w.showView("matrix");
    const int droppedBefore = s->jobs().dropped();
    s->setLayer(1);  // supersedes the job for layer 0 before it can be delivered
    s->setLayer(2);
    waitIdle(s);
    QTRY_VERIFY(!w.matrixView()->waitingForResults());
    QVERIFY(s->jobs().dropped() >= droppedBefore + 2);
    // What is shown is the matrix of the current selection (layer 2), not a stale one.
    auto reader = DumpReader::open(small_.toStdString());
    const HeadActivations acts = reader->readHead(0, 2, 0);
    const LayerInfo& l = reader->info().layers[2];
    HeadInputs in{&acts.q, &acts.k, l.scale, l.kernelApplied};
    const Matrix a = AttentionHead(presetParadigm("softmax"), in).matrix();
    QVERIFY(sameValue(w.matrixView()->colorMap()->data()->cell(5, 7), a(7, 5)));
    QVERIFY(w.matrixView()->titleText().contains(QString::fromStdString(l.name)));
}

void AppTests::cancelStopsWholeDumpStatistics() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    s->setStatsScope(StatsScope::AllImages);
    w.showView("local");
    QVERIFY(s->jobs().busy());
    auto* cancel = w.findChild<QToolButton*>("cancel");
    QVERIFY(cancel && cancel->isVisible());
    QTest::mouseClick(cancel, Qt::LeftButton);
    QVERIFY(!s->jobs().busy());
    QVERIFY(!cancel->isVisible());
    s->jobs().waitForIdle();
    QTest::qWait(50);  // the worker's queued finish arrives and is dropped
    QVERIFY(s->layerReport(StatsScope::AllImages, false) == nullptr);
    QVERIFY(w.view("local")->waitingForResults());
}

void AppTests::flickingBackUsesCache() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    w.showView("compare");
    s->setLayer(1);
    s->setLayer(0);
    const int reads = s->activationReads(), builds = s->headBuilds();
    s->setLayer(1);
    s->setLayer(0);
    s->setHead(1);
    s->setHead(0);
    QCOMPARE(s->activationReads(), reads + 1);  // only head 1 was new
    QCOMPARE(s->headBuilds(), builds + 8);      // its eight paradigms
}

void AppTests::statisticsViewsMatchAnalyzeDump() {
    MainWindow& w = openWindow(small_);
    for (const QString id : {"spectrum", "local", "confusion", "magnitude", "layers"}) {
        w.showView(id);
        PlotView* v = w.view(id);
        QTRY_VERIFY_WITH_TIMEOUT(!v->waitingForResults(), 60000);
        v->refreshNow();
        QVERIFY2(v->plot()->plottableCount() >= 8, qPrintable(id));
    }
    // Local mass per layer: the plotted means equal a second, independent analyzeDump run.
    auto reader = DumpReader::open(small_.toStdString());
    AnalyzeRequest req;
    req.paradigms = presetParadigms();
    req.images = {0};
    req.options.stats = StatSelection::parse("local");
    const AnalysisReport report = analyzeDump(*reader, req);
    PlotView* local = w.view("local");
    local->refreshNow();
    for (int p = 0; p < 8; ++p) {
        QCPGraph* g = local->plot()->graph(p);
        QCOMPARE(g->name(), QString::fromStdString(report.paradigms[std::size_t(p)].name));
        for (int layer = 0; layer < 3; ++layer) {
            double sum = 0;
            int n = 0;
            for (const auto& r : report.records)
                if (r.paradigm == p && r.layer == layer) {
                    sum += r.stats.local.front().mean;  // k = 3 is the first of the default list
                    ++n;
                }
            QVERIFY(n == 2);
            QVERIFY(sameValue(g->data()->at(layer)->value, sum / n));
        }
    }
    // Spectrum: one graph per shown paradigm, values equal the analysis library's.
    PlotView* spec = w.view("spectrum");
    spec->refreshNow();
    const HeadActivations acts = reader->readHead(0, 0, 0);
    HeadInputs in{&acts.q, &acts.k, reader->info().layers[0].scale, false};
    const SpectrumResult sr =
        spectrum(AttentionHead(presetParadigm("softmax"), in), reader->info().layers[0].layout, {});
    QCPGraph* g0 = spec->plot()->graph(0);
    QCOMPARE(g0->dataCount(), int(sr.singularValues.size()));
    QVERIFY(sameValue(g0->data()->at(0)->value, sr.singularValues[0]));
    QVERIFY(g0->name().contains(QString("rank %1/").arg(sr.rank)));
}

void AppTests::confusionHistogramIsOverAllImages() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    QCOMPARE(s->statsScope(), StatsScope::CurrentImage);  // local mass, entropy: the selected image
    w.showView("confusion");
    auto* v = qobject_cast<ConfusionView*>(w.view("confusion"));
    QVERIFY(v);
    QCOMPARE(v->scope(), StatsScope::AllImages);
    QTRY_VERIFY_WITH_TIMEOUT(!v->waitingForResults(), 60000);
    v->refreshNow();
    // One bar series per paradigm; each holds every image once, in the library's bins.
    auto reader = DumpReader::open(small_.toStdString());
    AnalyzeRequest req;
    req.paradigms = presetParadigms();
    req.options.stats = StatSelection::parse("confusion");
    const AnalysisReport report = analyzeDump(*reader, req);
    int series = 0;
    for (int i = 0; i < v->plot()->plottableCount(); ++i) {
        auto* bars = qobject_cast<QCPBars*>(v->plot()->plottable(i));
        if (!bars) continue;
        const int p = series++;
        QCOMPARE(barsTotal(bars), 3.0);
        const std::vector<int> hist = confusionHistogram(confusionPerImage(report, p), 4);
        for (std::size_t b = 0; b < hist.size(); ++b) QCOMPARE(bars->data()->at(int(b))->value, double(hist[b]));
    }
    QCOMPARE(series, 8);
    // The local mass view (following the session) still uses the selected image.
    w.showView("local");
    QTRY_VERIFY_WITH_TIMEOUT(!w.view("local")->waitingForResults(), 60000);
    QVERIFY(s->layerReport(StatsScope::CurrentImage, false) != nullptr);
    QVERIFY(s->layerReport(StatsScope::AllImages, false) != nullptr);  // both cached side by side
}

void AppTests::layerPlotsBreakBetweenModels() {
    const QString path = dir_.filePath("two-models.h5");
    writeNamedLayersDump(path, {"softmax.block0", "softmax.block1", "mala.block0", "mala.block1"}, 4, 5);
    MainWindow& w = openWindow(path);
    w.showView("local");
    PlotView* local = w.view("local");
    QTRY_VERIFY_WITH_TIMEOUT(!local->waitingForResults(), 60000);
    local->refreshNow();
    // Four layers and one gap (NaN) between softmax.block1 and mala.block0.
    QCPGraph* g = local->plot()->graph(0);
    QCOMPARE(g->dataCount(), 5);
    QCOMPARE(g->data()->at(2)->key, 1.5);
    QVERIFY(std::isnan(g->data()->at(2)->value));
    for (int i : {0, 1, 3, 4}) QVERIFY(std::isfinite(g->data()->at(i)->value));
    QVERIFY(local->plot()->itemCount() >= 1);  // the separator

    // Entropy & negative mass: the three plots get the same data height, although only the bottom
    // one carries the layer names.
    w.showView("layers");
    PlotView* layers = w.view("layers");
    QTRY_VERIFY_WITH_TIMEOUT(!layers->waitingForResults(), 60000);
    for (int i = 0; i < 4; ++i) layers->plot()->replot(QCustomPlot::rpImmediateRefresh);
    const auto rects = layers->plot()->axisRects();
    QCOMPARE(rects.size(), 3);
    const int h0 = rects[0]->height(), h2 = rects[2]->height();
    QVERIFY2(std::abs(h0 - h2) <= 3, qPrintable(QString("heights %1 %2 %3").arg(h0).arg(rects[1]->height()).arg(h2)));
}

void AppTests::colourBarsSitNextToTheirMaps() {
    MainWindow& w = openWindow(small_);
    TokenMapView* v = w.tokenMapView();
    layoutNow(v);
    // The map is centred with its colour bar, not alone with the bar pushed to the far edge.
    const int gap = v->colorScale()->outerRect().left() - v->gridRect()->rect().right();
    QVERIFY2(gap >= 0 && gap < 30, qPrintable(QString("gap %1 px").arg(gap)));
    const int leftSpace = v->gridRect()->rect().left(),
              rightSpace = v->plot()->width() - v->colorScale()->rect().right();
    QVERIFY2(std::abs(leftSpace - rightSpace) < 120,
             qPrintable(QString("left %1, right %2").arg(leftSpace).arg(rightSpace)));
    w.showView("compare");
    CompareView* c = w.compareView();
    layoutNow(c);
    for (const auto& p : c->panels()) {
        QVERIFY(p.scale);
        const int g = p.scale->outerRect().left() - p.rect->rect().right();
        QVERIFY2(g >= 0 && g < 30, qPrintable(QString("panel gap %1 px").arg(g)));
    }
}

void AppTests::exportPngSvgPdfOfCurrentView() {
    MainWindow& w = openWindow(small_);
    layoutNow(w.tokenMapView());
    FigureOptions o;
    o.dpi = 192;
    const QString png = dir_.filePath("map.png"), svg = dir_.filePath("map.svg"), pdf = dir_.filePath("map.pdf");
    QString error;
    QVERIFY2(w.exportCurrentFigure(png, o, &error), qPrintable(error));
    QVERIFY2(w.exportCurrentFigure(svg, o, &error), qPrintable(error));
    QVERIFY2(w.exportCurrentFigure(pdf, o, &error), qPrintable(error));

    QImage image(png);
    QVERIFY(!image.isNull());
    const QSize plotSize = w.tokenMapView()->plot()->size();
    QCOMPARE(image.width(), plotSize.width() * 2);  // 192 dpi = twice the logical pixels
    QVERIFY2(distinctColours(image) > 16, "PNG looks blank");
    QCOMPARE(qRound(image.dotsPerMeterX() * 0.0254), 192);

    QFile sf(svg);
    QVERIFY(sf.open(QIODevice::ReadOnly));
    QXmlStreamReader xml(&sf);
    bool sawSvg = false, sawImage = false, sawTitle = false;
    while (!xml.atEnd()) {
        xml.readNext();
        if (xml.isStartElement() && xml.name() == QLatin1String("svg")) sawSvg = true;
        if (xml.isStartElement() && xml.name() == QLatin1String("image")) sawImage = true;  // the heatmap
        if (xml.isCharacters() && xml.text().contains(QLatin1String("softmax"))) sawTitle = true;
    }
    QVERIFY2(!xml.hasError(), qPrintable(xml.errorString()));
    QVERIFY(sawSvg && sawImage && sawTitle);

    QFile pf(pdf);
    QVERIFY(pf.open(QIODevice::ReadOnly));
    const QByteArray bytes = pf.readAll();
    QVERIFY(bytes.startsWith("%PDF-"));
    QVERIFY(bytes.trimmed().endsWith("%%EOF"));
    QVERIFY(bytes.size() > 2000);
    // No temporary files are left next to the outputs.
    QCOMPARE(QDir(dir_.path()).entryList({"map*"}).size(), 3);
}

void AppTests::exportAllViews() {
    MainWindow& w = openWindow(small_);
    QSignalSpy done(&w, &MainWindow::exportFinished);
    FigureOptions o;
    o.size = QSize(900, 650);
    w.exportAllFigures(dir_.filePath("all.png"), o);
    QTRY_VERIFY_WITH_TIMEOUT(!done.isEmpty(), 90000);
    const QStringList written = done.first().at(0).toStringList();
    QCOMPARE(done.first().at(1).toString(), QString());
    QCOMPARE(written.size(), int(w.views().size()));
    for (const QString& f : written) {
        QImage img(f);
        QVERIFY2(!img.isNull(), qPrintable(f));
        QCOMPARE(img.size(), QSize(900, 650));
        QVERIFY2(distinctColours(img) > 8, qPrintable(f + " looks blank"));
    }
    QVERIFY(written.contains(dir_.filePath("all-tokenmap.png")));
    QVERIFY(written.contains(dir_.filePath("all-confusion.png")));
}

void AppTests::exportFailureSaysWhyAndLeavesNoFile() {
    MainWindow& w = openWindow(small_);
    QString error;
    const QString bad = dir_.filePath("no-such-dir/map.png");
    QVERIFY(!w.exportCurrentFigure(bad, {}, &error));
    QVERIFY2(error.contains("cannot write") && error.contains("no-such-dir"), qPrintable(error));
    QVERIFY(!QFile::exists(bad));
    QVERIFY(!w.exportCurrentFigure(dir_.filePath("map.bmp"), {}, &error));
    QVERIFY2(error.contains(".png, .svg or .pdf"), qPrintable(error));
    QCOMPARE(w.lastError(), error);
}

void AppTests::exportStatisticsJsonValidAgainstSchema() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    s->setLayer(1);
    s->setHead(1);
    const QString sel = dir_.filePath("selection.json"), all = dir_.filePath("whole.json");
    for (const auto& [path, whole] : {std::pair{sel, false}, std::pair{all, true}}) {
        QSignalSpy done(&w, &MainWindow::exportFinished);
        w.exportStatistics(path, whole);
        QTRY_VERIFY_WITH_TIMEOUT(!done.isEmpty(), 90000);
        QCOMPARE(done.first().at(1).toString(), QString());
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const nlohmann::json j = nlohmann::json::parse(f.readAll().toStdString());
        for (const char* key : {"schema", "schema_version", "tool", "input", "selection", "paradigms", "options",
                                "results", "non_finite", "timing", "summary"})
            QVERIFY2(j.contains(key), key);
        QCOMPARE(QString::fromStdString(j["tool"]["name"].get<std::string>()), QString("attnlens"));
        const std::size_t records = whole ? 3u * 3u * 2u * 8u : 8u;
        QCOMPARE(j["results"].size(), records);
        QCOMPARE(QString::fromStdString(j["input"]["sha256"].get<std::string>()).size(), 64);
        // Valid against the schema (python3-jsonschema is a dependency: setup-debian.sh).
        const QString schema = QStringLiteral(ATTNLENS_SOURCE_DIR "/resources/analysis.schema.json");
        QVERIFY(QFile::exists(schema));
        QProcess py;
        py.start("/usr/bin/python3", {"-c",
                                      "import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), "
                                      "json.load(open(sys.argv[2])))",
                                      path, schema});
        QVERIFY2(py.waitForStarted(10000), "cannot run /usr/bin/python3 to validate against the schema");
        QVERIFY(py.waitForFinished(60000));
        QVERIFY2(py.exitStatus() == QProcess::NormalExit && py.exitCode() == 0, py.readAllStandardError().constData());
        // The same numbers and options as the analysis library (what attnlens-cli analyze writes).
        auto reader = DumpReader::open(small_.toStdString());
        AnalyzeRequest req;
        req.paradigms = presetParadigms();
        if (!whole) {
            req.layers = {1};
            req.heads = {1};
            req.images = {0};
        }
        const nlohmann::json ref = reportToJson(analyzeDump(*reader, req), ToolInfo{});
        QVERIFY(j["results"] == ref["results"]);
        QVERIFY(j["paradigms"] == ref["paradigms"]);
        QVERIFY(j["options"] == ref["options"]);
        QVERIFY(j["selection"] == ref["selection"]);
    }
}

void AppTests::brokenFileKeepsPreviousDump() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    s->setQuery(5);
    const QString titleBefore = w.tokenMapView()->titleText();
    for (const QString& bad : {broken_, truncated_, dir_.filePath("missing.h5")}) {
        std::string coreMessage;
        try {
            DumpReader::open(bad.toStdString());
        } catch (const Error& e) {
            coreMessage = e.what();
        }
        QVERIFY(!coreMessage.empty());
        QVERIFY(!w.openFile(bad));
        QCOMPARE(w.lastError(), QString::fromStdString(coreMessage));
        QMessageBox* box = nullptr;
        QTRY_VERIFY((box = w.findChild<QMessageBox*>("errorBox")) != nullptr);
        QVERIFY(box->text().contains(QString::fromStdString(coreMessage)));
        QVERIFY(!box->isModal());
        box->close();
        QTRY_VERIFY(w.findChild<QMessageBox*>("errorBox") == nullptr);
        QCOMPARE(s->path(), small_);
        QVERIFY(s->isOpen());
        QCOMPARE(s->selection().query, Index(5));
        QCOMPARE(w.tokenMapView()->titleText(), titleBefore);
    }
    // The messages are also in the issues list.
    QVERIFY(w.issuesList()->topLevelItemCount() >= 3);
}

void AppTests::nanRowIsDrawnAndListed() {
    MainWindow& w = openWindow(nanDump_);
    Session* s = w.session();
    TokenMapView* v = w.tokenMapView();
    s->setQuery(3);
    const RowData& row = s->row(s->selection().paradigm);
    QCOMPARE(row.status, RowStatus::NonFinite);
    QVERIFY(std::isnan(v->colorMap()->data()->cell(0, 0)));
    bool listedInput = false, listedRow = false;
    for (int i = 0; i < w.issuesList()->topLevelItemCount(); ++i) {
        const QString kind = w.issuesList()->topLevelItem(i)->text(0), text = w.issuesList()->topLevelItem(i)->text(1);
        listedInput |= kind == "non-finite input" && text.contains("token 3");
        listedRow |= kind == "flagged row" && text.contains("row of token 3");
    }
    QVERIFY(listedInput);
    QVERIFY(listedRow);
    // Drawn in the NaN colour: render and look for magenta.
    layoutNow(v);
    const QImage img = v->plot()->toPixmap().toImage();
    bool magenta = false;
    for (int y = 0; y < img.height() && !magenta; y += 3)
        for (int x = 0; x < img.width() && !magenta; x += 3) magenta = img.pixelColor(x, y) == QColor(255, 0, 255);
    QVERIFY(magenta);
    // ... in the grid's cells themselves (the flagged row is NaN throughout), not only in the CLS cell.
    for (const auto& [cx, cy] : {std::pair{0, 0}, std::pair{1, 1}, std::pair{2, 2}})
        QCOMPARE(img.pixelColor(pixelOf(v->gridRect(), cx, cy)), QColor(255, 0, 255));
    // Other rows are unaffected.
    s->setQuery(4);
    QCOMPARE(s->row(s->selection().paradigm).status, RowStatus::Ok);
    QVERIFY(std::isfinite(v->colorMap()->data()->cell(0, 0)));
    // The matrix and the statistics run on this head without crashing.
    w.showView("matrix");
    QTRY_VERIFY_WITH_TIMEOUT(!w.matrixView()->waitingForResults(), 30000);
    QVERIFY(w.matrixView()->titleText().contains("flagged rows"));
    w.showView("layers");
    QTRY_VERIFY_WITH_TIMEOUT(!w.view("layers")->waitingForResults(), 30000);
}

void AppTests::preferencesRoundTripAndApply() {
    Preferences p;
    p.paradigmSpecs = {"relu_c1:norm=subtract,kernel=relu,c=1", "focused:norm=divide,kernel=focused,p=2"};
    p.analysis.spectrum.relativeTolerance = 1e-9;
    p.analysis.localK = {3, 5};
    p.analysis.confusion.tau = 0.01;
    p.sequentialMap = "magma";
    p.divergingMap = "purple-white-green";
    p.nanColor = QColor(10, 200, 30);
    QSettings settings(dir_.filePath("prefs.ini"), QSettings::IniFormat);
    p.save(settings);
    settings.sync();
    QStringList problems;
    const Preferences q = Preferences::load(settings, &problems);
    QVERIFY2(problems.isEmpty(), qPrintable(problems.join("; ")));
    QCOMPARE(q.paradigmSpecs, p.paradigmSpecs);
    QCOMPARE(*q.analysis.spectrum.relativeTolerance, 1e-9);
    QCOMPARE(q.analysis.localK, (std::vector<int>{3, 5}));
    QCOMPARE(q.analysis.confusion.tau, 0.01);
    QCOMPARE(q.sequentialMap, QString("magma"));
    QCOMPARE(q.nanColor, QColor(10, 200, 30));

    Session s(q);
    QCOMPARE(int(s.paradigms().size()), 9);
    QCOMPARE(s.paradigms()[std::size_t(s.paradigmIndex("focused"))].focusingPower, 2.0);
    QCOMPARE(*s.paradigms()[std::size_t(s.paradigmIndex("relu_c1"))].c, 1.0);
    s.open(small_);
    s.setParadigm(s.paradigmIndex("relu_c1"));
    // The custom paradigm's row is the core's for the same definition.
    auto reader = DumpReader::open(small_.toStdString());
    const HeadActivations acts = reader->readHead(0, 0, 0);
    HeadInputs in{&acts.q, &acts.k, reader->info().layers[0].scale, false};
    RowVector want(acts.q.rows());
    AttentionHead(Paradigm::parse("relu_c1:norm=subtract,kernel=relu,c=1"), in).row(s.selection().query, want);
    const RowVector& got = s.row(s.selection().paradigm).values;
    for (Index j = 0; j < want.size(); ++j) QVERIFY(sameValue(got[j], want[j]));
}

void AppTests::preferencesDialogRejectsBadInput() {
    PreferencesDialog d(Preferences{});
    auto* specs = d.findChild<QPlainTextEdit*>("paradigmSpecs");
    QVERIFY(specs);
    specs->setPlainText("oops:norm=sideways");
    Preferences out;
    QString error;
    QVERIFY(!d.collect(&out, &error));
    QVERIFY2(error.contains("oops") && error.contains("sideways"), qPrintable(error));
    specs->setPlainText("mine:norm=divide,kernel=elu1");
    QVERIFY2(d.collect(&out, &error), qPrintable(error));
    QCOMPARE(out.paradigmSpecs, QStringList{"mine:norm=divide,kernel=elu1"});
    QString kError;
    QVERIFY(parseKList("3,4", &kError).empty());
    QVERIFY(kError.contains("\"4\""));
}

void AppTests::dropAndRecentFiles() {
    MainWindow& w = openWindow(nanDump_);
    QMimeData mime;
    mime.setUrls({QUrl::fromLocalFile(small_)});
    QDragEnterEvent enter(QPoint(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&w, &enter);
    QVERIFY(enter.isAccepted());
    QDropEvent drop(QPointF(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&w, &drop);
    QCOMPARE(w.session()->path(), small_);
    QCOMPARE(w.recentFiles().value(0), QFileInfo(small_).absoluteFilePath());
    QCOMPARE(w.recentFiles().value(1), QFileInfo(nanDump_).absoluteFilePath());
}

void AppTests::renderMatchesWindowExport() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    s->setLayer(1);
    s->setQuery(s->layout().token(3, 2));
    w.showView("compare");
    FigureOptions o;
    o.size = QSize(900, 700);
    const QString fromWindow = dir_.filePath("window-compare.png"), fromRender = dir_.filePath("render-compare.png");
    QString error;
    QVERIFY2(w.exportCurrentFigure(fromWindow, o, &error), qPrintable(error));
    QString out, err;
    QTextStream os(&out), es(&err);
    const int rc = runRender(
        {small_, "--view", "compare", "--layer", "1", "--query", "3,2", "--size", "900x700", "-o", fromRender}, os, es);
    QVERIFY2(rc == 0, qPrintable(err));
    const QImage a(fromWindow), b(fromRender);
    QCOMPARE(a.size(), b.size());
    QVERIFY2(a == b, "render and window export differ");
}

void AppTests::renderCommandLine() {
    const QString exe = QStringLiteral(ATTNLENS_GUI_PATH);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("QT_QPA_PLATFORM");  // render must choose offscreen by itself
    auto run = [&](const QStringList& args, QString* err) {
        QProcess p;
        p.setProcessEnvironment(env);
        p.start(exe, args);
        if (!p.waitForFinished(120000)) return -1;
        *err = QString::fromLocal8Bit(p.readAllStandardError());
        return p.exitCode();
    };
    QString err;
    const QString svg = dir_.filePath("cli-matrix.svg"), pdf = dir_.filePath("cli-spectrum.pdf");
    QCOMPARE(run({"render", small_, "--view", "matrix", "--paradigm", "mala", "--log", "-o", svg}, &err), 0);
    QFile f(svg);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QXmlStreamReader xml(&f);
    while (!xml.atEnd()) xml.readNext();
    QVERIFY2(!xml.hasError(), qPrintable(xml.errorString()));
    QCOMPARE(run({"render", small_, "--view", "spectrum", "--paradigms", "softmax,mala", "-o", pdf}, &err), 0);
    QFile pf(pdf);
    QVERIFY(pf.open(QIODevice::ReadOnly));
    QVERIFY(pf.readAll().startsWith("%PDF"));

    QCOMPARE(run({"render", small_, "--view", "nonsense", "-o", dir_.filePath("x.png")}, &err), 2);
    QVERIFY2(err.contains("unknown view \"nonsense\""), qPrintable(err));
    QCOMPARE(run({"render", small_, "--paradigm", "nope", "-o", dir_.filePath("x.png")}, &err), 2);
    QVERIFY2(err.contains("unknown paradigm \"nope\""), qPrintable(err));
    QCOMPARE(run({"render", broken_, "-o", dir_.filePath("x.png")}, &err), 3);
    QCOMPARE(run({"render", small_, "--layer", "9", "-o", dir_.filePath("x.png")}, &err), 2);
    QVERIFY2(err.contains("--layer"), qPrintable(err));
    QCOMPARE(run({"render", small_, "-o", dir_.filePath("missing-dir/x.png")}, &err), 4);
    QVERIFY(!QFile::exists(dir_.filePath("x.png")));
}

// ---- local branch (resources/format.md 1a) -------------------------------------------------------

void AppTests::localBranchTokenMapIsAPlusMc() {
    MainWindow& w = openWindow(dwc_);
    Session* s = w.session();
    TokenMapView* v = w.tokenMapView();
    auto* toggle = w.findChild<QCheckBox*>("localBranch");
    auto* channel = w.findChild<QComboBox*>("localBranchChannel");
    QVERIFY(toggle && channel);
    QVERIFY(toggle->isEnabled());
    QVERIFY(!toggle->isChecked());
    QCOMPARE(channel->count(), 1 + 4);  // mean, channels 0..3
    const TokenLayout& l = s->layout();
    const Index q = l.token(2, 3);
    s->setQuery(q);
    s->setHead(1);
    QString why;
    const RowVector a = coreRow(dwc_, 0, 0, 1, "softmax", q);
    QVERIFY2(mapShowsRow(v->colorMap(), l, a, &why), qPrintable(why));
    QVERIFY(!v->titleText().contains("local branch"));

    // Channel 3, then on: exactly A's row plus row q of the core's M_3.
    channel->setCurrentIndex(channel->findData(3));
    QCOMPARE(s->selection().localChannel, 3);
    QVERIFY(!s->selection().localBranch);
    QVERIFY2(mapShowsRow(v->colorMap(), l, a, &why), qPrintable(why));  // still A while off
    QElapsedTimer timer;
    timer.start();
    toggle->click();
    const double toggleMs = timer.nsecsElapsed() / 1e6;
    QVERIFY(s->selection().localBranch);
    const Matrix m3 = coreBranchMatrix(dwc_, 0, 0, 1, 3);
    RowVector e = a + m3.row(q);
    QVERIFY2(mapShowsRow(v->colorMap(), l, e, &why), qPrintable(why));
    QVERIFY(sameValue(v->prefixValue(0), a[0]));      // prefix columns of M_c are zero
    QVERIFY((m3.row(q).array() != 0).count() == 25);  // 5 x 5 taps, all inside the grid at (2, 3)
    // Signed: diverging range centred on zero.
    QCOMPARE(v->colorMap()->dataRange().lower, -v->colorMap()->dataRange().upper);
    QVERIFY2(v->titleText().contains("softmax + M_c"), qPrintable(v->titleText()));
    QVERIFY2(v->noteText().contains("E_c = A + M_c, local branch dwc, channel 3"), qPrintable(v->noteText()));
    QVERIFY(v->colorScale()->axis()->label().contains("E_c"));
    auto* status = w.findChild<QLabel*>("branchStatus");
    QVERIFY(status && status->text().contains("with local branch (dwc, channel 3)"));
    qInfo("toggle on at N = %lld (token map + comparison + status): %.2f ms", (long long)l.tokens(), toggleMs);

    // The comparison: every panel is its paradigm's A + M_3.
    w.showView("compare");
    CompareView* c = w.compareView();
    for (const auto& p : c->panels()) {
        const std::string name = s->paradigms()[std::size_t(p.paradigm)].name;
        const RowVector want = coreRow(dwc_, 0, 0, 1, name, q) + m3.row(q);
        QVERIFY2(mapShowsRow(p.map, l, want, &why),
                 qPrintable(QString::fromStdString(name) + ": " + why + " title " + p.title->text()));
        QVERIFY(p.title->text().contains("+ M_c"));
    }

    // "mean over channels": A + M_mean, the mean of the four channels' E_c.
    w.showView("tokenmap");
    channel->setCurrentIndex(channel->findData(-1));
    QCOMPARE(s->selection().localChannel, -1);
    const RowVector mean = a + coreBranchMatrix(dwc_, 0, 0, 1, -1).row(q);
    for (int y = 0; y < l.gridH; ++y)
        for (int x = 0; x < l.gridW; ++x)
            QVERIFY(closeValue(v->colorMap()->data()->cell(x, y), mean[l.token(y, x)], 1e-12));
    QVERIFY2(v->noteText().contains("local branch dwc, mean over 4 channels"), qPrintable(v->noteText()));

    // Off again: A.
    toggle->click();
    QVERIFY2(mapShowsRow(v->colorMap(), l, a, &why), qPrintable(why));
    QVERIFY(!v->titleText().contains("+ M_c"));
    QVERIFY2(v->noteText().startsWith("A, without local branch"), qPrintable(v->noteText()));
    QVERIFY(status->text().contains("without local branch"));
    // The B shortcut toggles too.
    v->plot()->setFocus();
    QTest::keyClick(&w, Qt::Key_B);
    QVERIFY(s->selection().localBranch);
}

void AppTests::localBranchRaisesRankInMatrixAndSpectrum() {
    MainWindow& w = openWindow(dwc_);
    Session* s = w.session();
    s->setParadigm(s->paradigmIndex("linear_relu"));
    s->setShown({s->paradigmIndex("softmax"), s->paradigmIndex("linear_relu")});
    s->setLocalChannel(2);
    w.showView("matrix");
    MatrixView* m = w.matrixView();
    QTRY_VERIFY_WITH_TIMEOUT(!m->waitingForResults() && m->titleText().contains("numerical rank"), 30000);
    QVERIFY2(!m->titleText().contains("with local branch ("), qPrintable(m->titleText()));
    QVERIFY2(m->titleText().contains("without local branch"), qPrintable(m->titleText()));
    s->setLocalBranch(true);
    QTRY_VERIFY_WITH_TIMEOUT(!m->waitingForResults() && m->titleText().contains(" without ·"), 30000);

    // The core, independently: A, E_2 = A + M_2 and both spectra.
    auto reader = DumpReader::open(dwc_.toStdString());
    const HeadActivations acts = reader->readHead(0, 0, 0);
    const LayerInfo& l = reader->info().layers[0];
    HeadInputs in{&acts.q, &acts.k, l.scale, l.kernelApplied};
    AttentionHead h(presetParadigm("linear_relu"), in);
    const Matrix a = h.matrix();
    const Matrix e = a + coreBranchMatrix(dwc_, 0, 0, 0, 2);
    for (Index i = 0; i < e.rows(); ++i)
        for (Index j = 0; j < e.cols(); ++j)
            QVERIFY2(sameValue(m->colorMap()->data()->cell(int(j), int(i)), e(i, j)),
                     qPrintable(QString("E[%1,%2]").arg(i).arg(j)));
    const SpectrumResult sa = spectrum(h, l.layout, SpectrumOptions{});
    const SpectrumResult se = matrixSpectrum(e, l.layout, SpectrumOptions{});
    QVERIFY2(sa.rank <= l.dim + 1, qPrintable(QString::number(sa.rank)));
    QVERIFY2(se.rank > sa.rank + 10, qPrintable(QString("%1 vs %2").arg(se.rank).arg(sa.rank)));
    const QString want = QString("numerical rank %1 / %2 with local branch (dwc, channel 2); %3 without")
                             .arg(se.rank)
                             .arg(se.size)
                             .arg(sa.rank);
    QVERIFY2(m->titleText().contains(want), qPrintable(m->titleText() + " | want: " + want));
    QVERIFY(m->titleText().contains("+ local branch"));
    QCOMPARE(m->colorMap()->dataRange().lower, -m->colorMap()->dataRange().upper);  // signed

    // The spectrum view: A's and E_c's spectra per shown paradigm, each with its threshold.
    w.showView("spectrum");
    PlotView* sv = w.view("spectrum");
    QTRY_VERIFY_WITH_TIMEOUT(!sv->waitingForResults(), 30000);
    sv->refreshNow();
    QStringList names;
    for (int i = 0; i < sv->plot()->graphCount(); ++i) names << sv->plot()->graph(i)->name();
    const QString joined = names.join(" | ");
    QVERIFY2(names.contains(QString("linear_relu A: rank %1").arg(sa.rank)), qPrintable(joined));
    QVERIFY2(names.contains(QString("linear_relu A+M_c: rank %1").arg(se.rank)), qPrintable(joined));
    QVERIFY2(joined.contains("softmax A+M_c: rank"), qPrintable(joined));
    QVERIFY(joined.contains("rank threshold of A") && joined.contains("rank threshold of A + M_c"));
    int thresholds = 0;
    for (int i = 0; i < sv->plot()->itemCount(); ++i)
        thresholds += qobject_cast<QCPItemStraightLine*>(sv->plot()->item(i)) != nullptr;
    QCOMPARE(thresholds, 4);  // two paradigms x (A, E_c)
    // The singular values drawn are the core's.
    for (int i = 0; i < sv->plot()->graphCount(); ++i) {
        if (!sv->plot()->graph(i)->name().startsWith("linear_relu A+M_c")) continue;
        auto data = sv->plot()->graph(i)->data();
        QCOMPARE(data->size(), int(se.singularValues.size()));
        QVERIFY(closeValue(data->at(0)->value, se.singularValues[0], 1e-9));
    }

    // A newer selection supersedes E_c jobs still running: flick the channel and the head.
    const int droppedBefore = s->jobs().dropped();
    w.showView("matrix");
    s->setLocalChannel(0);
    s->setLocalChannel(1);
    s->setHead(1);
    waitIdle(s);
    QTRY_VERIFY_WITH_TIMEOUT(!m->waitingForResults(), 30000);
    QVERIFY(s->jobs().dropped() > droppedBefore);
    QVERIFY2(m->titleText().contains("with local branch (dwc, channel 1)") && m->titleText().contains("head 1"),
             qPrintable(m->titleText()));
}

void AppTests::localBranchAbsentDisablesToggle() {
    // No branch anywhere: disabled, and nothing claims one.
    MainWindow& w = openWindow(small_);
    auto* toggle = w.findChild<QCheckBox*>("localBranch");
    QVERIFY(!toggle->isEnabled());
    QVERIFY2(toggle->toolTip().contains("no local branch"), qPrintable(toggle->toolTip()));
    w.session()->setLocalBranch(true);  // a persisted wish does not matter here
    QVERIFY(!toggle->isChecked());
    QVERIFY(w.session()->localBranch() == nullptr);
    QVERIFY(!w.tokenMapView()->titleText().contains("branch"));
    QVERIFY(w.findChild<QLabel*>("shape")->text().contains("no local branch"));
    QVERIFY(!w.findChild<QLabel*>("branchStatus")->isVisible());

    // Layer 0 has one, layer 1 has none.
    QVERIFY(w.openFile(mixed_));
    Session* s = w.session();
    QVERIFY(toggle->isEnabled());
    QVERIFY(toggle->isChecked());  // the wish from above
    QVERIFY(s->localBranch() != nullptr);
    QVERIFY(w.tokenMapView()->titleText().contains("+ M_c"));
    s->setLayer(1);
    QVERIFY(!toggle->isEnabled());
    QVERIFY(!toggle->isChecked());
    QCOMPARE(toggle->toolTip(), QString("this layer has no local branch"));
    QVERIFY(!w.findChild<QComboBox*>("localBranchChannel")->isEnabled());
    QVERIFY(s->localBranch() == nullptr);
    QString why;
    TokenMapView* v = w.tokenMapView();
    QVERIFY2(mapShowsRow(v->colorMap(), s->layout(), coreRow(mixed_, 0, 1, 0, "softmax", s->selection().query), &why),
             qPrintable(why));
    QVERIFY(!v->titleText().contains("+ M_c"));
    QVERIFY(v->noteText().contains("no local branch in this layer"));
    QVERIFY(w.findChild<QLabel*>("branchStatus")->text().contains("no local branch in this layer"));
    w.showView("matrix");
    QTRY_VERIFY_WITH_TIMEOUT(!w.matrixView()->waitingForResults(), 30000);
    QVERIFY2(w.matrixView()->titleText().contains("no local branch in this layer") &&
                 !w.matrixView()->titleText().contains("with local branch"),
             qPrintable(w.matrixView()->titleText()));
    // Back on layer 0 the branch is shown again.
    s->setLayer(0);
    QVERIFY(toggle->isEnabled() && toggle->isChecked());
}

void AppTests::localBranchNanWeightShowsInlineError() {
    MainWindow& w = openWindow(mixed_);
    Session* s = w.session();
    s->setLocalBranch(true);
    s->setLocalChannel(1);  // head 0, V channel 1 -> weight channel 1 (image 1's NaN is in channel 5)
    QVERIFY(s->localBranch() != nullptr);
    s->setImage(1);  // image 1's weights hold a NaN: reading them fails
    QVERIFY(s->localBranch() == nullptr);
    QVERIFY2(s->localBranchError().contains("non-finite"), qPrintable(s->localBranchError()));
    TokenMapView* v = w.tokenMapView();
    layoutNow(v);
    QString why;
    QVERIFY2(mapShowsRow(v->colorMap(), s->layout(), coreRow(mixed_, 1, 0, 0, "softmax", s->selection().query), &why),
             qPrintable(why));
    QVERIFY(!v->titleText().contains("+ M_c"));
    QVERIFY2(v->noteText().contains("local branch NOT added") && v->noteText().contains("mixed.h5:") &&
                 v->noteText().contains("/layers/blocks.0/local_branch/weight"),
             qPrintable(v->noteText()));
    bool listed = false;
    for (int i = 0; i < w.issuesList()->topLevelItemCount(); ++i)
        listed |= w.issuesList()->topLevelItem(i)->text(0) == "local branch" &&
                  w.issuesList()->topLevelItem(i)->text(1).contains("channel 5");
    QVERIFY(listed);
    QVERIFY(w.findChild<QLabel*>("branchStatus")->text().contains("NOT added"));
    for (const QString id : {"compare", "matrix", "spectrum"}) {
        w.showView(id);
        QTRY_VERIFY_WITH_TIMEOUT(!w.view(id)->waitingForResults(), 30000);
    }
    QVERIFY2(w.matrixView()->titleText().contains("local branch NOT added") &&
                 w.matrixView()->titleText().contains("non-finite"),
             qPrintable(w.matrixView()->titleText()));
    QVERIFY(!w.matrixView()->titleText().contains("with local branch"));
    // Image 0 is fine.
    w.showView("matrix");
    s->setImage(0);
    QVERIFY(s->localBranch() != nullptr);
    QTRY_VERIFY_WITH_TIMEOUT(!w.matrixView()->waitingForResults(), 30000);
    QVERIFY(w.matrixView()->titleText().contains("with local branch (inline_residual, channel 1)"));
}

void AppTests::localBranchPersistsAndRenders() {
    {
        MainWindow& w = openWindow(dwc_);
        w.findChild<QComboBox*>("localBranchChannel")->setCurrentIndex(3);  // channel 2
        w.findChild<QCheckBox*>("localBranch")->click();
        w.close();  // saves the preferences and the view state
    }
    {
        MainWindow& w = openWindow(dwc_);
        QVERIFY(w.session()->selection().localBranch);
        QCOMPARE(w.session()->selection().localChannel, 2);
        QVERIFY(w.findChild<QCheckBox*>("localBranch")->isChecked());
        QCOMPARE(w.findChild<QComboBox*>("localBranchChannel")->currentData().toInt(), 2);
        w.session()->setLocalBranch(false);
        w.session()->setLocalChannel(-1);
        w.close();
    }
    {
        QSettings settings;
        QVERIFY(!Preferences::load(settings).localBranch);
    }

    // attnlens render --local-branch [--channel C|mean]: the window's pixels, and usage errors.
    MainWindow& w = openWindow(dwc_);
    Session* s = w.session();
    s->setLocalChannel(1);
    s->setLocalBranch(true);
    s->setQuery(s->layout().token(3, 2));
    w.showView("tokenmap");
    FigureOptions o;
    o.size = QSize(800, 600);
    const QString fromWindow = dir_.filePath("window-branch.png"), fromRender = dir_.filePath("render-branch.png");
    QString error;
    QVERIFY2(w.exportCurrentFigure(fromWindow, o, &error), qPrintable(error));
    QString out, err;
    QTextStream os(&out), es(&err);
    int rc = runRender({dwc_, "--view", "tokenmap", "--local-branch", "--channel", "1", "--query", "3,2", "--size",
                        "800x600", "-o", fromRender},
                       os, es);
    QVERIFY2(rc == 0, qPrintable(err));
    QVERIFY2(QImage(fromWindow) == QImage(fromRender), "render --local-branch and window export differ");
    rc = runRender({dwc_, "--view", "matrix", "--local-branch", "--channel", "mean", "-o", dir_.filePath("m.png")}, os,
                   es);
    QVERIFY2(rc == 0, qPrintable(err));
    QCOMPARE(runRender({dwc_, "--channel", "1", "-o", dir_.filePath("x.png")}, os, es), 2);
    QCOMPARE(runRender({dwc_, "--local-branch", "--channel", "4", "-o", dir_.filePath("x.png")}, os, es), 2);
    QCOMPARE(runRender({small_, "--local-branch", "-o", dir_.filePath("x.png")}, os, es), 2);
    QCOMPARE(runRender({mixed_, "--local-branch", "--layer", "1", "-o", dir_.filePath("x.png")}, os, es), 2);
    QVERIFY2(err.contains("layer blocks.1 has no local branch"), qPrintable(err));
    QCOMPARE(runRender({mixed_, "--local-branch", "--image", "1", "-o", dir_.filePath("x.png")}, os, es), 3);
    QVERIFY2(err.contains("non-finite"), qPrintable(err));
}

// Issue 12: a gzip-compressed float32 dump whose /layers/2/k chunk of image 0 is overwritten (4 KB
// of garbage; the CLI fails with "inflate() failed"). Walking every view over every image, layer
// and head must never throw: the damaged heads show "layer 2 cannot be read: ..." naming the
// dataset, every other head shows its data, and the issues list has the read error.
void AppTests::damagedChunkShowsInlineErrorInEveryView() {
    const QString path = dir_.filePath("damaged.h5");
    const char* script = R"PY(
import sys, h5py, numpy as np
path = sys.argv[1]
rng = np.random.default_rng(7)
B, H, gh, gw, P, d = 2, 2, 6, 6, 1, 32
n = P + gh * gw
with h5py.File(path, "w") as f:
    f.attrs["format"] = "attnlens.dump"
    f.attrs["format_version"] = np.int64(1)
    f.attrs["grid"] = np.array([gh, gw], dtype=np.int64)
    f.attrs["prefix_tokens"] = np.int64(P)
    for l in range(4):
        g = f.create_group(f"layers/{l}")
        g.attrs["index"] = np.int64(l)
        for t in ("q", "k"):
            g.create_dataset(t, data=rng.standard_normal((B, H, n, d)).astype(np.float32),
                             chunks=(1, H, n, d), compression="gzip")
with h5py.File(path, "r") as f:
    info = f["layers/2/k"].id.get_chunk_info(0)
with open(path, "r+b") as fh:
    fh.seek(info.byte_offset + 16)
    fh.write(bytes((i * 97 + 13) & 0xFF for i in range(min(4096, info.size - 32))))
)PY";
    QProcess py;
    py.start("/usr/bin/python3", {"-c", QString::fromUtf8(script), path});
    if (!py.waitForFinished(60000) || py.exitStatus() != QProcess::NormalExit) QSKIP("/usr/bin/python3 did not run");
    if (py.exitCode() != 0) {
        if (py.readAllStandardError().contains("No module named")) QSKIP("python3 lacks h5py or numpy");
        QFAIL("writing the damaged dump failed");
    }
    // The core itself fails on the damaged chunk (what the CLI reports).
    {
        auto reader = DumpReader::open(path.toStdString());
        QVERIFY_THROWS_EXCEPTION(Error, reader->readHead(0, 2, 0));
        reader->readHead(1, 2, 0);  // image 1's chunk is intact
    }

    MainWindow& w = openWindow(path);
    Session* s = w.session();
    QVERIFY2(s->isOpen(), qPrintable(w.lastError()));
    // Every text a view draws (titles, notes, subtitles).
    auto texts = [](PlotView* v) {
        QStringList all;
        for (auto* t : v->plot()->findChildren<QCPTextElement*>()) all << t->text();
        return all.join('\n');
    };
    const QStringList headViews{"tokenmap", "compare", "matrix", "spectrum", "magnitude"};
    const QStringList reportViews{"local", "confusion", "layers"};
    for (int image = 0; image < 2; ++image)
        for (int layer = 0; layer < 4; ++layer)
            for (int head = 0; head < 2; ++head) {
                s->setImage(image);
                s->setLayer(layer);
                s->setHead(head);
                const bool damaged = image == 0 && layer == 2;
                for (const QString& id : headViews + reportViews) {
                    w.showView(id);
                    PlotView* v = w.view(id);
                    QVERIFY(v);
                    v->refreshNow();
                    QTRY_VERIFY_WITH_TIMEOUT(!v->waitingForResults(), 30000);
                    waitIdle(s);
                    v->refreshNow();
                    const QString text = texts(v);
                    const QString where = QStringLiteral("%1, image %2, layer %3, head %4:\n%5")
                                              .arg(id)
                                              .arg(image)
                                              .arg(layer)
                                              .arg(head)
                                              .arg(text);
                    if (!headViews.contains(id)) continue;  // whole-dump statistics: no exception is enough
                    if (damaged) {
                        QVERIFY2(text.contains("layer 2 cannot be read") && text.contains("/layers/2/k") &&
                                     text.contains("inflate() failed"),
                                 qPrintable(where));
                    } else {
                        QVERIFY2(!text.contains("cannot be read"), qPrintable(where));
                    }
                }
                TokenMapView* tm = w.tokenMapView();
                tm->refreshNow();
                QCOMPARE(tm->colorMap()->visible(), !damaged);
                if (!damaged) {
                    QString why;
                    QVERIFY2(mapShowsRow(tm->colorMap(), s->layout(),
                                         coreRow(path, image, layer, head, "softmax", s->selection().query), &why),
                             qPrintable(why));
                }
            }
    // The layer after the damaged one, on the damaged image, still shows its data.
    s->setImage(0);
    s->setLayer(2);
    s->setLayer(3);
    w.showView("tokenmap");
    w.tokenMapView()->refreshNow();
    QString why;
    QVERIFY2(mapShowsRow(w.tokenMapView()->colorMap(), s->layout(),
                         coreRow(path, 0, 3, s->selection().head, "softmax", s->selection().query), &why),
             qPrintable(why));
    bool listed = false;
    for (int i = 0; i < w.issuesList()->topLevelItemCount(); ++i)
        listed |= w.issuesList()->topLevelItem(i)->text(0) == "unreadable data" &&
                  w.issuesList()->topLevelItem(i)->text(1).contains("/layers/2/k");
    QVERIFY(listed);
    // The whole-dump statistics over all images cannot be computed: they say why, not "computing…".
    w.showView("confusion");
    w.view("confusion")->refreshNow();
    QVERIFY2(texts(w.view("confusion")).contains("/layers/2/k"), qPrintable(texts(w.view("confusion"))));
}

// Issue 14 item 1 / issue 12: HDF5 1.10 crashes on one damaged global heap and loops forever on
// another. The window checks each new dump in a child process, so it keeps the open dump and says
// what happened instead of dying or freezing.
void AppTests::damagedMetadataThatCrashesOrStallsHdf5KeepsPreviousDump() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    s->setQuery(3);
    QFile source(small_);
    QVERIFY(source.open(QIODevice::ReadOnly));
    const QByteArray bytes = source.readAll();
    const qsizetype heap = bytes.indexOf("GCOL");
    QVERIFY(heap > 0);
    // The first heap object's 8-byte size (after signature, version, reserved, collection size,
    // object index, reference count, reserved).
    auto damaged = [&](const QString& name, quint64 size) {
        QByteArray copy = bytes;
        for (int i = 0; i < 8; ++i) copy[heap + 24 + i] = char((size >> (8 * i)) & 0xff);
        const QString path = dir_.filePath(name);
        QFile out(path);
        if (!out.open(QIODevice::WriteOnly) || out.write(copy) != copy.size()) return QString();
        return path;
    };
    qputenv("ATTNLENS_OPEN_TIMEOUT", "2");
    struct Case {
        QString path;
        QString message;
    };
    const Case cases[] = {
        {damaged("crashes.h5", 0x7fffffff0ull), "the HDF5 library crashed (SIGSEGV) reading this file"},
        {damaged("stalls.h5", 4000), "opening the file did not finish within 2 s"},
    };
    for (const Case& c : cases) {
        QVERIFY(!c.path.isEmpty());
        QElapsedTimer timer;
        timer.start();
        QVERIFY(!w.openFile(c.path));
        QVERIFY2(timer.elapsed() < 6000, qPrintable(QString::number(timer.elapsed())));
        QVERIFY2(w.lastError().contains(c.message), qPrintable(w.lastError()));
        QVERIFY(w.lastError().startsWith(c.path));
        QCOMPARE(s->path(), small_);
        QCOMPARE(s->selection().query, Index(3));
        if (auto* box = w.findChild<QMessageBox*>("errorBox")) box->close();
    }
    qunsetenv("ATTNLENS_OPEN_TIMEOUT");
    // The dump that was open still reads.
    s->setQuery(4);
    QCOMPARE(s->row(s->selection().paradigm).status, RowStatus::Ok);
}

int main(int argc, char** argv) {
    // Session::open checks each dump in a child process started from this executable.
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    // Offscreen unless told otherwise, and settings in a private directory.
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    QTemporaryDir config;
    qputenv("XDG_CONFIG_HOME", config.path().toLocal8Bit());
    QApplication app(argc, argv);
    QApplication::setOrganizationName("AttnLensTests");
    QApplication::setApplicationName("attnlens-tests");
    AppTests tests;
    return QTest::qExec(&tests, argc, argv);
}

#include "app_tests.moc"
