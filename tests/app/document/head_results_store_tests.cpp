// The document without a window (issue 48 item 2): the HeadResultsStore is built from a JobRunner
// alone, runs each per-head job from values, holds its result under the key it was asked for and
// does not run a key again while it is held, failed or on its way. Each result is checked against
// the library computed directly on the same head.
#include <QSignalSpy>
#include <QTest>
#include <cmath>
#include <memory>
#include <random>

#include "app_test_fixture.h"
#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/attention.h"
#include "attnlens/attention/paradigm.h"
#include "document/head_results_store.h"
#include "document/job_runner.h"

namespace attnlens::gui::test {

namespace {

// Distinct keys for the tests' jobs (a key is what its result depends on: here only a name).
MatrixKey matrixKey(const char* name) {
    MatrixKey k;
    k.paradigm = name;
    return k;
}

// A random head of N = 12 tokens, d = 4, under a preset; the activations outlive it.
struct TestHead {
    std::shared_ptr<HeadActivations> act = std::make_shared<HeadActivations>();
    std::shared_ptr<const AttentionHead> head;
    explicit TestHead(const char* paradigm, unsigned seed = 7) {
        std::mt19937 rng(seed);
        std::normal_distribution<double> g;
        act->q = Matrix(12, 4);
        act->k = Matrix(12, 4);
        for (Index i = 0; i < 12; ++i)
            for (Index j = 0; j < 4; ++j) {
                act->q(i, j) = g(rng);
                act->k(i, j) = g(rng);
            }
        head =
            std::make_shared<const AttentionHead>(presetParadigm(paradigm), HeadInputs{&act->q, &act->k, 0.5, false});
    }
};

}  // namespace

class HeadResultsStoreTests : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void matrixLandsUnderItsKeyOnceAndMatchesTheHead();
    void windowOrderPermutesRowsAndColumns();
    void failuresStayUntilForgottenAndCancellationsUntilTheSelectionMoves();
    void pairsAndCurvesAreTheLibrarysOnTheSameHead();
};

void HeadResultsStoreTests::matrixLandsUnderItsKeyOnceAndMatchesTheHead() {
    JobRunner jobs;
    jobs.setSynchronous(true);
    HeadResultsStore store(jobs);
    QSignalSpy changed(&store, &HeadResultsStore::changed);
    const TestHead t("softmax");
    MatrixJob job;
    job.head = t.head;
    job.where = "test: head 0";
    store.requestMatrix(matrixKey("a"), job);
    QCOMPARE(changed.count(), 1);
    QCOMPARE(jobs.delivered(), 1);
    const auto* image = store.matrixImages().find(matrixKey("a"));
    QVERIFY(image && *image);
    const Matrix a = t.head->matrix();
    QCOMPARE((*image)->tokens, 12LL);
    QCOMPARE((*image)->keys, 12LL);
    for (Index i = 0; i < 12; ++i)
        for (Index j = 0; j < 12; ++j) QCOMPARE((*image)->data->cell(int(j), int(i)), a(i, j));
    // Held: not run again; another key is another job.
    store.requestMatrix(matrixKey("a"), job);
    QCOMPARE(jobs.delivered(), 1);
    store.requestMatrix(matrixKey("b"), job);
    QCOMPARE(jobs.delivered(), 2);
    store.clear();
    QVERIFY(!store.matrixImages().find(matrixKey("a")) && !store.matrixImages().find(matrixKey("b")));
}

void HeadResultsStoreTests::windowOrderPermutesRowsAndColumns() {
    JobRunner jobs;
    jobs.setSynchronous(true);
    HeadResultsStore store(jobs);
    const TestHead t("linear_relu");
    MatrixJob job;
    job.head = t.head;
    for (Index r = 11; r >= 0; --r) job.order.push_back(r);  // reversed
    store.requestMatrix(matrixKey("reversed"), job);
    const auto* image = store.matrixImages().find(matrixKey("reversed"));
    QVERIFY(image && *image);
    const Matrix a = t.head->matrix();
    for (Index r = 0; r < 12; ++r) {
        QCOMPARE((*image)->tokenAt(r), 11 - r);
        QCOMPARE((*image)->displayOf(11 - r), r);
        for (Index c = 0; c < 12; ++c) QCOMPARE((*image)->data->cell(int(c), int(r)), a(11 - r, 11 - c));
    }
}

void HeadResultsStoreTests::failuresStayUntilForgottenAndCancellationsUntilTheSelectionMoves() {
    JobRunner jobs;
    jobs.setSynchronous(true);
    HeadResultsStore store(jobs);
    const TestHead t("softmax");
    MatrixJob job;
    job.head = t.head;
    store.matrixImages().fail(matrixKey("bad"), JobFailure{ErrorKind::Input, QStringLiteral("damaged chunk")});
    store.matrixImages().fail(matrixKey("stopped"), JobFailure::cancellation());
    store.requestMatrix(matrixKey("bad"), job);
    store.requestMatrix(matrixKey("stopped"), job);
    QCOMPARE(jobs.delivered(), 0);
    QCOMPARE(store.matrixImages().error(matrixKey("bad")), QStringLiteral("damaged chunk"));
    store.forgetCancelled();  // the selection moved: a cancelled head is computed again
    QVERIFY(store.matrixImages().failed(matrixKey("bad")));
    QVERIFY(!store.matrixImages().failed(matrixKey("stopped")));
    store.requestMatrix(matrixKey("stopped"), job);
    QCOMPARE(jobs.delivered(), 1);
    store.matrixImages().forget(matrixKey("bad"));  // Retry
    store.requestMatrix(matrixKey("bad"), job);
    QCOMPARE(jobs.delivered(), 2);
    // A sweep's cancellation is kept until Retry (a job over the whole layer).
    store.sweeps().fail(SweepKey{0, 0, {}, "sweep", {}, {}, {}}, JobFailure::cancellation());
    store.forgetCancelled();
    QVERIFY(store.sweeps().cancelled(SweepKey{0, 0, {}, "sweep", {}, {}, {}}));
}

void HeadResultsStoreTests::pairsAndCurvesAreTheLibrarysOnTheSameHead() {
    JobRunner jobs;
    jobs.setSynchronous(true);
    HeadResultsStore store(jobs);
    const TestHead t("linear_relu", 11);
    ConfusedPairsJob pairs;
    pairs.head = t.head;
    pairs.activations = t.act;
    pairs.options.tau = 2.0;
    pairs.listed = 5;
    store.requestConfusedPairs(ConfusedPairsKey{"p", {}, {}, 0, 0}, pairs);
    const auto* got = store.confusedPairs().find(ConfusedPairsKey{"p", {}, {}, 0, 0});
    QVERIFY(got && *got);
    const ConfusedPairList direct = confusedPairs(*t.head, t.act->q, pairs.options, 5);
    QCOMPARE((*got)->list.counts.confusedPairs, direct.counts.confusedPairs);
    QCOMPARE((*got)->list.pairs.size(), direct.pairs.size());
    for (std::size_t i = 0; i < direct.pairs.size(); ++i) {
        QCOMPARE((*got)->list.pairs[i].p, direct.pairs[i].p);
        QCOMPARE((*got)->list.pairs[i].rowDistance, direct.pairs[i].rowDistance);
    }

    const TestHead softmax("softmax", 11);
    MagnitudeJob curves;
    curves.rowParadigm = 1;
    curves.rowHead = softmax.head;
    curves.heads = {{0, t.head}, {1, softmax.head}};
    curves.query = 3;
    store.requestMagnitudeCurves(MagnitudeKey{0, {}, 0, "m", {}, {}}, curves);
    const auto* c = store.magnitudeCurves().find(MagnitudeKey{0, {}, 0, "m", {}, {}});
    QVERIFY(c && *c);
    QCOMPARE((*c)->curves.size(), std::size_t(2));
    QCOMPARE((*c)->rowParadigm, 1);
    const MagnitudeCurve expected = magnitudeCurve(*softmax.head, 3, curves.options);
    QCOMPARE((*c)->curves[1].second.maxWeight, expected.maxWeight);
    // The row at each kept factor (every second one) is the head's row of scaled queries.
    std::vector<double> everySecond;
    const std::vector<double> factors = curves.options.factors();
    for (std::size_t i = 0; i < factors.size(); i += 2) everySecond.push_back(factors[i]);
    QCOMPARE((*c)->rowFactors, everySecond);
    QCOMPARE(Index((*c)->rowFactors.size()), (*c)->scaledRows.rows());
    Matrix scaled(Index((*c)->rowFactors.size()), softmax.head->keys());
    softmax.head->scaledRows(3, (*c)->rowFactors, scaled);
    QVERIFY(((*c)->scaledRows - scaled).cwiseAbs().maxCoeff() == 0.0);
}

}  // namespace attnlens::gui::test

int main(int argc, char** argv) {
    return attnlens::gui::test::runAppTests<attnlens::gui::test::HeadResultsStoreTests>(argc, argv);
}

#include "head_results_store_tests.moc"
