// The papers' claims (issue 46 item 6): verdicts follow their rules on hand-built records, only the
// layers' own attention decides, what-ifs never do, and missing models make a claim not measurable.
#include <gtest/gtest.h>

#include <string>

#include "attnlens/analysis/claims.h"

namespace attnlens {
namespace {

using nlohmann::json;

LayerInfo layerOf(const std::string& name, const std::string& attention) {
    LayerInfo l;
    l.name = name;
    l.heads = 1;
    l.dim = 4;
    l.attention = attention;
    l.layout = TokenLayout{3, 3, 0};
    l.keyLayout = l.layout;
    return l;
}

int paradigmIndex(const AnalysisReport& r, const std::string& name) {
    for (std::size_t i = 0; i < r.paradigms.size(); ++i)
        if (r.paradigms[i].name == name) return int(i);
    return -1;
}

// A record with an entropy result (negative weight fraction, |A| entropy) and a 3 x 3 local mass.
HeadRecord record(const AnalysisReport& r, int layer, const std::string& paradigm, double negativeFraction,
                  double entropyAbs, double localMass) {
    HeadRecord h;
    h.layer = layer;
    h.paradigm = paradigmIndex(r, paradigm);
    h.stats.tokens = h.stats.keys = 9;
    EntropyResult e;
    e.negativeWeightFraction = negativeFraction;
    e.meanAdmissibleNormalisedEntropyAbs = entropyAbs;
    h.stats.entropy = e;
    LocalMassResult l;
    l.k = 3;
    l.mean = localMass;
    l.admissibleBaseline = 0.5;
    h.stats.local = {l};
    return h;
}

const json& claimOf(const json& claims, const std::string& id) {
    for (const json& c : claims["claims"])
        if (c["id"] == id) return c;
    static const json none;
    ADD_FAILURE() << "no claim " << id;
    return none;
}

TEST(Claims, OnlyTheLayersOwnAttentionDecides) {
    AnalysisReport r;
    r.paradigms = presetParadigms();
    r.dump.layers = {layerOf("softmax.block0", "softmax"), layerOf("mala.block0", "mala"),
                     layerOf("linear.block0", "linear_relu")};
    // Trained: softmax on its layer, MALA on its, linear_relu on its. What-ifs: MALA on the softmax
    // layer with many negative weights, softmax on the linear layer, very local.
    r.records = {record(r, 0, "softmax", 0.0, 0.6, 0.45), record(r, 1, "mala", 0.0, 0.7, 0.3),
                 record(r, 2, "linear_relu", 0.0, 0.8, 0.2), record(r, 0, "mala", 0.5, 0.1, 0.9),
                 record(r, 2, "softmax", 0.0, 0.1, 0.95)};
    json claims = evaluateClaims(r);
    EXPECT_EQ(claimOf(claims, "mala.no_negative_weights")["verdict"], "holds");
    EXPECT_EQ(claimOf(claims, "mala.no_negative_weights")["evidence"]["negative_weight_fraction_mean"], 0.0);
    // softmax 0.9 x uniform against linear's 0.4 (the what-if's 1.9 left out).
    const json& local = claimOf(claims, "inline.softmax_more_local");
    EXPECT_EQ(local["verdict"], "holds");
    EXPECT_DOUBLE_EQ(local["evidence"]["x_uniform_3x3_softmax"].get<double>(), 0.9);
    EXPECT_DOUBLE_EQ(local["evidence"]["x_uniform_3x3_linear"].get<double>(), 0.4);
    EXPECT_EQ(claimOf(claims, "mala.entropy_order")["verdict"], "holds");  // 0.6 < 0.7 < 0.8

    // The trained MALA model with negative weights fails the claim; reordering the entropies fails
    // the order.
    r.records[1] = record(r, 1, "mala", 0.25, 0.9, 0.3);
    claims = evaluateClaims(r);
    EXPECT_EQ(claimOf(claims, "mala.no_negative_weights")["verdict"], "fails");
    EXPECT_DOUBLE_EQ(
        claimOf(claims, "mala.no_negative_weights")["evidence"]["negative_weight_fraction_mean"].get<double>(), 0.25);
    EXPECT_EQ(claimOf(claims, "mala.entropy_order")["verdict"], "fails");  // 0.6 < 0.9 but 0.9 > 0.8

    // No statistic was computed for these claims: nothing to measure.
    EXPECT_EQ(claimOf(claims, "flatten.linear_rank_at_most_d")["verdict"], "not_measurable");
    EXPECT_EQ(claims["counts"]["holds"].get<int>() + claims["counts"]["fails"].get<int>() +
                  claims["counts"]["not_measurable"].get<int>(),
              int(claims["claims"].size()));
    EXPECT_GE(claims["claims"].size(), 10u);
}

TEST(Claims, MissingModelsAreNotMeasurableWithTheReason) {
    // A dump of softmax layers only: every claim about a linear, InLine or MALA model says which
    // model is missing, even though the what-if records of those paradigms exist.
    AnalysisReport r;
    r.paradigms = presetParadigms();
    r.dump.layers = {layerOf("vit.block0", "softmax")};
    r.records = {record(r, 0, "softmax", 0, 0.5, 0.4), record(r, 0, "linear_relu", 0, 0.9, 0.2),
                 record(r, 0, "mala", 0.3, 0.7, 0.3)};
    const json claims = evaluateClaims(r);
    for (const char* id : {"inline.softmax_more_local", "mala.no_negative_weights", "mala.entropy_order"}) {
        const json& c = claimOf(claims, id);
        EXPECT_EQ(c["verdict"], "not_measurable") << id;
        EXPECT_NE(c["evidence"]["reason"].get<std::string>().find("no layer of this dump has a model trained with"),
                  std::string::npos)
            << c;
    }
    // A layer without an `attention` attribute decides nothing either.
    r.dump.layers[0].attention.clear();
    const json none = evaluateClaims(r);
    EXPECT_EQ(none["counts"]["not_measurable"].get<int>(), int(none["claims"].size()));
}

}  // namespace
}  // namespace attnlens
