// GUI tests of attention rollout in the token map and the paradigm comparison (issue 11, part 1):
// what the maps show is compared with the dense product of the R_l (rolloutMatrix, a second way of
// computing the rollout) of heads built from a second reader; CLS, the dock's options, the session
// file, the rollout of a layer range with an unreadable layer, and `attnlens render --rollout`.
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QProcess>

#include "app_test_fixture.h"
#include "attnlens/dump/synth.h"
#include "attnlens/io/error.h"
#include "shell/session_file.h"
#include "views/compare_view.h"
#include "views/token_map_view.h"

using namespace attnlens;
using namespace attnlens::gui;
using namespace attnlens::gui::test;

namespace {

// The core's rollout of `query` through layers 0..upTo of the dump (every layer of one model), from
// heads built on a second reader. The desktop program forms the whole product for N up to
// RolloutStore::kProductMaxTokens and each row on its own above: the reference is the other way.
RowVector coreRollout(const QString& path, int image, int upTo, const std::string& paradigm, Index query,
                      const RolloutOptions& options) {
    auto reader = DumpReader::open(path.toStdString());
    std::vector<std::unique_ptr<HeadActivations>> acts;
    std::vector<std::unique_ptr<AttentionHead>> heads;
    std::vector<RolloutLayer> layers;
    for (int l = 0; l <= upTo; ++l) {
        const LayerInfo& li = reader->info().layers[std::size_t(l)];
        RolloutLayer layer;
        for (int h = 0; h < li.heads; ++h) {
            acts.push_back(std::make_unique<HeadActivations>(reader->readHead(image, l, h)));
            heads.push_back(std::make_unique<AttentionHead>(
                presetParadigm(paradigm), HeadInputs{&acts.back()->q, &acts.back()->k, li.scale, li.kernelApplied}));
            layer.push_back(heads.back().get());
        }
        layers.push_back(layer);
    }
    if (layers.front().front()->tokens() <= RolloutStore::kProductMaxTokens) return rolloutRow(layers, query, options);
    return rolloutMatrix(layers, options).row(query);
}

}  // namespace

class RolloutTests : public AppTestFixture {
    Q_OBJECT
private Q_SLOTS:
    void tokenMapShowsTheRolloutOfTheQueryAndOfCls();
    void furtherQueriesAreRowsOfTheProduct();
    void largeGridsComputeEachRowOnItsOwn();
    void comparisonShowsEveryParadigmsRollout();
    void dockOptionsReachTheRollout();
    void sessionFileKeepsTheRollout();
    void unreadableLayerOnTheWayIsSaidInline();
    void renderDrawsTheRollout();
};

void RolloutTests::tokenMapShowsTheRolloutOfTheQueryAndOfCls() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    w.showView("tokenmap");
    s->setLayer(2);
    s->setParadigm(s->paradigmIndex("mala"));
    const Index q = s->layout().token(3, 4);
    s->setQuery(q);
    auto* box = w.findChild<QComboBox*>(QStringLiteral("mapContent"));
    QVERIFY(box);
    box->setCurrentIndex(box->findData(QStringLiteral("rollout-query")));
    QVERIFY(s->selection().rolloutShown());
    QCOMPARE(s->rollout().layers(), (std::vector<int>{0, 1, 2}));
    waitIdle(s);
    TokenMapView* t = w.tokenMapView();
    t->refreshNow();
    const RolloutOptions defaults;
    const RowVector want = coreRollout(small_, 0, 2, "mala", q, defaults);
    QString why;
    QVERIFY2(mapShowsRow(t->colorMap(), s->layout(), want, &why), qPrintable(why));
    QVERIFY(sameValue(t->prefixValue(0), want[0]));
    QVERIFY2(t->titleText().contains(QStringLiteral("rollout")), qPrintable(t->titleText()));
    QVERIFY2(t->noteText().contains(QStringLiteral("3 layers")) && t->noteText().contains(QStringLiteral("clipped")),
             qPrintable(t->noteText()));
    QVERIFY(t->colorMap()->visible());

    // Rollout of CLS: token 0 whatever the query; moving the query does not change the map.
    box->setCurrentIndex(box->findData(QStringLiteral("rollout-cls")));
    waitIdle(s);
    t->refreshNow();
    const RowVector cls = coreRollout(small_, 0, 2, "mala", 0, defaults);
    QVERIFY2(mapShowsRow(t->colorMap(), s->layout(), cls, &why), qPrintable(why));
    s->setQuery(s->layout().token(0, 0));
    waitIdle(s);
    t->refreshNow();
    QVERIFY2(mapShowsRow(t->colorMap(), s->layout(), cls, &why), qPrintable(why));
    QVERIFY2(t->titleText().contains(QStringLiteral("CLS")), qPrintable(t->titleText()));

    // The first layer alone: R_1's row, the head's rows fused (a different product length).
    s->setLayer(0);
    waitIdle(s);
    t->refreshNow();
    QVERIFY2(mapShowsRow(t->colorMap(), s->layout(), coreRollout(small_, 0, 0, "mala", 0, defaults), &why),
             qPrintable(why));

    // Back to attention: the head's row again.
    box->setCurrentIndex(box->findData(QStringLiteral("attention")));
    t->refreshNow();
    QVERIFY2(mapShowsRow(t->colorMap(), s->layout(), coreRow(small_, 0, 0, 0, "mala", s->selection().query), &why),
             qPrintable(why));
}

// Up to RolloutStore::kProductMaxTokens the first rollout forms R_L ... R_1 once; every further query of
// the same image, layers and options is one of its rows, shown without a job.
void RolloutTests::furtherQueriesAreRowsOfTheProduct() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    w.showView("tokenmap");
    s->setLayer(2);
    s->setMapContent(MapContent::RolloutOfQuery);
    waitIdle(s);
    TokenMapView* t = w.tokenMapView();
    t->refreshNow();
    const int delivered = s->jobs().delivered();
    const std::string name = s->paradigms()[std::size_t(s->selection().paradigm)].name;
    QString why;
    for (Index q : {Index(0), s->layout().token(0, 6), s->layout().token(5, 0)}) {
        s->setQuery(q);
        t->refreshNow();
        QVERIFY(!s->jobs().busy());
        QVERIFY2(mapShowsRow(t->colorMap(), s->layout(), coreRollout(small_, 0, 2, name, q, RolloutOptions{}), &why),
                 qPrintable(why));
    }
    QCOMPARE(s->jobs().delivered(), delivered);
    // Other options are another product.
    RolloutOptions o;
    o.residual = 0.2;
    s->rollout().setOptions(o);
    t->refreshNow();
    QVERIFY(s->mapContentRow(s->selection().paradigm).pending || s->jobs().delivered() > delivered);
    waitIdle(s);
    t->refreshNow();
    QVERIFY2(mapShowsRow(t->colorMap(), s->layout(), coreRollout(small_, 0, 2, name, s->selection().query, o), &why),
             qPrintable(why));
}

// Above RolloutStore::kProductMaxTokens each query's row is a job of its own (rolloutRow), checked against
// the dense product; a query moved while one is computing drops the stale result.
void RolloutTests::largeGridsComputeEachRowOnItsOwn() {
    const QString large = dir_.filePath("large-rollout.h5");
    SynthOptions o;
    o.layers = 2;
    o.heads = 2;
    o.gridH = 23;
    o.gridW = 23;
    o.prefix = 1;
    o.dim = 6;
    o.images = 1;
    writeSynthDump(large.toStdString(), o);
    MainWindow& w = openWindow(large);
    Session* s = w.session();
    QVERIFY(s->layout().tokens() > RolloutStore::kProductMaxTokens);
    w.showView("tokenmap");
    s->setLayer(1);
    s->setParadigm(s->paradigmIndex("softmax"));
    s->setMapContent(MapContent::RolloutOfQuery);
    s->setQuery(s->layout().token(4, 4));
    const Index q = s->layout().token(11, 12);
    s->setQuery(q);
    waitIdle(s);
    TokenMapView* t = w.tokenMapView();
    t->refreshNow();
    QString why;
    QVERIFY2(mapShowsRow(t->colorMap(), s->layout(), coreRollout(large, 0, 1, "softmax", q, RolloutOptions{}), &why),
             qPrintable(why));
    QVERIFY2(t->titleText().contains(QStringLiteral("(y 11, x 12)")), qPrintable(t->titleText()));
}

void RolloutTests::comparisonShowsEveryParadigmsRollout() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    w.showView("compare");
    s->setLayer(1);
    const Index q = s->layout().token(2, 2);
    s->setQuery(q);
    s->setMapContent(MapContent::RolloutOfQuery);
    CompareView* c = w.compareView();
    waitIdle(s);
    c->refreshNow();
    QCOMPARE(int(c->panels().size()), 8);
    QString why;
    for (const auto& p : c->panels()) {
        const std::string name = s->paradigms()[std::size_t(p.paradigm)].name;
        QVERIFY2(p.map->visible(), name.c_str());
        QVERIFY2(mapShowsRow(p.map, s->layout(), coreRollout(small_, 0, 1, name, q, RolloutOptions{}), &why),
                 qPrintable(QString::fromStdString(name) + ": " + why));
    }
    QVERIFY2(plotTexts(c).contains(QStringLiteral("rollout of (y 2, x 2)")), qPrintable(plotTexts(c)));
    // The difference panel is the difference of the two rollouts.
    c->setDifference(s->paradigmIndex("softmax"), s->paradigmIndex("linear_relu"));
    waitIdle(s);
    c->refreshNow();
    const RowVector d = coreRollout(small_, 0, 1, "softmax", q, RolloutOptions{}) -
                        coreRollout(small_, 0, 1, "linear_relu", q, RolloutOptions{});
    QVERIFY2(mapShowsRow(c->panels().back().map, s->layout(), d, &why), qPrintable(why));
}

void RolloutTests::dockOptionsReachTheRollout() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    w.showView("tokenmap");
    s->setLayer(2);
    s->setParadigm(s->paradigmIndex("inline"));
    s->setMapContent(MapContent::RolloutOfQuery);
    auto* fusion = w.findChild<QComboBox*>(QStringLiteral("rolloutFusion"));
    auto* weights = w.findChild<QComboBox*>(QStringLiteral("rolloutWeights"));
    auto* residual = w.findChild<QDoubleSpinBox*>(QStringLiteral("rolloutResidual"));
    auto* discard = w.findChild<QDoubleSpinBox*>(QStringLiteral("rolloutDiscard"));
    QVERIFY(fusion && weights && residual && discard);
    QVERIFY(fusion->isEnabled());
    fusion->setCurrentText(QStringLiteral("max"));
    weights->setCurrentText(QStringLiteral("absolute"));
    residual->setValue(0.3);
    discard->setValue(0.2);
    RolloutOptions o;
    o.fusion = HeadFusion::Max;
    o.weights = RolloutWeights::Absolute;
    o.residual = 0.3;
    o.discardRatio = 0.2;
    QVERIFY(s->rollout().options().fusion == o.fusion);
    QCOMPARE(s->rollout().options().discardRatio, 0.2);
    waitIdle(s);
    TokenMapView* t = w.tokenMapView();
    t->refreshNow();
    QString why;
    const RowVector want = coreRollout(small_, 0, 2, "inline", s->selection().query, o);
    QVERIFY2(mapShowsRow(t->colorMap(), s->layout(), want, &why), qPrintable(why));
    QVERIFY2(t->noteText().contains(QStringLiteral("max")) && t->noteText().contains(QStringLiteral("discard 0.2")),
             qPrintable(t->noteText()));
    // Signed InLine weights: the map may hold negative values and then uses the diverging scale.
    weights->setCurrentText(QStringLiteral("signed"));
    fusion->setCurrentText(QStringLiteral("mean"));
    discard->setValue(0);
    waitIdle(s);
    t->refreshNow();
    o.weights = RolloutWeights::Signed;
    o.fusion = HeadFusion::Mean;
    o.discardRatio = 0;
    QVERIFY2(
        mapShowsRow(t->colorMap(), s->layout(), coreRollout(small_, 0, 2, "inline", s->selection().query, o), &why),
        qPrintable(why));
    // Off: the options are not editable.
    s->setMapContent(MapContent::Attention);
    QVERIFY(!fusion->isEnabled());
}

void RolloutTests::sessionFileKeepsTheRollout() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    s->setLayer(1);
    s->setMapContent(MapContent::RolloutOfCls);
    RolloutOptions o;
    o.fusion = HeadFusion::Min;
    o.residual = 0.7;
    s->rollout().setOptions(o);
    const SessionState saved = captureSelection(*s);
    const QString file = dir_.filePath("rollout.session.json");
    writeSessionFile(file, saved);
    const SessionState read = readSessionFile(file);
    QCOMPARE(read.map, std::string("rollout-cls"));
    QVERIFY(read.rollout.fusion == HeadFusion::Min);
    QCOMPARE(read.rollout.residual, 0.7);

    Preferences prefs;
    Session other(prefs);
    other.jobs().setSynchronous(true);
    other.open(read.dump);
    applySelection(other, read);
    QVERIFY(other.selection().map == MapContent::RolloutOfCls);
    QCOMPARE(other.rollout().options().residual, 0.7);
    const RowData& r = other.mapContentRow(other.selection().paradigm);
    QVERIFY2(r.error.isEmpty() && !r.pending, qPrintable(r.error));
    const RowVector want =
        coreRollout(small_, 0, 1, other.paradigms()[std::size_t(other.selection().paradigm)].name, 0, o);
    for (Index j = 0; j < want.size(); ++j) QVERIFY(sameValue(r.values[j], want[j]));

    // Out-of-range options in a session file are refused with the field named.
    nlohmann::json j = sessionToJson(read);
    j["rollout"]["discard_ratio"] = 1.0;
    try {
        sessionFromJson(j, "x.json");
        QFAIL("a discard ratio of 1 was accepted");
    } catch (const Error& e) {
        QVERIFY2(QString::fromUtf8(e.what()).contains(QStringLiteral("rollout")), e.what());
    }
    j = sessionToJson(read);
    j["map"] = "rollout-everything";
    QVERIFY_THROWS_EXCEPTION(Error, sessionFromJson(j, "x.json"));
}

// Issue 12's damaged dump: /layers/2/k of image 0 cannot be read. The rollout up to layer 1 works,
// the rollout up to layer 3 passes through layer 2 and says so inline (no map, no crash), and
// image 1 rolls out through every layer.
void RolloutTests::unreadableLayerOnTheWayIsSaidInline() {
    QString why;
    const QString damaged = writeDamagedDump(dir_.filePath("damaged-rollout.h5"), &why);
    if (damaged.isEmpty()) {
        if (pythonUnavailable(why)) QSKIP(qPrintable(why));
        QFAIL(qPrintable(why));
    }
    MainWindow& w = openWindow(damaged);
    Session* s = w.session();
    w.showView("tokenmap");
    s->setParadigm(s->paradigmIndex("softmax"));
    s->setMapContent(MapContent::RolloutOfQuery);
    s->setLayer(1);
    waitIdle(s);
    TokenMapView* t = w.tokenMapView();
    t->refreshNow();
    QVERIFY(t->colorMap()->visible());
    s->setLayer(3);
    waitIdle(s);
    t->refreshNow();
    QVERIFY(!t->colorMap()->visible());
    QVERIFY2(t->titleText().contains(QStringLiteral("NOT SHOWN")), qPrintable(t->titleText()));
    QVERIFY2(t->noteText().contains(QStringLiteral("layer 2")), qPrintable(t->noteText()));
    s->setImage(1);
    waitIdle(s);
    t->refreshNow();
    QVERIFY(t->colorMap()->visible());
    QVERIFY2(mapShowsRow(t->colorMap(), s->layout(),
                         coreRollout(damaged, 1, 3, "softmax", s->selection().query, RolloutOptions{}), &why),
             qPrintable(why));
}

void RolloutTests::renderDrawsTheRollout() {
    const QString out = dir_.filePath("rollout.png");
    auto render = [&](const QStringList& extra) {
        QProcess p;
        p.start(QStringLiteral(ATTNLENS_GUI_PATH),
                QStringList{QStringLiteral("render"), small_, QStringLiteral("--layer"), QStringLiteral("2"),
                            QStringLiteral("-o"), out} +
                    extra);
        p.waitForFinished(60000);
        return p.exitCode();
    };
    QFile::remove(out);
    QCOMPARE(render({QStringLiteral("--view"), QStringLiteral("tokenmap"), QStringLiteral("--rollout"),
                     QStringLiteral("cls"), QStringLiteral("--rollout-fusion"), QStringLiteral("max")}),
             0);
    QVERIFY(QFileInfo(out).size() > 1000);
    QFile::remove(out);
    QCOMPARE(render({QStringLiteral("--view"), QStringLiteral("compare"), QStringLiteral("--rollout"),
                     QStringLiteral("query")}),
             0);
    QVERIFY(QFileInfo::exists(out));
    QFile::remove(out);
    QCOMPARE(render({QStringLiteral("--rollout"), QStringLiteral("sideways")}), 2);
    QCOMPARE(render({QStringLiteral("--rollout"), QStringLiteral("query"), QStringLiteral("--rollout-residual"),
                     QStringLiteral("2")}),
             2);
    QVERIFY(!QFileInfo::exists(out));
}

int main(int argc, char** argv) { return runAppTests<RolloutTests>(argc, argv); }

#include "rollout_tests.moc"
