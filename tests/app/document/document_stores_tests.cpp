// The document's stores without a Session or a window (issue 48 item 2): the local branch,
// spectrum, rollout and statistics stores are built from a JobRunner (synchronous here) and a
// SelectionContext the test implements on the bundled example, and each result is checked against
// the library computed a second way on heads read by a second reader.
#include <QSignalSpy>
#include <QTest>
#include <cmath>
#include <memory>

#include "app_test_fixture.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/rollout.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/local_branch.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/io/error.h"
#include "document/job_runner.h"
#include "document/local_branch_store.h"
#include "document/rollout_store.h"
#include "document/selection.h"
#include "document/spectrum_store.h"
#include "document/statistics_store.h"

namespace attnlens::gui::test {

namespace {

const QString kExample = QStringLiteral(ATTNLENS_SOURCE_DIR "/resources/examples/attnlens-example.h5");

// The example dump as the stores see it: its reader, the preset paradigms, a head cache, and a
// selection the test sets by hand.
class ExampleSelection : public SelectionContext {
public:
    ExampleSelection()
        : reader_(DumpReader::open(kExample.toStdString())),
          heads_([this](IssueKind, const QString& text) { issues.push_back(text); }) {
        heads_.reset(reader_, kExample);
        paradigms_ = prefs_.paradigms();
        sel.shown = {paradigmIndex("softmax"), paradigmIndex("mala")};
    }
    bool isOpen() const override { return true; }
    QString path() const override { return kExample; }
    std::shared_ptr<const DumpReader> reader() const override { return reader_; }
    const Preferences& preferences() const override { return prefs_; }
    const std::vector<Paradigm>& paradigms() const override { return paradigms_; }
    const Selection& selection() const override { return sel; }
    QString headError(const HeadKey& key) override { return heads_.headError(key); }
    std::shared_ptr<const AttentionHead> head(const HeadKey& key, int paradigm) override {
        return heads_.head(key, paradigms_.at(std::size_t(paradigm)));
    }

    int layer(const std::string& name) const { return layerNamed(info(), name); }
    // Preferences changed without telling the stores (the Session clears them): their keys must
    // tell results apart.
    Preferences& mutablePreferences() { return prefs_; }

    Selection sel;
    QStringList issues;

private:
    std::shared_ptr<const DumpReader> reader_;
    Preferences prefs_;
    std::vector<Paradigm> paradigms_;
    HeadCache heads_;
};

// The second way: a reader of its own, the head built from what it reads.
struct DirectHead {
    std::unique_ptr<DumpReader> reader = DumpReader::open(kExample.toStdString());
    HeadActivations activations;
    std::unique_ptr<AttentionHead> head;
    DirectHead(int image, int layer, int head, const Paradigm& paradigm) {
        activations = reader->readHead(image, layer, head);
        this->head = std::make_unique<AttentionHead>(
            paradigm, headInputs(reader->info().layers[std::size_t(layer)], activations, head));
    }
};

bool close(double a, double b, double relative = 1e-9) {
    return std::abs(a - b) <= relative * std::max({1.0, std::abs(a), std::abs(b)});
}

}  // namespace

class DocumentStoresTests : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void branchKernelIsTheDumpsChannelOrTheirMean();
    void spectraAreTheLibrarysAndLandOnce();
    void resultsAreKeptByEverythingTheyDependOn();
    void rolloutRowIsTheBlockwiseRowOfTheLibrary();
    void layerReportIsAnalyzeDumpsOnTheCoveredLayers();
};

void DocumentStoresTests::branchKernelIsTheDumpsChannelOrTheirMean() {
    ExampleSelection context;
    LocalBranchStore store(context);
    QVERIFY(store.inDump());
    context.sel.layer = context.layer("softmax.block0");
    const bool softmaxHasBranch = context.layerInfo().localBranch.has_value();
    context.sel.layer = context.layer("mala.block0");
    context.sel.head = 1;
    QVERIFY(store.inLayer());
    QCOMPARE(store.kernel(), std::shared_ptr<const BranchKernel>());  // the toggle is off
    QCOMPARE(store.status(), QStringLiteral("without local branch"));

    context.sel.localBranch = true;
    context.sel.localChannel = 5;
    const LayerInfo& layer = context.layerInfo();
    const LocalBranchInfo& branch = *layer.localBranch;
    const LocalBranchWeights weights = DumpReader::open(kExample.toStdString())->readLocalBranch(0, context.sel.layer);
    const auto one = store.kernel();
    QVERIFY(one);
    QCOMPARE(one->channel, 5);
    QCOMPARE(one->weightChannel, branch.weightChannel(1, 5, layer.valueDim));
    const LocalKernel direct = weights.kernel(one->weightChannel);
    const LocalKernel shown = one->kernel();
    QCOMPARE(shown.weights.size(), direct.weights.size());
    for (std::size_t i = 0; i < direct.weights.size(); ++i) QCOMPARE(shown.weights[i], direct.weights[i]);
    QVERIFY(store.status().contains(QStringLiteral("channel 5")));
    QCOMPARE(store.kernel(), one);  // the same selection: the same kernel

    // The mean over the head's V channels, summed here channel by channel.
    context.sel.localChannel = -1;
    const auto mean = store.kernel();
    QVERIFY(mean && mean != one);
    const LocalKernel meanKernel = mean->kernel();
    for (std::size_t i = 0; i < direct.weights.size(); ++i) {
        double sum = 0;
        for (int c = 0; c < layer.valueDim; ++c)
            sum += weights.kernel(branch.weightChannel(1, c, layer.valueDim)).weights[i];
        QVERIFY2(close(meanKernel.weights[i], sum / layer.valueDim, 1e-12), qPrintable(QString::number(i)));
    }
    if (!softmaxHasBranch) {
        context.sel.layer = context.layer("softmax.block0");
        QVERIFY(!store.inLayer());
        QCOMPARE(store.kernel(), std::shared_ptr<const BranchKernel>());
        QCOMPARE(store.status(), QStringLiteral("no local branch in this layer"));
    }
    QVERIFY(context.issues.isEmpty());
}

void DocumentStoresTests::spectraAreTheLibrarysAndLandOnce() {
    ExampleSelection context;
    JobRunner jobs;
    jobs.setSynchronous(true);
    LocalBranchStore branch(context);
    SpectrumStore store(jobs, context, branch);
    QSignalSpy changed(&store, &SpectrumStore::changed);
    context.sel.layer = context.layer("mala.block0");
    context.sel.head = 2;
    for (const char* name : {"softmax", "mala"}) {
        const int p = context.paradigmIndex(name);
        const SpectrumResult* s = store.spectrum(p);
        QVERIFY2(s, name);
        const DirectHead d(0, context.sel.layer, 2, context.paradigms()[std::size_t(p)]);
        const SpectrumResult expected =
            spectrum(*d.head, context.attentionLayout(), context.preferences().analysis.spectrum);
        QCOMPARE(s->rank, expected.rank);
        QCOMPARE(s->singularValues.size(), expected.singularValues.size());
        for (std::size_t i = 0; i < expected.singularValues.size(); ++i)
            QVERIFY(close(s->singularValues[i], expected.singularValues[i]));
        QVERIFY(store.error(p).isEmpty());
    }
    QCOMPARE(changed.count(), 2);
    QCOMPARE(jobs.delivered(), 2);
    store.request({context.paradigmIndex("softmax"), context.paradigmIndex("mala")});  // held: no job
    QCOMPARE(jobs.delivered(), 2);
    QVERIFY(!store.branchSpectrum(context.paradigmIndex("mala")));  // no branch toggled on

    // E_c = A + M_c with channel 3's kernel: the dense matrix and its SVD formed here.
    context.sel.localBranch = true;
    context.sel.localChannel = 3;
    const int p = context.paradigmIndex("mala");
    const SpectrumResult* e = store.branchSpectrum(p);
    QVERIFY(e);
    QCOMPARE(changed.count(), 3);
    const DirectHead d(0, context.sel.layer, 2, context.paradigms()[std::size_t(p)]);
    const auto kernel = branch.kernel();
    Matrix a = d.head->matrix();
    const LocalBranchGrid grid = kernel->grid();
    addLocalBranch(a, kernel->kernel(), grid);
    const SpectrumResult expected =
        matrixSpectrum(a, context.layout(), context.preferences().analysis.spectrum, grid.windows);
    QCOMPARE(e->rank, expected.rank);
    QVERIFY(e->rank > store.spectrum(p)->rank);  // FLatten's claim on the example: A + M_c has more rank
    for (std::size_t i = 0; i < expected.singularValues.size(); ++i)
        QVERIFY(close(e->singularValues[i], expected.singularValues[i]));
}

// The caches' keys (issue 48 item 2: typed, each a struct of what its result depends on): a
// result is held for its head, paradigm, options and branch kernel, and any of them changing is
// another result, computed once; going back finds the held one without a job.
void DocumentStoresTests::resultsAreKeptByEverythingTheyDependOn() {
    ExampleSelection context;
    JobRunner jobs;
    jobs.setSynchronous(true);
    LocalBranchStore branch(context);
    SpectrumStore store(jobs, context, branch);
    context.sel.layer = context.layer("mala.block0");
    context.sel.head = 2;
    const int mala = context.paradigmIndex("mala"), softmax = context.paradigmIndex("softmax");
    const int defaultRank = store.spectrum(mala)->rank;
    QCOMPARE(jobs.delivered(), 1);
    context.sel.head = 1;  // another head
    QVERIFY(store.spectrum(mala));
    QCOMPARE(jobs.delivered(), 2);
    context.sel.head = 2;
    QCOMPARE(store.spectrum(mala)->rank, defaultRank);  // held
    QCOMPARE(jobs.delivered(), 2);
    QVERIFY(store.spectrum(softmax));  // another paradigm
    QCOMPARE(jobs.delivered(), 3);
    // Another tolerance: another spectrum (its rank counts more values at a looser tolerance).
    context.mutablePreferences().analysis.spectrum.relativeTolerance = 0.5;
    const SpectrumResult* loose = store.spectrum(mala);
    QVERIFY(loose);
    QCOMPARE(jobs.delivered(), 4);
    QVERIFY(loose->rank < defaultRank);
    const DirectHead d(0, context.sel.layer, 2, context.paradigms()[std::size_t(mala)]);
    QCOMPARE(loose->rank, spectrum(*d.head, context.attentionLayout(), context.preferences().analysis.spectrum).rank);
    context.mutablePreferences().analysis.spectrum.relativeTolerance.reset();
    QCOMPARE(store.spectrum(mala)->rank, defaultRank);  // held
    QCOMPARE(jobs.delivered(), 4);
    // E_c of two channels: two results; back to the first, held.
    context.sel.localBranch = true;
    context.sel.localChannel = 3;
    const int rank3 = store.branchSpectrum(mala)->rank;
    QCOMPARE(jobs.delivered(), 5);
    context.sel.localChannel = 4;
    QVERIFY(store.branchSpectrum(mala));
    QCOMPARE(jobs.delivered(), 6);
    context.sel.localChannel = 3;
    QCOMPARE(store.branchSpectrum(mala)->rank, rank3);
    QCOMPARE(jobs.delivered(), 6);
}

void DocumentStoresTests::rolloutRowIsTheBlockwiseRowOfTheLibrary() {
    ExampleSelection context;
    JobRunner jobs;
    jobs.setSynchronous(true);
    RolloutStore store(jobs, context);
    QSignalSpy changed(&store, &RolloutStore::changed);
    QSignalSpy optionsChanged(&store, &RolloutStore::optionsChanged);
    context.sel.layer = context.layer("softmax.block2");
    context.sel.map = MapContent::RolloutOfQuery;
    context.sel.query = 40;
    const std::vector<int> layers = store.layers();
    QCOMPARE(layers, (std::vector<int>{context.layer("softmax.block0"), context.layer("softmax.block1"),
                                       context.layer("softmax.block2")}));
    for (const char* name : {"softmax", "mala"}) {
        const int p = context.paradigmIndex(name);
        const RowData& row = store.row(p);  // N = 197: the whole product, then its row
        QVERIFY2(row.error.isEmpty(), qPrintable(row.error));
        QVERIFY(!row.pending && row.rollout);
        // The library's blockwise row (rolloutRow: O(L N^2 d), never forms the product).
        std::vector<std::unique_ptr<DirectHead>> heads;
        std::vector<RolloutLayer> rolloutLayers;
        for (int l : layers) {
            RolloutLayer layer;
            for (int h = 0; h < context.info().layers[std::size_t(l)].heads; ++h) {
                heads.push_back(std::make_unique<DirectHead>(0, l, h, context.paradigms()[std::size_t(p)]));
                layer.push_back(heads.back()->head.get());
            }
            rolloutLayers.push_back(layer);
        }
        const RowVector expected = rolloutRow(rolloutLayers, 40, store.options());
        QCOMPARE(row.values.size(), expected.size());
        for (Index j = 0; j < expected.size(); ++j)
            QVERIFY2(close(row.values[j], expected[j], 1e-9),
                     qPrintable(QStringLiteral("%1 token %2").arg(name).arg(j)));
    }
    QCOMPARE(changed.count(), 2);  // one product per paradigm

    RolloutOptions options;
    options.residual = 0.25;
    store.setOptions(options);
    QCOMPARE(optionsChanged.count(), 1);
    options.residual = 2;
    QVERIFY_THROWS_EXCEPTION(Error, store.setOptions(options));
    QVERIFY(store.description().contains(QStringLiteral("softmax.block0 … softmax.block2 (3 layers)")));
}

void DocumentStoresTests::layerReportIsAnalyzeDumpsOnTheCoveredLayers() {
    ExampleSelection context;
    JobRunner jobs;
    jobs.setSynchronous(true);
    StatisticsStore store(jobs, context);
    QSignalSpy changed(&store, &StatisticsStore::changed);
    const int layer = context.layer("inline.block1");
    store.setLayers({layer});
    QCOMPARE(changed.count(), 1);
    QCOMPARE(store.coverageText(), QStringLiteral("layer inline.block1"));
    QVERIFY_THROWS_EXCEPTION(Error, store.setModel("nonesuch"));
    QVERIFY_THROWS_EXCEPTION(Error, store.setLayers({999}));
    context.sel.image = 3;

    const auto report = store.report(StatsScope::CurrentImage);
    QVERIFY(report);
    QCOMPARE(changed.count(), 2);
    AnalyzeRequest request;
    for (int p : context.sel.shown) request.paradigms.push_back(context.paradigms()[std::size_t(p)]);
    request.images = {3};
    request.layers = {layer};
    request.options = context.preferences().analysis;
    request.options.stats = StatSelection::parse("local,entropy,confusion");
    request.options.localBranch.enabled = false;
    const AnalysisReport expected = analyzeDump(*DumpReader::open(kExample.toStdString()), request);
    QCOMPARE(report->records.size(), expected.records.size());
    QCOMPARE(int(expected.records.size()), 2 * context.info().layers[std::size_t(layer)].heads);
    for (std::size_t i = 0; i < expected.records.size(); ++i) {
        const HeadStatistics& got = report->records[i].stats;
        const HeadStatistics& want = expected.records[i].stats;
        QCOMPARE(report->records[i].head, expected.records[i].head);
        QCOMPARE(got.local.size(), want.local.size());
        for (std::size_t k = 0; k < want.local.size(); ++k) QCOMPARE(got.local[k].mean, want.local[k].mean);
        QCOMPARE(got.entropy->meanEntropy, want.entropy->meanEntropy);
        QCOMPARE(got.confusion.has_value(), want.confusion.has_value());
    }
    // Held under its inputs: asked again, no job; another image is another report.
    const int delivered = jobs.delivered();
    QCOMPARE(store.report(StatsScope::CurrentImage), report);
    QCOMPARE(jobs.delivered(), delivered);
    context.sel.image = 4;
    QVERIFY(store.report(StatsScope::CurrentImage) != report);
    QCOMPARE(jobs.delivered(), delivered + 1);
    QVERIFY(context.issues.isEmpty());
}

}  // namespace attnlens::gui::test

int main(int argc, char** argv) {
    return attnlens::gui::test::runAppTests<attnlens::gui::test::DocumentStoresTests>(argc, argv);
}

#include "document_stores_tests.moc"
