// Registered statistics (registered_statistics.h): a per-head statistic added by one entry reaches
// the selection, the record, the JSON report, the summary with its exact mergeable state, and the
// record table. The example is the self-attention mass, mean over the Ok rows i of A_ii, registered
// here by the test (the product registers none yet) and checked against the same number taken
// directly from each head's dense matrix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "analysis_test_util.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/record_table.h"
#include "attnlens/analysis/registered_statistics.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/sweep.h"
#include "attnlens/dump/head_inputs.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

using nlohmann::json;

double selfMass(const Matrix& a, std::span<const RowStatus> status, const AdmissibleKeys&) {
    if (a.rows() != a.cols()) return std::numeric_limits<double>::quiet_NaN();
    double sum = 0;
    Index rows = 0;
    for (Index i = 0; i < a.rows(); ++i)
        if (status.empty() || status[std::size_t(i)] == RowStatus::Ok) {
            sum += a(i, i);
            ++rows;
        }
    return rows ? sum / double(rows) : std::numeric_limits<double>::quiet_NaN();
}

// Registered for one test and removed after it, so that the other tests of this program (run in
// one process outside ctest) see the product's registry.
struct SelfMassRegistered {
    SelfMassRegistered() {
        registerStatistic(
            {"self_mass", "self-attention mass", "mean over the Ok rows i of A_ii (square A only)", selfMass});
    }
    ~SelfMassRegistered() { unregisterStatistic("self_mass"); }
};

// The same number the direct way: the head from the dump, its whole matrix, its diagonal.
double directSelfMass(const DumpReader& reader, const HeadRecord& r, const Paradigm& p) {
    const LayerInfo& layer = reader.info().layers[std::size_t(r.layer)];
    const HeadActivations act = reader.readHead(r.image, r.layer, r.head);
    std::vector<RowStatus> status;
    const Matrix a = AttentionHead(p, headInputs(layer, act, r.head)).matrix(&status);
    double sum = 0;
    int rows = 0;
    for (Index i = 0; i < a.rows(); ++i)
        if (status[std::size_t(i)] == RowStatus::Ok) {
            sum += a(i, i);
            ++rows;
        }
    return sum / rows;
}

TEST(RegisteredStatistics, KeysAreCheckedWhenRegistered) {
    const std::size_t product = registeredStatistics().size();  // the product's own entries
    {
        const SelfMassRegistered registered;
        auto compute = [](const Matrix&, std::span<const RowStatus>, const AdmissibleKeys&) { return 0.0; };
        for (const std::string bad : {"", "Self", "self-mass", "rank", "all", "self_mass"})
            EXPECT_THROW(registerStatistic({bad, "t", "d", compute}), Error) << bad;
        EXPECT_THROW(registerStatistic({"no_compute", "t", "d", {}}), Error);
        EXPECT_EQ(findRegisteredStatistic("no_compute"), nullptr);
        ASSERT_NE(findRegisteredStatistic("self_mass"), nullptr);
        EXPECT_EQ(registeredStatistics().size(), product + 1);
        EXPECT_EQ(registeredStatisticKeys().back(), "self_mass");
        for (const BuiltInStatistic& b : builtInStatistics())
            EXPECT_THROW(registerStatistic({std::string(b.name), "t", "d", compute}), Error) << b.name;
    }
    EXPECT_EQ(findRegisteredStatistic("self_mass"), nullptr);
    EXPECT_THROW(StatSelection::parse("self_mass"), Error);
}

TEST(RegisteredStatistics, SelectedByKeyAndByAll) {
    const SelfMassRegistered registered;
    // The default selection is every statistic, so that a new one reaches analyze without options.
    EXPECT_EQ(StatSelection().registered, registeredStatisticKeys());
    EXPECT_EQ(StatSelection().names(), StatSelection::parse("all").names());
    const StatSelection byKey = StatSelection::parse("entropy,self_mass");
    EXPECT_TRUE(byKey.entropy);
    EXPECT_FALSE(byKey.rank);
    EXPECT_EQ(byKey.registered, std::vector<std::string>{"self_mass"});
    EXPECT_EQ(byKey.names(), (std::vector<std::string>{"entropy", "self_mass"}));
    // "all": the product's statistics (whatever registered_statistics.cpp lists) and then this one.
    EXPECT_EQ(StatSelection::parse("all").registered, registeredStatisticKeys());
    EXPECT_EQ(StatSelection::parse("all").registered.back(), "self_mass");
    EXPECT_EQ(StatSelection::parse("self_mass,self_mass").registered.size(), 1u);
    try {
        StatSelection::parse("selfmass");
        FAIL() << "unknown name accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("self_mass"), std::string::npos) << e.what();  // named among the known
    }
    // It needs A: the memory plan counts the matrix even where nothing else would.
    EXPECT_TRUE(denseNeeds(StatSelection::parse("self_mass"), true, 100, false).matrix);
    EXPECT_FALSE(denseNeeds(StatSelection::parse("confusion"), true, 100, false).matrix);
}

TEST(RegisteredStatistics, RecordsReportsSummariesAndTablesCarryThem) {
    const SelfMassRegistered registered;
    test::TempDir dir;
    const auto reader = testing::smallSynthReader(dir, 2, 3);
    AnalyzeRequest request;
    request.paradigms = {presetParadigm("softmax"), presetParadigm("linear_relu"), presetParadigm("inline")};
    request.options.stats = StatSelection::parse("entropy,self_mass");
    request.threads = 2;
    const AnalysisReport report = analyzeDump(*reader, request);
    ASSERT_EQ(report.records.size(), std::size_t(3 * 2 * 2 * 3));
    double sum[3] = {0, 0, 0};
    for (const HeadRecord& r : report.records) {
        ASSERT_EQ(r.stats.registered.size(), 1u);
        EXPECT_EQ(r.stats.registered[0].first, "self_mass");
        const double expected = directSelfMass(*reader, r, report.paradigms[std::size_t(r.paradigm)]);
        EXPECT_NEAR(r.stats.registered[0].second, expected, 1e-14) << r.image << " " << r.layer << " " << r.head;
        sum[r.paradigm] += r.stats.registered[0].second;
    }

    // The report: each record's value, the definition, the per-paradigm mean.
    const json j = reportToJson(report, ToolInfo{});
    EXPECT_EQ(j["options"]["registered_statistics"]["self_mass"]["definition"],
              "mean over the Ok rows i of A_ii (square A only)");
    EXPECT_EQ(j["options"]["statistics"], (json{"entropy", "self_mass"}));
    for (std::size_t i = 0; i < report.records.size(); ++i)
        EXPECT_EQ(j["results"][i]["registered"]["self_mass"].get<double>(),
                  report.records[i].stats.registered[0].second);
    for (int p = 0; p < 3; ++p) {
        const json& entry = j["summary"]["per_paradigm"][std::size_t(p)];
        EXPECT_NEAR(entry["registered_means"]["self_mass"].get<double>(), sum[p] / 12.0, 1e-14) << p;
        for (const json& layer : entry["layers"]) EXPECT_TRUE(layer["registered_means"].contains("self_mass"));
    }
    // Back from JSON: the same records, the same summary.
    const std::vector<std::string> names{"softmax", "linear_relu", "inline"};
    const HeadRecord back = recordFromJson(j["results"][5], names);
    ASSERT_EQ(back.stats.registered.size(), 1u);
    EXPECT_EQ(back.stats.registered[0], report.records[5].stats.registered[0]);
    EXPECT_EQ(summarize(json::parse(reportText(j))), j["summary"]);

    // The summary's exact state: two halves merged give the whole.
    ReportSummary first(report.paradigms), second(report.paradigms), whole(report.paradigms);
    for (std::size_t i = 0; i < report.records.size(); ++i) {
        const std::string& layer = report.dump.layers[std::size_t(report.records[i].layer)].name;
        (i % 2 ? first : second).add(report.records[i], layer);
        whole.add(report.records[i], layer);
    }
    ReportSummary merged = ReportSummary::fromStateJson(first.stateJson());
    merged.merge(ReportSummary::fromStateJson(second.stateJson()));
    const json m = merged.toJson(), w = whole.toJson();  // equal up to the order of the sums
    for (std::size_t p = 0; p < 3; ++p)
        for (const char* part : {"layers", "heads"}) {
            const json &a = m["per_paradigm"][p][part], &b = w["per_paradigm"][p][part];
            ASSERT_EQ(a.size(), b.size());
            for (std::size_t i = 0; i < a.size(); ++i)
                EXPECT_NEAR(a[i]["registered_means"]["self_mass"].get<double>(),
                            b[i]["registered_means"]["self_mass"].get<double>(), 1e-15)
                    << p << " " << part << " " << i;
        }
    EXPECT_TRUE(whole.stateJson().dump().find("self_mass") != std::string::npos);

    // The record table has its column, with its definition.
    bool found = false;
    for (const RecordColumn& c : recordTableColumns(report))
        if (c.name == "registered_self_mass") {
            found = true;
            EXPECT_FALSE(c.integer);
            EXPECT_EQ(c.definition, "mean over the Ok rows i of A_ii (square A only)");
        }
    EXPECT_TRUE(found);
}

// Sweeps curve them too: at the model's own query scale, each head's curve is the mean over the
// images of its records' values.
TEST(RegisteredStatistics, SweepsCurveThem) {
    const SelfMassRegistered registered;
    test::TempDir dir;
    const auto reader = testing::smallSynthReader(dir, 2, 3);
    SweepRequest request;
    request.paradigm = presetParadigm("softmax");
    request.parameter = SweepParameter::QueryScale;
    request.values = {1.0, 2.0};
    request.meanDistance = false;
    request.analysis.options.stats = StatSelection::parse("self_mass");
    const json sweep = sweepDump(*reader, request, ToolInfo{});
    EXPECT_EQ(sweep["definitions"]["statistics"]["registered_self_mass"],
              "mean over the Ok rows i of A_ii (square A only)");
    AnalyzeRequest analyze = request.analysis;
    analyze.paradigms = {request.paradigm};
    const AnalysisReport report = analyzeDump(*reader, analyze);
    for (int layer = 0; layer < 2; ++layer)
        for (int head = 0; head < 2; ++head) {
            double sum = 0;
            int n = 0;
            for (const HeadRecord& r : report.records)
                if (r.layer == layer && r.head == head) {
                    sum += r.stats.registered.at(0).second;
                    ++n;
                }
            const json& curve =
                sweep["layers"][std::size_t(layer)]["heads"][std::size_t(head)]["statistics"]["registered_self_mass"];
            EXPECT_NEAR(curve[0].get<double>(), sum / n, 1e-14) << layer << " " << head;
            EXPECT_NE(curve[1].get<double>(), curve[0].get<double>());  // sharper queries, more self-mass or less
        }
}

// A report without registered statistics is unchanged: no "registered" anywhere.
TEST(RegisteredStatistics, ReportsWithoutThemHaveNoTrace) {
    const SelfMassRegistered registered;
    test::TempDir dir;
    const auto reader = testing::smallSynthReader(dir, 2, 3);
    AnalyzeRequest request;
    request.paradigms = {presetParadigm("softmax")};
    request.options.stats = StatSelection::parse("entropy");
    const json j = reportToJson(analyzeDump(*reader, request), ToolInfo{});
    EXPECT_EQ(j.dump().find("registered"), std::string::npos);
}

// The one table of the built-in statistics: its order is the selection's, each name selects exactly
// its own flag, and messages and help texts list the names from it.
// A registered statistic is given the keys each row may attend to: on a window layer |S_i| is the
// query's window (16 tokens), not the layer's 64, and the keys are the window's own tokens.
TEST(RegisteredStatistics, TheyAreGivenTheAdmissibleKeysOfEachRow) {
    struct Registered {
        Registered() {
            registerStatistic({"mean_admissible", "mean |S_i|", "mean over the Ok rows of |S_i|",
                               [](const Matrix& a, std::span<const RowStatus> status, const AdmissibleKeys& keys) {
                                   double sum = 0;
                                   Index rows = 0;
                                   for (Index i = 0; i < a.rows(); ++i)
                                       if (status.empty() || status[std::size_t(i)] == RowStatus::Ok) {
                                           sum += double(keys.count(i));
                                           ++rows;
                                       }
                                   return sum / double(rows);
                               }});
        }
        ~Registered() { unregisterStatistic("mean_admissible"); }
    } registered;
    const TokenLayout layout{8, 8, 0};
    const Matrix q = testing::randomNormal(64, 4, 5), k = testing::randomNormal(64, 4, 6);
    AnalysisOptions options;
    options.stats = StatSelection::parse("mean_admissible");
    for (const bool windowed : {false, true}) {
        const WindowPartition p(layout, {4, 4, 2, 2, false});
        HeadInputs in{&q, &k, 0.5, false};
        if (windowed) in.windows = &p;
        const AttentionHead head(presetParadigm("softmax"), in);
        const HeadStatistics s = analyzeHead(head, q, layout, options);
        ASSERT_EQ(s.registered.size(), 1u);
        EXPECT_EQ(s.registered[0].second, windowed ? 16.0 : 64.0);
        // The same count the direct way: the keys with weight in each row of A.
        if (windowed) {
            const Matrix a = head.matrix();
            for (Index i = 0; i < 64; ++i) EXPECT_EQ((a.row(i).array() > 0).count(), 16) << i;
        }
    }
}

// The product's above_uniform, the second way: each row's |weights| over its own mass, counted
// against 1/|S_i| with the definition's slack, one row at a time.
double directAboveUniform(const Matrix& a, const std::vector<RowStatus>& status, const AdmissibleKeys& keys) {
    double sum = 0;
    int rows = 0;
    for (Index i = 0; i < a.rows(); ++i) {
        if (status[std::size_t(i)] != RowStatus::Ok) continue;
        double mass = 0;
        for (Index j = 0; j < a.cols(); ++j) mass += std::abs(a(i, j));
        if (!(mass > 0)) continue;
        const double n = double(keys.count(i));
        int above = 0;
        for (Index j = 0; j < a.cols(); ++j) above += std::abs(a(i, j)) / mass >= (1 - 1e-9) / n ? 1 : 0;
        sum += above / n;
        ++rows;
    }
    return sum / rows;
}

TEST(ProductStatistics, AboveUniformIsTheShareOfKeysAtOrAboveTheirUniformShareOfAbsA) {
    const RegisteredStatistic* s = findRegisteredStatistic("above_uniform");
    ASSERT_NE(s, nullptr);
    EXPECT_NE(s->definition.find("1e-9"), std::string::npos);  // the slack is in every report's options
    // Closed forms: uniform rows keep every key, at N = 197 too (their sum is not 1 exactly); a
    // one-hot row keeps one.
    for (const int n : {8, 197}) {
        const AdmissibleKeys every(AttentionLayout(TokenLayout{1, n - 1, 1}));
        EXPECT_DOUBLE_EQ(s->compute(Matrix::Constant(n, n, 1.0 / n), {}, every), 1.0) << n;
        EXPECT_NEAR(s->compute(Matrix::Identity(n, n), {}, every), 1.0 / n, 1e-15) << n;
    }
    // Signed rows on |A|: (.5, .5, -.2, .2) has mass 1.4, uniform share .35: two keys of four;
    // (.6, .6, -.6, .4) has mass 2.2, share .55: three (on A the -.6 would count as below uniform).
    const AdmissibleKeys four(AttentionLayout(TokenLayout{1, 4, 0}));
    Matrix signedRows(2, 4);
    signedRows << 0.5, 0.5, -0.2, 0.2, 0.6, 0.6, -0.6, 0.4;
    EXPECT_DOUBLE_EQ(s->compute(signedRows.topRows(1), {}, four), 0.5);
    EXPECT_DOUBLE_EQ(s->compute(signedRows.bottomRows(1), {}, four), 0.75);
    // Flagged rows and rows without mass are left out; none left: NaN, never a made-up 0.
    const std::vector<RowStatus> flagged{RowStatus::Ok, RowStatus::NonFinite};
    EXPECT_DOUBLE_EQ(s->compute(signedRows, flagged, four), 0.5);
    EXPECT_TRUE(std::isnan(s->compute(Matrix::Zero(2, 4), {}, four)));
    // A window layer: |S_i| = 16 of 64 tokens; a softmax row spreads over its window only.
    const TokenLayout layout{8, 8, 0};
    const WindowPartition windows(layout, {4, 4, 2, 2, false});
    const Matrix q = testing::randomNormal(64, 4, 11) * 0.1, k = testing::randomNormal(64, 4, 12) * 0.1;
    HeadInputs in{&q, &k, 0.5, false};
    in.windows = &windows;
    const AttentionHead head(presetParadigm("softmax"), in);
    std::vector<RowStatus> status;
    const Matrix a = head.matrix(&status);
    const AdmissibleKeys windowed(AttentionLayout(layout), &windows);
    const double onWindows = s->compute(a, status, windowed);
    EXPECT_NEAR(onWindows, directAboveUniform(a, status, windowed), 1e-15);
    EXPECT_GT(onWindows, 0.25);  // near-uniform rows over 16 keys: against 1/64 it would be at most 16/64
    // Every record of a default analyze (the default selection holds it) against the second way.
    test::TempDir dir;
    const auto reader = testing::smallSynthReader(dir, 2, 2);
    AnalyzeRequest request;
    request.paradigms = {presetParadigm("softmax"), presetParadigm("inline"), presetParadigm("mala")};
    const AnalysisReport report = analyzeDump(*reader, request);
    ASSERT_FALSE(report.records.empty());
    for (const HeadRecord& r : report.records) {
        const LayerInfo& layer = reader->info().layers[std::size_t(r.layer)];
        const HeadActivations act = reader->readHead(r.image, r.layer, r.head);
        std::vector<RowStatus> rows;
        const Matrix m =
            AttentionHead(report.paradigms[std::size_t(r.paradigm)], headInputs(layer, act, r.head)).matrix(&rows);
        const auto it = std::find_if(r.stats.registered.begin(), r.stats.registered.end(),
                                     [](const auto& e) { return e.first == "above_uniform"; });
        ASSERT_NE(it, r.stats.registered.end());
        EXPECT_NEAR(it->second, directAboveUniform(m, rows, admissibleKeysOf(layer, r.head)), 1e-14)
            << r.image << " " << r.layer << " " << r.head << " " << r.paradigm;
    }
}

TEST(BuiltInStatistics, TheTableIsTheSelectionsVocabulary) {
    const SelfMassRegistered registered;
    std::vector<std::string> names;
    for (const BuiltInStatistic& b : builtInStatistics()) {
        names.emplace_back(b.name);
        EXPECT_FALSE(b.summary.empty()) << b.name;
        const StatSelection one = StatSelection::parse(b.name);
        EXPECT_EQ(one.names(), std::vector<std::string>{std::string(b.name)});
        EXPECT_TRUE(one.*b.selected);
        int selected = 0;
        for (const BuiltInStatistic& other : builtInStatistics()) selected += (one.*other.selected) ? 1 : 0;
        EXPECT_EQ(selected, 1) << b.name;
    }
    // The second way: the names as the report has always listed them.
    EXPECT_EQ(names, (std::vector<std::string>{"rank", "local", "entropy", "confusion", "magnitude", "distance"}));
    std::vector<std::string> all = names;
    std::string text = "rank, local, entropy, confusion, magnitude, distance";
    for (const std::string& key : registeredStatisticKeys()) {  // the product's, then self_mass
        all.push_back(key);
        text += ", " + key;
    }
    EXPECT_EQ(all.back(), "self_mass");
    EXPECT_EQ(StatSelection().names(), all);
    EXPECT_EQ(statisticNamesText(), text);
    try {
        StatSelection::parse("speed");
        FAIL() << "unknown name accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("(known: " + statisticNamesText() + ")"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace attnlens
