// Sweeps in process: the query scale (a what-if on every query's magnitude) against a second way
// of computing the same head (softmax: a logit scale a times larger; ReLU kernels: q itself a
// times larger, since ReLU is positively homogeneous), its point at 1 against analyze, window
// attention's scaled heads against scaledRows, and the trained values of rule parameters (c,
// scale) against the heads' own constants, per head where CSwin-like stripes make them differ.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include "analysis_test_util.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/sweep.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/dump/synth.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using nlohmann::json;
using testing::randomNormal;

std::string synthDump(const test::TempDir& dir, const std::string& name, SynthOptions o) {
    const std::string path = dir.file(name);
    writeSynthDump(path, o);
    return path;
}

SynthOptions smallDump() {
    SynthOptions o;
    o.layers = 2;
    o.heads = 2;
    o.images = 2;
    o.gridH = 4;
    o.gridW = 5;
    o.dim = 8;
    return o;
}

double curveValue(const json& sweep, int layer, int head, const std::string& statistic, int point) {
    return sweep["layers"][std::size_t(layer)]["heads"][std::size_t(head)]["statistics"][statistic][std::size_t(point)]
        .get<double>();
}

TEST(Sweep, QueryScaleOfSoftmaxIsALogitScaleThatManyTimesLarger) {
    test::TempDir dir;
    const auto reader = DumpReader::open(synthDump(dir, "s.h5", smallDump()));
    const double layerScale = reader->info().layers[0].scale;
    ASSERT_EQ(reader->info().layers[1].scale, layerScale);
    SweepRequest byQuery;
    byQuery.paradigm = presetParadigm("softmax");
    byQuery.parameter = SweepParameter::QueryScale;
    byQuery.values = {0.5, 1.0, 3.0};
    byQuery.analysis.options.stats = StatSelection::parse("rank,local,entropy,distance");
    byQuery.analysis.threads = 2;
    SweepRequest byScale = byQuery;
    byScale.parameter = SweepParameter::SoftmaxScale;
    byScale.values = {0.5 * layerScale, layerScale, 3.0 * layerScale};
    const json q = sweepDump(*reader, byQuery, ToolInfo{}), s = sweepDump(*reader, byScale, ToolInfo{});
    EXPECT_EQ(q["parameter"]["name"], "qscale");
    EXPECT_EQ(q["parameter"]["trained_value"], 1.0);
    EXPECT_EQ(q["options"]["query_scale"], "swept");
    int compared = 0;
    for (int l = 0; l < 2; ++l)
        for (int h = 0; h < 2; ++h)
            for (int point = 0; point < 3; ++point) {
                for (const char* statistic : {"normalised_entropy", "local_mass_k3", "max_weight", "total_variation",
                                              "output_relative_error", "mean_distance"}) {
                    EXPECT_NEAR(curveValue(q, l, h, statistic, point), curveValue(s, l, h, statistic, point), 1e-12)
                        << statistic << " layer " << l << " head " << h << " point " << point;
                    ++compared;
                }
                EXPECT_EQ(curveValue(q, l, h, "rank", point), curveValue(s, l, h, "rank", point));
            }
    EXPECT_EQ(compared, 2 * 2 * 3 * 6);
    // The rows sharpen as the query grows (MALA Fig. 2's softmax).
    EXPECT_GT(curveValue(q, 0, 0, "normalised_entropy", 0), curveValue(q, 0, 0, "normalised_entropy", 2));
    // At a = 1 the reference is the paradigm itself: distance 0.
    EXPECT_EQ(curveValue(q, 0, 0, "total_variation", 1), 0.0);
}

TEST(Sweep, QueryScaleOfAReluKernelIsTheHeadOfScaledQueries) {
    test::TempDir dir;
    SynthOptions o = smallDump();
    o.localBranch = "dwc";
    const auto reader = DumpReader::open(synthDump(dir, "r.h5", o));
    for (const char* name : {"linear_relu", "inline_relu", "mala"}) {
        SCOPED_TRACE(name);
        const Paradigm& paradigm = presetParadigm(name);
        SweepRequest request;
        request.paradigm = paradigm;
        request.parameter = SweepParameter::QueryScale;
        request.values = {1.0, 4.0};
        request.analysis.options.stats = StatSelection::parse("local,entropy,distance");
        request.analysis.images = {1};
        const json sweep = sweepDump(*reader, request, ToolInfo{});
        // Point 0 is analyze's own number.
        AnalyzeRequest analysis = request.analysis;
        analysis.paradigms = {paradigm};
        const AnalysisReport report = analyzeDump(*reader, analysis);
        for (const HeadRecord& r : report.records) {
            EXPECT_EQ(curveValue(sweep, r.layer, r.head, "normalised_entropy", 0),
                      r.stats.entropy->meanNormalisedEntropy);
            EXPECT_EQ(curveValue(sweep, r.layer, r.head, "total_variation", 0), r.stats.distance->totalVariation.mean);
        }
        // Point 1 from a head built on 4 q (ReLU(4 q) = 4 ReLU(q); mala's kernel is ELU + 1, not
        // homogeneous, so it scales phi(q) instead: its second way is scaledRows' matrix).
        for (int layer = 0; layer < 2; ++layer)
            for (int head = 0; head < 2; ++head) {
                const LayerInfo& info = reader->info().layers[std::size_t(layer)];
                HeadActivations act = reader->readHead(1, layer, head, true);
                const HeadInputs in = headInputs(info, act, head);
                Matrix a;
                std::vector<RowStatus> status;
                if (paradigm.kernel == Kernel::Relu) {
                    const Matrix q4 = 4.0 * act.q;
                    HeadInputs scaled = in;
                    scaled.q = &q4;
                    a = AttentionHead(paradigm, scaled).matrix(&status);
                } else {
                    const AttentionHead model(paradigm, in);
                    a.resize(model.tokens(), model.keys());
                    status.resize(std::size_t(model.tokens()));
                    const double four = 4.0;
                    for (Index i = 0; i < model.tokens(); ++i)
                        model.scaledRows(i, std::span<const double>(&four, 1), a.row(i), &status[std::size_t(i)]);
                }
                const EntropyResult e = entropyStatistics(a, status);
                if (paradigm.kernel == Kernel::Relu) {
                    const Matrix q4 = 4.0 * act.q;
                    HeadInputs scaled = in;
                    scaled.q = &q4;
                    LocalityAccumulator sums(info.attentionLayout());
                    accumulateLocality(AttentionHead(paradigm, scaled), info.attentionLayout(), sums);
                    EXPECT_NEAR(curveValue(sweep, layer, head, "mean_distance", 1), sums.meanDistance(), 1e-12);
                }
                EXPECT_NEAR(curveValue(sweep, layer, head, "normalised_entropy", 1), e.meanNormalisedEntropy, 1e-12);
                const LocalBranchWeights weights = reader->readLocalBranch(1, layer);
                const Matrix branch = localBranchOutput(info, weights, head, act.v);
                const DistanceReference ref =
                    distanceReference(AttentionHead(presetParadigm("softmax"), in), &act.v, &branch);
                const DistanceResult d = distanceToReference(a, status, ref);
                EXPECT_NEAR(curveValue(sweep, layer, head, "total_variation", 1), d.totalVariation.mean, 1e-12);
                EXPECT_NEAR(curveValue(sweep, layer, head, "output_relative_error", 1), d.outputRelativeError, 1e-12);
            }
    }
}

TEST(Sweep, BadQueryScalesAreRefusedBeforeAnyWork) {
    for (double bad : {0.0, -2.0, std::nan("")}) {
        try {
            withSweepParameter(presetParadigm("mala"), SweepParameter::QueryScale, bad);
            ADD_FAILURE() << "accepted " << bad;
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Usage);
            EXPECT_NE(std::string(e.what()).find("sweep of qscale"), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(parseSweepParameter("qscale"), SweepParameter::QueryScale);
    AnalyzeRequest request;
    request.queryScale = 0;
    test::TempDir dir;
    const auto reader = DumpReader::open(synthDump(dir, "b.h5", smallDump()));
    EXPECT_THROW(analyzeDump(*reader, request), Error);
}

TEST(Sweep, WindowHeadsScaleTheirQueriesAsScaledRowsDo) {
    const TokenLayout layout{8, 8, 0};
    const WindowPartition partition(layout, {4, 4, 2, 2, true});
    const Matrix q = randomNormal(64, 6, 31), k = randomNormal(64, 6, 32), bias = randomNormal(16, 16, 33);
    for (const char* name : {"softmax", "linear_relu", "inline", "mala"}) {
        SCOPED_TRACE(name);
        HeadInputs in{&q, &k, 0.4, false};
        in.windows = &partition;
        if (std::string(name) == "softmax") in.positionBias = &bias;
        const AttentionHead model(presetParadigm(name), in);
        AttentionHead scaled(presetParadigm(name), in);
        scaled.scaleQueries(3.0);
        const double three = 3.0;
        for (Index i = 0; i < 64; ++i) {
            RowVector want(64), got(64);
            model.scaledRows(i, std::span<const double>(&three, 1), want);
            scaled.row(i, got);
            ASSERT_LT((got - want).cwiseAbs().maxCoeff(), 1e-13) << "row " << i;
        }
    }
}

TEST(Sweep, TrainedValuesOfRulesAreEachHeadsOwnConstants) {
    test::TempDir dir;
    SynthOptions o = smallDump();
    o.prefix = 0;
    o.gridH = o.gridW = 8;
    o.window = 4;
    const auto reader = DumpReader::open(synthDump(dir, "w.h5", o));
    SweepRequest request;
    request.paradigm = presetParadigm("inline");
    request.parameter = SweepParameter::C;
    request.values = {0.01, 0.02};
    request.analysis.options.stats = StatSelection::parse("entropy");
    request.analysis.images = {0};
    const json sweep = sweepDump(*reader, request, ToolInfo{});
    EXPECT_TRUE(sweep["parameter"]["trained_value"].is_null());  // a rule, not a number of the paradigm
    for (const json& layer : sweep["layers"]) {
        const int position = layer["layer_position"];
        const LayerInfo& info = reader->info().layers[std::size_t(position)];
        for (const json& head : layer["heads"]) {
            const int h = head["head"];
            HeadActivations act = reader->readHead(0, position, h, false);
            const AttentionHead model(presetParadigm("inline"), headInputs(info, act, h));
            EXPECT_EQ(head["trained_value"].get<double>(), model.c());
            // Inside a 4 x 4 window: 1 / (sqrt(d) 16).
            EXPECT_DOUBLE_EQ(model.c(), 1.0 / (std::sqrt(8.0) * 16.0));
        }
        EXPECT_EQ(layer["trained_value"], layer["heads"][0]["trained_value"]);
    }
    // The softmax scale's rule is the layer's scale.
    request.paradigm = presetParadigm("softmax");
    request.parameter = SweepParameter::SoftmaxScale;
    const json scale = sweepDump(*reader, request, ToolInfo{});
    EXPECT_TRUE(scale["parameter"]["trained_value"].is_null());
    EXPECT_EQ(scale["layers"][0]["trained_value"].get<double>(), reader->info().layers[0].scale);
    // A number of the paradigm is every head's.
    request.paradigm = presetParadigm("focused");
    request.parameter = SweepParameter::FocusingPower;
    const json p = sweepDump(*reader, request, ToolInfo{});
    EXPECT_EQ(p["layers"][1]["heads"][1]["trained_value"], 3.0);
}

// One cancel shape: the token stops a sweep wherever it is, in a point's analysis or in its
// mean-distance pass, and the progress callback only reports.
TEST(Sweep, TheCancelTokenStopsAnyPartOfAnyPoint) {
    test::TempDir dir;
    const auto reader = DumpReader::open(synthDump(dir, "s.h5", smallDump()));
    SweepRequest request;
    request.paradigm = presetParadigm("softmax");
    request.parameter = SweepParameter::QueryScale;
    request.values = {0.5, 1.0, 2.0};
    request.analysis.options.stats = StatSelection::parse("entropy");
    request.analysis.threads = 1;
    for (const std::string part : {"point 1 analysis", "point 1 distance"}) {
        SCOPED_TRACE(part);
        std::atomic<bool> cancel{false};
        int lastPoint = -1;
        bool sawDistance = false;
        try {
            sweepDump(
                *reader, request, ToolInfo{},
                [&](const SweepProgress& p) {
                    lastPoint = p.point;
                    const bool distance = p.analysis.current.find("mean attention distance") != std::string::npos;
                    sawDistance = sawDistance || distance;
                    if (p.point == 1 && (part == "point 1 distance" ? distance : p.analysis.done >= 2)) cancel = true;
                },
                &cancel);
            FAIL() << "not cancelled";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Cancelled) << e.what();
        }
        EXPECT_EQ(lastPoint, 1);  // point 2 never started
        EXPECT_TRUE(sawDistance);
    }
}

}  // namespace
}  // namespace attnlens
