// The shared fixture of the GUI test suites: test dumps, the window under test, comparisons with
// the core, the common main().
#include "app_test_fixture.h"

#include "test_environment.h"

#include <QApplication>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attnlens/dump/dump.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/dump/synth.h"
#include "document/example_dump.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui::test {

void writeDumpRoot(DumpWriter& writer, int gridH, int gridW, int prefix) {
    writer.setRootAttribute("format", std::string("attnlens.dump"));
    writer.setRootAttribute("format_version", std::int64_t(1));
    writer.setRootAttribute("grid", std::vector<std::int64_t>{gridH, gridW});
    writer.setRootAttribute("prefix_tokens", std::int64_t(prefix));
}

namespace {

// A dump with a local branch in its first layer only (resources/format.md 1a): 2 images, 2 heads,
// grid 4 x 4 + CLS, d = d_v = 4; layer "blocks.0" has per-image 3 x 3 weights over all 8 channels
// (InLine's layout), with a NaN in image 1's channel 5 when nanInImage1; "blocks.1" has none.
void writeMixedBranchDump(const QString& path, bool nanInImage1) {
    const int b = 2, heads = 2, h = 4, w = 4, n = 1 + h * w, d = 4, c = heads * d, k = 3;
    DumpWriter writer(path.toStdString());
    writeDumpRoot(writer, h, w);
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

}  // namespace

RowVector coreRow(const QString& path, int image, int layer, int head, const std::string& paradigm, Index query,
                  RowStatus* status) {
    auto reader = DumpReader::open(path.toStdString());
    const HeadActivations acts = reader->readHead(image, layer, head);
    const LayerInfo& l = reader->info().layers[std::size_t(layer)];
    AttentionHead h(presetParadigm(paradigm), headInputs(l, acts, head));
    RowVector r(h.keys());
    const RowStatus s = h.row(query, r);
    if (status) *status = s;
    return r;
}

bool sameValue(double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return std::abs(a - b) <= 1e-12 * (1 + std::abs(b));
}

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

void AppTestFixture::expectEveryViewShows(MainWindow& w) {
    Session* s = w.session();
    for (PlotView* v : w.views()) {
        w.showView(v->viewId());
        QTRY_VERIFY_WITH_TIMEOUT((v->refreshNow(), !s->jobs().busy()), 60000);
        v->refreshNow();
        const QString texts = plotTexts(v);
        QVERIFY2(!texts.contains(QStringLiteral("FAILED")) && !texts.contains(QStringLiteral("NOT SHOWN")),
                 qPrintable(v->viewId() + ": " + texts));
    }
    QCOMPARE(w.issuesList()->topLevelItemCount(), 0);
}

int layerNamed(const DumpInfo& info, const std::string& name) {
    for (std::size_t i = 0; i < info.layers.size(); ++i)
        if (info.layers[i].name == name) return int(i);
    return -1;
}

QString plotTexts(PlotView* v) {
    QStringList all;
    for (auto* t : v->plot()->findChildren<QCPTextElement*>()) all << unwrappedText(t);
    return all.join('\n');
}

namespace {

QString runPython(const char* script, const QStringList& args, const QString& path, QString* why) {
    QProcess py;
    py.start(QStringLiteral("/usr/bin/python3"), QStringList{QStringLiteral("-c"), QString::fromUtf8(script)} + args);
    if (!py.waitForFinished(120000) || py.exitStatus() != QProcess::NormalExit) {
        *why = QStringLiteral("/usr/bin/python3 did not run");
        return {};
    }
    if (py.exitCode() != 0) {
        *why = QString::fromLocal8Bit(py.readAllStandardError());
        return {};
    }
    return path;
}

}  // namespace

bool pythonUnavailable(const QString& why) {
    return why.contains(QStringLiteral("did not run")) || why.contains(QStringLiteral("No module named"));
}

QString writeDamagedDump(const QString& path, QString* why) {
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
    return runPython(script, {path}, path, why);
}

QString writeDamagedExampleCopy(const QString& path, QString* why) {
    const char* script = R"PY(
import sys, shutil, struct, h5py
src, path = sys.argv[1], sys.argv[2]
shutil.copyfile(src, path)
with h5py.File(path, "r") as f:
    lost = f["layers/mala.block1/k"].id.get_chunk_info(0)
    nan = f["layers/inline.block2/q"].id.get_chunk_info(3)
data = bytearray(open(path, "rb").read())
# The chunk index (a version-1 B-tree node, "TREE") holds each chunk's address: the one of image 0
# is made to point far past the end of the file.
needle = struct.pack("<Q", lost.byte_offset)
hits, at = [], data.find(needle)
while at >= 0:
    tree = data.rfind(b"TREE", 0, at)
    if tree >= 0 and at - tree < 8192 and not (lost.byte_offset <= at < lost.byte_offset + lost.size):
        hits.append(at)
    at = data.find(needle, at + 1)
if len(hits) != 1:
    sys.exit(f"expected one chunk-index entry for the chunk at {lost.byte_offset}, found {len(hits)}")
data[hits[0]:hits[0] + 8] = struct.pack("<Q", 1 << 40)
# float16 0xFFFF is NaN: head 0's CLS query of image 3 (chunk layout 1 x heads x N x d).
data[nan.byte_offset:nan.byte_offset + 64] = bytes([0xFF]) * 64
open(path, "wb").write(bytes(data))
)PY";
    QString error;
    const QString example = findOrCreateExampleDump(&error);
    if (example.isEmpty()) {
        *why = QStringLiteral("no bundled example: ") + error;
        return {};
    }
    return runPython(script, {example, path}, path, why);
}

QPoint pixelOf(QCPAxisRect* rect, double x, double y) {
    return QPoint(qRound(rect->axis(QCPAxis::atBottom)->coordToPixel(x)),
                  qRound(rect->axis(QCPAxis::atLeft)->coordToPixel(y)));
}

MainWindow& AppTestFixture::openWindow(const QString& path) {
    window_ = std::make_unique<MainWindow>();
    window_->resize(1280, 860);
    window_->show();
    if (!QTest::qWaitForWindowExposed(window_.get())) qWarning("window not exposed");
    if (!window_->openFile(path)) qWarning("open failed: %s", qPrintable(window_->lastError()));
    return *window_;
}

void AppTestFixture::layoutNow(PlotView* v) {
    v->refreshNow();
    v->plot()->replot(QCustomPlot::rpImmediateRefresh);
    v->plot()->replot(QCustomPlot::rpImmediateRefresh);  // after the square-cell fix
}

void AppTestFixture::initTestCase() {
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
        writeDumpRoot(w, 3, 3);
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

void AppTestFixture::cleanup() {
    if (window_) {
        window_->session()->jobs().cancelAll();
        window_->session()->jobs().waitForIdle();
    }
    window_.reset();
}

int runAppTests(int argc, char** argv, const std::function<std::unique_ptr<QObject>()>& makeTests) {
    attnlens::test::controlTestEnvironment();
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    QTemporaryDir config, data;
    qputenv("XDG_CONFIG_HOME", config.path().toLocal8Bit());
    qputenv("XDG_DATA_HOME", data.path().toLocal8Bit());  // the last session (MainWindow::lastSessionPath)
    QApplication app(argc, argv);
    QApplication::setOrganizationName("AttnLensTests");
    QApplication::setApplicationName("attnlens-tests");
    const std::unique_ptr<QObject> tests = makeTests();
    return QTest::qExec(tests.get(), argc, argv);
}

}  // namespace attnlens::gui::test
