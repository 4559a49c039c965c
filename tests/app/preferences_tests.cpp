// GUI tests of the preferences on the real window (fixture: app_test_fixture.h): saving, loading and
// applying them, the dialog rejecting bad input, drag and drop and the recent files.
#include "app_test_fixture.h"

#include <QDropEvent>
#include <QFileInfo>
#include <QLineEdit>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QSettings>

#include "attnlens/dump/dump.h"
#include "document/preferences.h"
#include "shell/preferences_dialog.h"

using namespace attnlens;
using namespace attnlens::gui;
using namespace attnlens::gui::test;

class PreferencesTests : public AppTestFixture {
    Q_OBJECT
private Q_SLOTS:
    void preferencesRoundTripAndApply();
    void preferencesDialogRejectsBadInput();
    void dropAndRecentFiles();
};

void PreferencesTests::preferencesRoundTripAndApply() {
    Preferences p;
    p.paradigmSpecs = {"relu_c1:norm=subtract,kernel=relu,c=1", "focused:norm=divide,kernel=focused,p=2"};
    p.analysis.spectrum.relativeTolerance = 1e-9;
    p.analysis.localK = {3, 5};
    p.analysis.confusion.tau = 0.01;
    p.analysis.confusion.queryRelativeFloor = 0.25;
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
    QCOMPARE(q.analysis.confusion.queryRelativeFloor, 0.25);
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
    const RowVector& got = s.attentionRow(s.selection().paradigm).values;
    for (Index j = 0; j < want.size(); ++j) QVERIFY(sameValue(got[j], want[j]));
}

void PreferencesTests::preferencesDialogRejectsBadInput() {
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
    // The analysis fields follow attnlens-cli's rule (validate), in its words.
    auto* kList = d.findChild<QLineEdit*>("localK");
    auto* rankTol = d.findChild<QLineEdit*>("rankTolerance");
    QVERIFY(kList && rankTol);
    kList->setText("3,4");
    QVERIFY(!d.collect(&out, &error));
    QCOMPARE(error, QString("local mass window sizes: must be odd, got 4"));
    kList->setText("3, 5");
    rankTol->setText("5");  // accepted here before, refused by attnlens-cli --rank-tol
    QVERIFY(!d.collect(&out, &error));
    QCOMPARE(error, QString("rank tolerance: must be in (0, 1), got 5"));
    rankTol->setText("1e-6");
    // The confused pairs' query floor (attnlens-cli --confusion-floor, issue 46 item 5), its rule too.
    auto* floor = d.findChild<QLineEdit*>("confusionFloor");
    QVERIFY(floor);
    QCOMPARE(floor->toolTip(), QString("attnlens-cli --confusion-floor"));
    floor->setText("3");
    QVERIFY(!d.collect(&out, &error));
    QCOMPARE(error, QString("confusion query floor: must be in [0, 2], got 3"));
    floor->setText("0.3");
    QVERIFY2(d.collect(&out, &error), qPrintable(error));
    QCOMPARE(out.analysis.confusion.queryRelativeFloor, 0.3);
    QCOMPARE(out.analysis.localK, (std::vector<int>{3, 5}));
    QCOMPARE(*out.analysis.spectrum.relativeTolerance, 1e-6);

    // Stored values that the rule refuses are reported and their defaults kept, the others loaded.
    QSettings settings(dir_.filePath("bad-prefs.ini"), QSettings::IniFormat);
    settings.beginGroup("preferences");
    settings.setValue("rankRelativeTolerance", "5");
    settings.setValue("localK", "3,4");
    settings.setValue("tau", "0.01");
    settings.setValue("confusionFloor", "-1");
    settings.setValue("magnitudePoints", "1");
    settings.endGroup();
    QStringList problems;
    const Preferences loaded = Preferences::load(settings, &problems);
    QCOMPARE(problems, (QStringList{"rank tolerance: must be in (0, 1), got 5 (the default is kept)",
                                    "local mass window sizes: must be odd, got 4 (the default is kept)",
                                    "confusion query floor: must be in [0, 2], got -1 (the default is kept)",
                                    "magnitude factors: 1 is out of range [2, 1000] (the default is kept)"}));
    QVERIFY(!loaded.analysis.spectrum.relativeTolerance);
    QCOMPARE(loaded.analysis.localK, Preferences{}.analysis.localK);
    QCOMPARE(loaded.analysis.confusion.tau, 0.01);
    QCOMPARE(loaded.analysis.magnitude.points, MagnitudeOptions{}.points);
}

void PreferencesTests::dropAndRecentFiles() {
    MainWindow& w = openWindow(nanDump_);
    QMimeData mime;
    mime.setUrls({QUrl::fromLocalFile(small_)});
    QDragEnterEvent enter(QPoint(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&w, &enter);
    QVERIFY(enter.isAccepted());
    QDropEvent drop(QPointF(50, 50), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&w, &drop);
    // A dropped file opens on a worker thread.
    QTRY_COMPARE_WITH_TIMEOUT(w.session()->path(), small_, 20000);
    QCOMPARE(w.recentFiles().value(0), QFileInfo(small_).absoluteFilePath());
    QCOMPARE(w.recentFiles().value(1), QFileInfo(nanDump_).absoluteFilePath());
}

int main(int argc, char** argv) {
    // Session::open checks each dump in a child process started from this executable.
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    return runAppTests<PreferencesTests>(argc, argv);
}

#include "preferences_tests.moc"
