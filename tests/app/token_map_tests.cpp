// GUI tests of the token map on the real window (fixture: app_test_fixture.h): the bundled example,
// clicking tokens and the CLS cell, arrow keys, switching paradigm, layer, head and image, the
// signed colour range and the value under the cursor, each against the core's row.
#include "app_test_fixture.h"

#include <QComboBox>
#include <QFileInfo>
#include <QImage>
#include <QLabel>
#include <QSignalSpy>
#include <QSpinBox>
#include <algorithm>

#include "document/example_dump.h"
#include "views/token_map_view.h"

using namespace attnlens;
using namespace attnlens::gui;
using namespace attnlens::gui::test;

class TokenMapTests : public AppTestFixture {
    Q_OBJECT
private Q_SLOTS:
    void opensBundledExample();
    void exampleClickSwitchAndStatusBar();
    void clickOnTokenShowsCoreRow();
    void clickOnClsCellSelectsCls();
    void arrowKeysMoveQuery();
    void switchingParadigmLayerHeadImageUpdatesMap();
    void signedParadigmUsesSymmetricRangeWithoutClipping();
    void hoverShowsValueUnderCursor();
    void mapStaysPutWhenTheTitleRewraps();
};

void TokenMapTests::opensBundledExample() {
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

// The scenario on the bundled example itself: click a token at a known grid position and
// compare with the core's row; CLS; switch paradigm, layer and head; the status bar and the image.
void TokenMapTests::exampleClickSwitchAndStatusBar() {
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

    // The input image's outlines over the map (the example has /images): shown at 40 %, and they
    // change the picture; hidden at 0 %.
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

void TokenMapTests::clickOnTokenShowsCoreRow() {
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

void TokenMapTests::clickOnClsCellSelectsCls() {
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

void TokenMapTests::arrowKeysMoveQuery() {
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

void TokenMapTests::switchingParadigmLayerHeadImageUpdatesMap() {
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

void TokenMapTests::signedParadigmUsesSymmetricRangeWithoutClipping() {
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

void TokenMapTests::hoverShowsValueUnderCursor() {
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

int main(int argc, char** argv) {
    // Session::open checks each dump in a child process started from this executable.
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    return runAppTests<TokenMapTests>(argc, argv);
}

// Issue 49 item 11: a query whose title wraps to one line fewer than the last query's moved the map up, and
// the next query moved it back. The title and note keep their tallest height at a width: after the first
// two-line title the map stays where it is, in both directions; a new width starts over.
void TokenMapTests::mapStaysPutWhenTheTitleRewraps() {
    MainWindow& w = openWindow(findOrCreateExampleDump());
    Session* s = w.session();
    w.showView("tokenmap");
    TokenMapView* v = w.tokenMapView();
    const TokenLayout& l = s->layout();
    const Index shortTitle = l.token(0, 0), longTitle = l.token(l.gridH - 1, l.gridW - 1);
    const auto titleLines = [&](Index q) {
        s->setQuery(q);
        v->refreshNow();
        layoutNow(v);
        layoutNow(v);
        auto* title = qobject_cast<QCPTextElement*>(v->plot()->plotLayout()->element(0, 0));
        return title ? int(title->text().count('\n')) + 1 : 0;
    };
    // A window width at which (y 0, x 0) takes one line fewer than (y 13, x 13).
    int width = 0;
    for (int candidate = 560; candidate <= 1600 && width == 0; candidate += 6) {
        w.resize(candidate, 700);
        if (titleLines(shortTitle) < titleLines(longTitle)) width = candidate;
    }
    QVERIFY2(width > 0, "no width re-wraps the title");
    w.resize(width + 1, 700);  // a fresh width: the steady height starts over
    titleLines(shortTitle);
    titleLines(longTitle);
    // The map's row starts where it did (the title's and note's rows keep their height); the map inside
    // it still moves by a few pixels when the colour bar's tick labels change width.
    const int top = v->gridRect()->outerRect().top();
    for (Index q : {shortTitle, longTitle, shortTitle}) {
        titleLines(q);
        QCOMPARE(v->gridRect()->outerRect().top(), top);
    }
}

#include "token_map_tests.moc"
