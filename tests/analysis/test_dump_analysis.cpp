// Whole-dump runs: progress after every (image, layer, head, paradigm), and a cancel that stops the
// run within one such step per worker.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "analysis_test_util.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/locality.h"

namespace attnlens {
namespace {

TEST(AnalyzeDump, ReportsProgressAfterEveryHeadAndParadigm) {
    test::TempDir dir;
    auto reader = testing::smallSynthReader(dir, 3, 2);
    AnalyzeRequest request;
    request.threads = 2;
    request.heads = {0, 2};
    request.options.stats = StatSelection::parse("entropy");
    std::vector<AnalysisProgress> seen;
    const AnalysisReport report = analyzeDump(*reader, request, [&](const AnalysisProgress& p) {
        seen.push_back(p);  // calls are serialised by analyzeDump
    });
    // 2 images x 2 layers x 2 heads x 8 presets, plus the call before the first step.
    const std::int64_t steps = 2 * 2 * 2 * 8;
    ASSERT_EQ(std::int64_t(seen.size()), steps + 1);
    EXPECT_EQ(seen.front().done, 0);
    for (std::size_t i = 0; i < seen.size(); ++i) {
        EXPECT_EQ(seen[i].done, std::int64_t(i));
        EXPECT_EQ(seen[i].total, steps);
    }
    EXPECT_NE(seen.back().current.find(", head "), std::string::npos) << seen.back().current;
    EXPECT_EQ(std::int64_t(report.records.size()), steps);
}

TEST(AnalyzeDump, CancelStopsWithinOneStepPerWorker) {
    test::TempDir dir;
    auto reader = testing::smallSynthReader(dir, 3, 2);
    for (int threads : {1, 2}) {
        SCOPED_TRACE(threads);
        AnalyzeRequest request;
        request.threads = threads;
        request.options.stats = StatSelection::parse("entropy");
        std::int64_t calls = 0, lastDone = 0;
        std::atomic<bool> cancel{false};
        try {
            analyzeDump(
                *reader, request,
                [&](const AnalysisProgress& p) {
                    ++calls;
                    lastDone = p.done;
                    if (p.done >= 3) cancel = true;  // cancel at the third step
                },
                &cancel);
            FAIL() << "not cancelled";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Cancelled);
        }
        // Each worker finishes at most the step it is in: far fewer than the 96 steps of the run.
        EXPECT_LE(lastDone, 3 + threads - 1);
        EXPECT_LE(calls, 4 + threads - 1);
    }
    // A cancel before the first step: nothing is analysed.
    AnalyzeRequest request;
    std::int64_t calls = 0;
    std::atomic<bool> cancelled{true};
    EXPECT_THROW(analyzeDump(
                     *reader, request, [&](const AnalysisProgress&) { ++calls; }, &cancelled),
                 Error);
    EXPECT_EQ(calls, 1);
}

DumpInfo bigDump() {
    DumpInfo info;
    info.path = "big.h5";
    LayerInfo small, big;
    small.name = "small";
    small.heads = 2;
    small.tokens = 197;
    small.dim = 64;
    big = small;
    big.name = "big";
    big.tokens = 10001;
    info.layers = {small, big};
    return info;
}

TEST(PlanMemory, RefusesWhatOneWorkerCannotHoldAndNamesTheLayer) {
    const DumpInfo info = bigDump();
    AnalyzeRequest request;
    request.threads = 4;
    // Softmax rank keeps three N x N matrices of the big layer: 3 * 10001^2 * 8 bytes = 2.2 GiB.
    const double perWorker = workerBytes(info.layers[1], presetParadigms(), request.options.stats);
    EXPECT_GT(perWorker, 3.0 * 10001.0 * 10001.0 * 8.0);
    try {
        planMemory(info, request, perWorker / 2);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input);
        EXPECT_NE(std::string(e.what()).find("big.h5: layer big has N = 10001 tokens"), std::string::npos) << e.what();
    }
    // Room for two workers of four: two threads and a note saying why.
    MemoryPlan plan = planMemory(info, request, perWorker * 2.5);
    EXPECT_EQ(plan.workers, 2);
    EXPECT_NE(plan.note.find("using 2 threads instead of 4"), std::string::npos) << plan.note;
    // Unknown budget: no check. Enough: as asked, no note.
    EXPECT_EQ(planMemory(info, request, 0).workers, 4);
    plan = planMemory(info, request, perWorker * 5);
    EXPECT_EQ(plan.workers, 4);
    EXPECT_TRUE(plan.note.empty());
    // Only the small layer, or a kernel paradigm's rank (no N x N matrix): far less.
    request.layers = {0};
    EXPECT_EQ(planMemory(info, request, perWorker / 20).workers, 4);
    request.layers = {1};
    request.paradigms = {presetParadigm("mala")};
    request.options.stats = StatSelection::parse("rank");
    EXPECT_LT(workerBytes(info.layers[1], request.paradigms, request.options.stats), perWorker / 10);
    EXPECT_EQ(planMemory(info, request, perWorker / 5).workers, 4);
}

// The thread budget is planned once, in the library: planAnalysis makes the request explicit and
// fixes its workers, and analyzeDump runs that plan as it is (no second plan, no count handed back
// by the front end). The workers are never more than the (image, layer) tasks, and each worker's
// nested budget is what the memory plan gave it.
TEST(PlanAnalysis, TheRequestAsItRunsAndTheWorkersThatFit) {
    test::TempDir dir;
    auto reader = testing::smallSynthReader(dir, 3, 2);  // 2 images, 2 layers of 3 heads
    AnalyzeRequest request;
    request.threads = 8;
    request.layers = {1};
    request.options.stats = StatSelection::parse("entropy");
    const AnalysisPlan plan = planAnalysis(reader->info(), request);
    EXPECT_EQ(plan.request.paradigms.size(), presetParadigms().size());
    EXPECT_EQ(plan.request.images, (std::vector<int>{0, 1}));
    EXPECT_EQ(plan.request.layers, (std::vector<int>{1}));
    EXPECT_EQ(plan.memory.workers, 2);  // two tasks: (0, 1) and (1, 1)
    EXPECT_EQ(plan.request.threads.count(), 2);
    EXPECT_EQ(plan.request.options.magnitude.threads.count(), plan.memory.perWorker.count());
    EXPECT_TRUE(plan.memory.note.empty());

    const AnalysisReport planned = analyzeDump(*reader, plan);
    const AnalysisReport direct = analyzeDump(*reader, request);
    EXPECT_EQ(planned.request.threads.count(), 2);
    EXPECT_EQ(direct.request.threads.count(), 2);
    ASSERT_EQ(planned.records.size(), direct.records.size());
    ASSERT_EQ(planned.records.size(), std::size_t(2 * 3 * presetParadigms().size()));
    for (std::size_t i = 0; i < planned.records.size(); ++i) {
        EXPECT_EQ(planned.records[i].head, direct.records[i].head);
        ASSERT_TRUE(planned.records[i].stats.entropy && direct.records[i].stats.entropy);
        EXPECT_EQ(planned.records[i].stats.entropy->meanEntropy, direct.records[i].stats.entropy->meanEntropy);
    }

    // One task: one worker whatever the budget; a bad selection is refused while planning.
    request.images = {1};
    EXPECT_EQ(planAnalysis(reader->info(), request).memory.workers, 1);
    request.layers = {5};
    try {
        planAnalysis(reader->info(), request);
        FAIL() << "layer 5 of 2 planned";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Usage);
        EXPECT_NE(std::string(e.what()).find("layer position 5 out of range"), std::string::npos) << e.what();
    }
}

TEST(PlanLocality, TheRequestAsItRunsAndTheWorkersThatFit) {
    test::TempDir dir;
    auto reader = testing::smallSynthReader(dir, 3, 2);
    LocalityRequest request;
    request.threads = 8;
    const LocalityPlan plan = planLocality(reader->info(), request);
    EXPECT_EQ(plan.request.layers, (std::vector<int>{0, 1}));
    EXPECT_EQ(plan.request.images, (std::vector<int>{0, 1}));
    EXPECT_EQ(plan.request.paradigms.size(), presetParadigms().size());
    EXPECT_EQ(plan.memory.workers, 2);  // no more workers than layers
    const LocalityReport planned = localityOverDump(*reader, plan);
    const LocalityReport direct = localityOverDump(*reader, request);
    EXPECT_EQ(localityToJson(planned, -1)["groups"], localityToJson(direct, -1)["groups"]);
    request.images = {7};
    EXPECT_THROW(planLocality(reader->info(), request), Error);
}

}  // namespace
}  // namespace attnlens
