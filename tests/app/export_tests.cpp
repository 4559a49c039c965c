// GUI tests of the exports on the real window (fixture: app_test_fixture.h): PNG/SVG/PDF of one view
// and of all views, failures, statistics JSON against the schema, and the headless `attnlens render`
// (in process and as the program's command line).
#include "app_test_fixture.h"
#include "document/example_dump.h"
#include "views/view_registry.h"

#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QLineEdit>
#include <QProcess>
#include <QSet>
#include <QSettings>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTextStream>
#include <QXmlStreamReader>
#include <chrono>
#include <utility>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/report.h"
#include "attnlens/dump/dump.h"
#include "shell/export_dialog.h"
#include "shell/figure_export.h"
#include "shell/render_command.h"
#include "shell/selection_options.h"
#include "shell/view_options.h"
#include "views/dump_pair_view.h"
#include "views/token_map_view.h"

using namespace attnlens;
using namespace attnlens::gui;
using namespace attnlens::gui::test;

namespace {

int distinctColours(const QImage& image) {
    QSet<QRgb> colours;
    const QImage img = image.convertToFormat(QImage::Format_RGB32);
    for (int y = 0; y < img.height(); y += 2)
        for (int x = 0; x < img.width(); x += 2) colours.insert(img.pixel(x, y));
    return int(colours.size());
}

}  // namespace

class ExportTests : public AppTestFixture {
    Q_OBJECT
private Q_SLOTS:
    void exportPngSvgPdfOfCurrentView();
    void exportAllViews();
    void everyExportedSvgIsWellFormedXml();
    void exportFailureSaysWhyAndLeavesNoFile();
    void exportAllToAMissingFolderFailsAtOnceAndTheTypedExtensionWins();
    void exportStatisticsJsonValidAgainstSchema();
    void renderMatchesWindowExport();
    void renderCommandLine();
    void startCommandLineRefusesBadOptionsBeforeAnyWindow();
    void startCommandLineTakesTheViewsSettingsAsRenderDoes();
    void firstMapTimeIsPrintedOnceTheMapIsPainted();
    void viewRegistryIsTheOneListOfViews();
};

// tests/bench/gui_start_time.py's hook: the program prints when it painted the first map and quits,
// a time between its start and its end (a fresh settings folder: nothing restored).
void ExportTests::firstMapTimeIsPrintedOnceTheMapIsPainted() {
    QTemporaryDir home;
    QVERIFY(home.isValid());
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("QT_QPA_PLATFORM", "offscreen");
    env.insert("HOME", home.path());
    env.insert("XDG_CONFIG_HOME", home.path());
    auto unixSeconds = [] {
        return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    };
    QProcess p;
    p.setProcessEnvironment(env);
    const double before = unixSeconds();
    p.start(QStringLiteral(ATTNLENS_GUI_PATH), {small_, "--first-map-time"});
    QVERIFY(p.waitForFinished(120000));
    const double after = unixSeconds();
    QCOMPARE(p.exitCode(), 0);
    const QStringList lines = QString::fromLocal8Bit(p.readAllStandardOutput()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 1);
    QVERIFY2(lines[0].startsWith("first map painted at "), qPrintable(lines[0]));
    bool ok = false;
    const double painted = lines[0].section(' ', -1).toDouble(&ok);
    QVERIFY(ok);
    QVERIFY2(
        painted > before && painted < after,
        qPrintable(QString("%1 not in (%2, %3)").arg(painted, 0, 'f', 3).arg(before, 0, 'f', 3).arg(after, 0, 'f', 3)));
}

void ExportTests::viewRegistryIsTheOneListOfViews() {
    // The window, render and export-all draw the registry's views: same ids, same order, and each
    // entry makes a view that answers to its id.
    MainWindow& w = openWindow(small_);
    QCOMPARE(w.views().size(), viewRegistry().size());
    Session second(w.session()->preferences());
    for (std::size_t i = 0; i < viewRegistry().size(); ++i) {
        const ViewEntry& entry = viewRegistry()[i];
        QCOMPARE(w.views()[i]->viewId(), entry.id);
        const std::unique_ptr<PlotView> made = entry.make(w.session(), &second);
        QCOMPARE(made->viewId(), entry.id);
        QCOMPARE(findView(entry.id), &entry);
        QVERIFY(viewIdList().contains(entry.id));
    }
    QVERIFY(findView(QStringLiteral("nonesuch")) == nullptr);
    // render names every view in its help and refuses an unknown one with the list (the help is
    // wrapped: compared with its white space simplified).
    const QString usage = renderUsage().simplified();
    QVERIFY(usage.contains(viewIdList()));
    QVERIFY(usage.contains(QStringLiteral("Exit codes: ") + QString::fromStdString(attnlens::exitCodeText())));
    const QString out = dir_.filePath("x.png");
    QString outText, err;
    QTextStream os(&outText), es(&err);
    QCOMPARE(runRender({small_, "--view", "nonesuch", "-o", out}, os, es), 2);
    es.flush();
    QVERIFY2(err.contains(viewIdList()), qPrintable(err));
    QVERIFY(!QFileInfo::exists(out));
}

void ExportTests::exportPngSvgPdfOfCurrentView() {
    MainWindow& w = openWindow(small_);
    layoutNow(w.tokenMapView());
    FigureOptions o;
    o.dpi = 192;
    const QString png = dir_.filePath("map.png"), svg = dir_.filePath("map.svg"), pdf = dir_.filePath("map.pdf");
    QString error;
    QVERIFY2(w.exportCurrentFigure(png, o, &error), qPrintable(error));
    QVERIFY2(w.exportCurrentFigure(svg, o, &error), qPrintable(error));
    QVERIFY2(w.exportCurrentFigure(pdf, o, &error), qPrintable(error));

    QImage image(png);
    QVERIFY(!image.isNull());
    const QSize plotSize = w.tokenMapView()->plot()->size();
    QCOMPARE(image.width(), plotSize.width() * 2);  // 192 dpi = twice the logical pixels
    QVERIFY2(distinctColours(image) > 16, "PNG looks blank");
    QCOMPARE(qRound(image.dotsPerMeterX() * 0.0254), 192);

    QFile sf(svg);
    QVERIFY(sf.open(QIODevice::ReadOnly));
    QXmlStreamReader xml(&sf);
    bool sawSvg = false, sawImage = false, sawTitle = false;
    while (!xml.atEnd()) {
        xml.readNext();
        if (xml.isStartElement() && xml.name() == QLatin1String("svg")) sawSvg = true;
        if (xml.isStartElement() && xml.name() == QLatin1String("image")) sawImage = true;  // the heatmap
        if (xml.isCharacters() && xml.text().contains(QLatin1String("softmax"))) sawTitle = true;
    }
    QVERIFY2(!xml.hasError(), qPrintable(xml.errorString()));
    QVERIFY(sawSvg && sawImage && sawTitle);

    QFile pf(pdf);
    QVERIFY(pf.open(QIODevice::ReadOnly));
    const QByteArray bytes = pf.readAll();
    QVERIFY(bytes.startsWith("%PDF-"));
    QVERIFY(bytes.trimmed().endsWith("%%EOF"));
    QVERIFY(bytes.size() > 2000);
    // No temporary files are left next to the outputs.
    QCOMPARE(QDir(dir_.path()).entryList({"map*"}).size(), 3);
}

// Issue 26 item 4: the "Entropy & negative mass" view's title went into <title> with a bare '&'.
// Every view, exported as SVG, must parse as XML, and its <title> must say the view's title.
void ExportTests::everyExportedSvgIsWellFormedXml() {
    MainWindow& w = openWindow(small_);
    QSignalSpy done(&w, &MainWindow::exportFinished);
    FigureOptions o;
    o.size = QSize(900, 650);
    QVERIFY(w.openSecondFile(small_));  // Compare dumps has a figure too
    w.exportAllFigures(dir_.filePath("every.svg"), o);
    QTRY_VERIFY_WITH_TIMEOUT(!done.isEmpty(), 90000);
    const QStringList written = done.first().at(0).toStringList();
    QCOMPARE(done.first().at(1).toString(), QString());
    QCOMPARE(written.size(), int(w.views().size()));
    bool sawAmpersand = false;
    for (const QString& path : written) {
        QVERIFY2(path.endsWith(QLatin1String(".svg")), qPrintable(path));
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QXmlStreamReader xml(&f);
        QString title;
        while (!xml.atEnd()) {
            xml.readNext();
            if (xml.isStartElement() && xml.name() == QLatin1String("title") && title.isEmpty())
                title = xml.readElementText();
        }
        QVERIFY2(!xml.hasError(), qPrintable(path + ": " + xml.errorString()));
        QVERIFY2(title.startsWith(QStringLiteral("AttnLens — ")), qPrintable(path + ": " + title));
        if (title.contains('&')) sawAmpersand = true;
    }
    QVERIFY2(sawAmpersand, "no view title with '&' was exported (the case this test is for)");
}

void ExportTests::exportAllViews() {
    MainWindow& w = openWindow(small_);
    QSignalSpy done(&w, &MainWindow::exportFinished);
    FigureOptions o;
    o.size = QSize(900, 650);
    w.exportAllFigures(dir_.filePath("all.png"), o);
    QTRY_VERIFY_WITH_TIMEOUT(!done.isEmpty(), 90000);
    const QStringList written = done.first().at(0).toStringList();
    QCOMPARE(done.first().at(1).toString(), QString());
    // Without a second dump Compare dumps has nothing to draw: no file holding its hint, and the
    // status says so (issue 49 item 11).
    QCOMPARE(written.size(), int(w.views().size()) - 1);
    QVERIFY(!QFile::exists(dir_.filePath("all-dumps.png")));
    QVERIFY2(w.statusBar()->currentMessage().contains(QStringLiteral("nothing to draw in: Compare dumps")),
             qPrintable(w.statusBar()->currentMessage()));
    // ... nor axes on screen: an empty 0 ... 5 grid would read as one.
    auto* pair = qobject_cast<DumpPairView*>(w.view("dumps"));
    QVERIFY(pair);
    pair->refreshNow();
    QVERIFY(!pair->right().rect->visible());
    QVERIFY(w.openSecondFile(small_));
    pair->refreshNow();
    QVERIFY(pair->right().rect->visible());
    for (const QString& f : written) {
        QImage img(f);
        QVERIFY2(!img.isNull(), qPrintable(f));
        QCOMPARE(img.size(), QSize(900, 650));
        QVERIFY2(distinctColours(img) > 8, qPrintable(f + " looks blank"));
    }
    QVERIFY(written.contains(dir_.filePath("all-tokenmap.png")));
    QVERIFY(written.contains(dir_.filePath("all-confusion.png")));
}

void ExportTests::exportFailureSaysWhyAndLeavesNoFile() {
    MainWindow& w = openWindow(small_);
    QString error;
    const QString bad = dir_.filePath("no-such-dir/map.png");
    QVERIFY(!w.exportCurrentFigure(bad, {}, &error));
    QVERIFY2(error.contains("cannot write") && error.contains("no-such-dir"), qPrintable(error));
    QVERIFY(!QFile::exists(bad));
    QVERIFY(!w.exportCurrentFigure(dir_.filePath("map.bmp"), {}, &error));
    QVERIFY2(error.contains(".png, .svg or .pdf"), qPrintable(error));
    QCOMPARE(w.lastError(), error);
    // The Issues entries name the dump whose figure failed, and go when another dump is opened
    // (issue 49 item 11: they had no file and stayed).
    const auto exportEntries = [&w]() {
        QStringList files;
        for (int i = 0; i < w.issuesList()->topLevelItemCount(); ++i)
            if (w.issuesList()->topLevelItem(i)->text(2).contains(QStringLiteral("map.")))
                files << w.issuesList()->topLevelItem(i)->text(1);
        return files;
    };
    QCOMPARE(exportEntries(), QStringList({QFileInfo(small_).fileName(), QFileInfo(small_).fileName()}));
    QVERIFY(w.openFile(findOrCreateExampleDump()));
    QCOMPARE(exportEntries(), QStringList());
}

// Issue 26 item 8: a failed export of all views does not leave "waiting for analyses" in the status
// bar (it fails at once when the folder does not exist), and "all.pdf" typed while the format box
// says SVG writes PDF.
void ExportTests::exportAllToAMissingFolderFailsAtOnceAndTheTypedExtensionWins() {
    MainWindow& w = openWindow(small_);
    QSignalSpy done(&w, &MainWindow::exportFinished);
    w.exportAllFigures(dir_.filePath("no-such-dir/all.png"), {});
    QCOMPARE(done.size(), 1);
    const QString error = done.first().at(1).toString();
    QVERIFY2(error.contains("no-such-dir") && error.contains("does not exist"), qPrintable(error));
    QVERIFY2(!w.statusBar()->currentMessage().contains("waiting"), qPrintable(w.statusBar()->currentMessage()));

    QSettings().setValue(QStringLiteral("export/format"), QStringLiteral("SVG"));
    ExportFigureDialog dialog(QStringLiteral("Token map"), QStringLiteral("map"), small_, &w);
    auto* format = dialog.findChild<QComboBox*>(QStringLiteral("format"));
    auto* path = dialog.findChild<QLineEdit*>(QStringLiteral("path"));
    QVERIFY(format && path);
    QCOMPARE(format->currentText(), QStringLiteral("SVG"));
    path->selectAll();
    QTest::keyClicks(path, dir_.filePath("all.pdf"));
    QCOMPARE(format->currentText(), QStringLiteral("PDF"));  // the box follows what is typed
    QCOMPARE(path->text(), dir_.filePath("all.pdf"));        // and the text stays as typed
    dialog.accept();
    QCOMPARE(dialog.path(), dir_.filePath("all.pdf"));
    // A name without a known extension gets the box's.
    ExportFigureDialog second(QStringLiteral("Token map"), QStringLiteral("map"), small_, &w);
    auto* secondPath = second.findChild<QLineEdit*>(QStringLiteral("path"));
    secondPath->selectAll();
    QTest::keyClicks(secondPath, dir_.filePath("figure"));
    second.accept();
    QCOMPARE(second.path(), dir_.filePath("figure.pdf"));
}

void ExportTests::exportStatisticsJsonValidAgainstSchema() {
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    s->setLayer(1);
    s->setHead(1);
    const QString sel = dir_.filePath("selection.json"), all = dir_.filePath("whole.json");
    for (const auto& [path, whole] : {std::pair{sel, false}, std::pair{all, true}}) {
        QSignalSpy done(&w, &MainWindow::exportFinished);
        w.exportStatistics(path, whole);
        QTRY_VERIFY_WITH_TIMEOUT(!done.isEmpty(), 90000);
        QCOMPARE(done.first().at(1).toString(), QString());
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const nlohmann::json j = nlohmann::json::parse(f.readAll().toStdString());
        for (const char* key : {"schema", "schema_version", "tool", "input", "selection", "paradigms", "options",
                                "results", "non_finite", "timing", "summary"})
            QVERIFY2(j.contains(key), key);
        QCOMPARE(QString::fromStdString(j["tool"]["name"].get<std::string>()), QString("attnlens"));
        const std::size_t records = whole ? 3u * 3u * 2u * 8u : 8u;
        QCOMPARE(j["results"].size(), records);
        QCOMPARE(QString::fromStdString(j["input"]["sha256"].get<std::string>()).size(), 64);
        // Valid against the schema (python3-jsonschema is a dependency: setup-debian.sh).
        const QString schema = QStringLiteral(ATTNLENS_SOURCE_DIR "/resources/analysis.schema.json");
        QVERIFY(QFile::exists(schema));
        QProcess py;
        py.start("/usr/bin/python3", {"-c",
                                      "import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), "
                                      "json.load(open(sys.argv[2])))",
                                      path, schema});
        QVERIFY2(py.waitForStarted(10000), "cannot run /usr/bin/python3 to validate against the schema");
        QVERIFY(py.waitForFinished(60000));
        QVERIFY2(py.exitStatus() == QProcess::NormalExit && py.exitCode() == 0, py.readAllStandardError().constData());
        // The same numbers and options as the analysis library (what attnlens-cli analyze writes).
        auto reader = DumpReader::open(small_.toStdString());
        AnalyzeRequest req;
        req.paradigms = presetParadigms();
        if (!whole) {
            req.layers = {1};
            req.heads = {1};
            req.images = {0};
        }
        const nlohmann::json ref = reportToJson(analyzeDump(*reader, req), ToolInfo{});
        QVERIFY(j["results"] == ref["results"]);
        QVERIFY(j["paradigms"] == ref["paradigms"]);
        QVERIFY(j["options"] == ref["options"]);
        QVERIFY(j["selection"] == ref["selection"]);
    }
}

void ExportTests::renderMatchesWindowExport() {
    // The same pixels from the window's export and from render, also for the heads view, which
    // arranges its panels by the plot's size (render never shows its view: its layout must still
    // give the plot the figure's size before the panels are arranged).
    MainWindow& w = openWindow(small_);
    Session* s = w.session();
    s->setLayer(1);
    s->setQuery(s->layout().token(3, 2));
    for (const QString& view : {QStringLiteral("compare"), QStringLiteral("heads")}) {
        w.showView(view);
        QTRY_VERIFY(!s->jobs().busy());
        QCoreApplication::processEvents();
        FigureOptions o;
        o.size = QSize(900, 700);
        const QString fromWindow = dir_.filePath("window-" + view + ".png"),
                      fromRender = dir_.filePath("render-" + view + ".png");
        QString error;
        QVERIFY2(w.exportCurrentFigure(fromWindow, o, &error), qPrintable(error));
        QString out, err;
        QTextStream os(&out), es(&err);
        const int rc = runRender(
            {small_, "--view", view, "--layer", "1", "--query", "3,2", "--size", "900x700", "-o", fromRender}, os, es);
        QVERIFY2(rc == 0, qPrintable(err));
        const QImage a(fromWindow), b(fromRender);
        QCOMPARE(a.size(), b.size());
        if (view == QStringLiteral("compare")) {
            QVERIFY2(a == b, "render and window export differ");
            continue;
        }
        // The heads view's spacing follows the plot's size when its panels were arranged (the
        // window's, then the figure's): panel edges move by a pixel or two, the arrangement must
        // not. Measured: 4.6% of the pixels differ; before render activated its view's layout, it
        // arranged the panels for the plot's default size instead (3 columns and a wide first one
        // where the window has 4): 54.5% differed.
        qint64 differ = 0;
        for (int y = 0; y < a.height(); ++y)
            for (int x = 0; x < a.width(); ++x) differ += a.pixel(x, y) != b.pixel(x, y);
        const double share = double(differ) / double(qint64(a.width()) * a.height());
        QVERIFY2(share < 0.15, qPrintable(QStringLiteral("heads: %1 of the pixels differ").arg(share)));
    }
}

// Issue 49 item 9: `attnlens --help` without a display aborted (exit 134); `--paradigm nonesuch`
// opened a window on paradigm 0. Help and version work without a display, a bad option or value is
// refused with exit 2 before any window, and a window without a display is refused, not hidden.
void ExportTests::startCommandLineRefusesBadOptionsBeforeAnyWindow() {
    QProcessEnvironment bare = QProcessEnvironment::systemEnvironment();
    for (const char* variable : {"QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY"}) bare.remove(variable);
    struct Run {
        int code;
        QString out, err;
    };
    auto run = [&](const QStringList& args) {
        QProcess p;
        p.setProcessEnvironment(bare);
        p.start(QStringLiteral(ATTNLENS_GUI_PATH), args);
        if (!p.waitForFinished(60000)) {
            p.kill();
            return Run{-1, {}, {}};
        }
        return Run{p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2,
                   QString::fromLocal8Bit(p.readAllStandardOutput()), QString::fromLocal8Bit(p.readAllStandardError())};
    };
    Run r = run({"--help"});
    QCOMPARE(r.code, 0);
    QVERIFY2(r.out.contains("--paradigm") && r.out.contains("--screenshot"), qPrintable(r.out));
    r = run({"--version"});
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.contains(QStringLiteral(ATTNLENS_VERSION)));
    r = run({small_, "--nonesuch"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("attnlens: error: Unknown option 'nonesuch'"), qPrintable(r.err));
    const QString png = dir_.filePath("start.png");
    // The selection options follow render's rules (shell/selection_options.h, issue 48 item 3).
    for (const QStringList& bad : {QStringList{small_, "--paradigm", "nonesuch"}, QStringList{small_, "--image", "999"},
                                   QStringList{small_, "--view", "nonesuch"}, QStringList{small_, "--opacity", "101"},
                                   QStringList{small_, "--window-size", "big"}, QStringList{small_, "--head", "99"},
                                   QStringList{small_, "--channel", "1"}, QStringList{small_, "--local-branch"},
                                   QStringList{small_, "--rollout", "sideways"}}) {
        for (const bool screenshot : {false, true}) {
            const QStringList args = screenshot ? bad + QStringList{"--screenshot", png} : bad;
            r = run(args);
            QVERIFY2(r.code == 2, qPrintable(args.join(' ') + ": exit " + QString::number(r.code) + " " + r.err));
            QVERIFY2(r.err.contains("attnlens: error: --"), qPrintable(r.err));
            QVERIFY(!QFile::exists(png));
        }
    }
    r = run({small_, "--paradigm", "nonesuch"});
    QVERIFY2(r.err.contains("--paradigm: unknown paradigm 'nonesuch' (known: softmax,"), qPrintable(r.err));
    r = run({small_, "--channel", "1"});
    QVERIFY2(r.err.contains("--channel: only with --local-branch"), qPrintable(r.err));
    r = run({small_, "--local-branch"});
    QVERIFY2(r.err.contains("--local-branch: layer ") && r.err.contains("has no local branch"), qPrintable(r.err));
    r = run({small_, "--head", "1", "--rollout", "off", "--window-size", "1024x700", "--screenshot", png});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QVERIFY(QFile::remove(png));
    // Without a display: a window is refused with the way to a picture; a screenshot is taken offscreen.
    r = run({small_});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("no display to open a window on") && r.err.contains("attnlens render"), qPrintable(r.err));
    r = run({small_, "--paradigm", "mala", "--window-size", "1024x700", "--screenshot", png});
    QCOMPARE(r.code, 0);
    QCOMPARE(QImage(png).size(), QSize(1024, 700));
}

// Issue 48 item 3: the views' settings (view_options.h) are read one way by the desktop program and
// by render: the same bad values are refused with the same message by both, a setting changes the
// window's view as it changes render's figure, and both help texts list every option with its
// description from the option objects.
void ExportTests::startCommandLineTakesTheViewsSettingsAsRenderDoes() {
    struct Run {
        int code;
        QString err;
    };
    auto run = [&](const QStringList& args) {
        QProcess p;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
        p.setProcessEnvironment(env);
        p.start(QStringLiteral(ATTNLENS_GUI_PATH), args);
        if (!p.waitForFinished(120000)) {
            p.kill();
            return Run{-1, {}};
        }
        return Run{p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2,
                   QString::fromLocal8Bit(p.readAllStandardError())};
    };
    const QString png = dir_.filePath("settings.png"), figure = dir_.filePath("settings-render.png");
    for (const QStringList& bad :
         {QStringList{"--view", "compare", "--diff", "softmax,nonesuch"}, QStringList{"--scope", "everything"},
          QStringList{"--rollout-residual", "2"}, QStringList{"--rollout-fusion", "median"},
          QStringList{"--view", "local", "--k", "0"}, QStringList{"--view", "heads", "--head-statistic", "nonesuch"},
          QStringList{"--view", "sweep", "--sweep", "nonesuch=1:2:3"},
          QStringList{"--paradigms", "softmax,nonesuch"}}) {
        const Run window = run(QStringList{small_} + bad + QStringList{"--screenshot", png});
        const Run render = run(QStringList{"render", small_} + bad + QStringList{"-o", figure});
        QVERIFY2(window.code == 2 && render.code == 2,
                 qPrintable(bad.join(' ') + ": " + window.err + " / " + render.err));
        // The same message after each program's prefix.
        const QString said = window.err.section(QStringLiteral("attnlens: error: "), 1).trimmed();
        QVERIFY2(!said.isEmpty() && render.err.contains(said), qPrintable(window.err + " / " + render.err));
        QVERIFY(!QFile::exists(png) && !QFile::exists(figure));
    }
    // A setting reaches the window's view: the difference panel is a fourth panel in the picture.
    const QString plain = dir_.filePath("plain.png"), diff = dir_.filePath("diff.png");
    QCOMPARE(run({small_, "--view", "compare", "--paradigms", "softmax,inline", "--window-size", "1024x700",
                  "--screenshot", plain})
                 .code,
             0);
    QCOMPARE(run({small_, "--view", "compare", "--paradigms", "softmax,inline", "--diff", "softmax,inline",
                  "--window-size", "1024x700", "--screenshot", diff})
                 .code,
             0);
    QVERIFY(!QImage(plain).isNull() && QImage(plain).size() == QImage(diff).size());
    QVERIFY(QImage(plain) != QImage(diff));
    // Every shared option is in render's help, with its description.
    const QString help = renderUsage();
    const ViewOptions settings;
    const SelectionOptions selection;
    for (const QCommandLineOption& o : settings.all() + selection.all()) {
        QVERIFY2(help.contains(QStringLiteral("  --") + o.names().first()), qPrintable(o.names().first()));
        QVERIFY2(help.contains(o.description().section(QLatin1Char(' '), 0, 2)), qPrintable(o.names().first()));
    }
    // The help is wrapped: no line beyond 100 characters but a list of keys that cannot be broken.
    for (const QString& line : help.split(QLatin1Char('\n'))) QVERIFY2(line.size() <= 100, qPrintable(line));
}

void ExportTests::renderCommandLine() {
    const QString exe = QStringLiteral(ATTNLENS_GUI_PATH);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("QT_QPA_PLATFORM");  // render must choose offscreen by itself
    auto run = [&](const QStringList& args, QString* err) {
        QProcess p;
        p.setProcessEnvironment(env);
        p.start(exe, args);
        if (!p.waitForFinished(120000)) return -1;
        *err = QString::fromLocal8Bit(p.readAllStandardError());
        return p.exitCode();
    };
    QString err;
    const QString svg = dir_.filePath("cli-matrix.svg"), pdf = dir_.filePath("cli-spectrum.pdf");
    QCOMPARE(run({"render", small_, "--view", "matrix", "--paradigm", "mala", "--log", "-o", svg}, &err), 0);
    QFile f(svg);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QXmlStreamReader xml(&f);
    while (!xml.atEnd()) xml.readNext();
    QVERIFY2(!xml.hasError(), qPrintable(xml.errorString()));
    QCOMPARE(run({"render", small_, "--view", "spectrum", "--paradigms", "softmax,mala", "-o", pdf}, &err), 0);
    QFile pf(pdf);
    QVERIFY(pf.open(QIODevice::ReadOnly));
    QVERIFY(pf.readAll().startsWith("%PDF"));

    // --session through the real command line (QApplication takes "--session" for X11 session
    // management unless main() renames it first): the session's view and layer are drawn.
    {
        MainWindow w;
        QVERIFY(w.openFile(small_));
        w.session()->setLayer(2);
        w.showView("matrix");
        const QString file = dir_.filePath("cli-session.json");
        QVERIFY(w.saveSession(file));
        const QString viaExe = dir_.filePath("cli-session.png"), viaOptions = dir_.filePath("cli-options.png");
        for (const QString& spelling : {QStringLiteral("--session"), QStringLiteral("-session")}) {
            QCOMPARE(run({"render", spelling, file, "--size", "500x400", "-o", viaExe}, &err), 0);
            QCOMPARE(run({"render", small_, "--view", "matrix", "--layer", "2", "--size", "500x400", "-o", viaOptions},
                         &err),
                     0);
            QVERIFY2(QImage(viaExe) == QImage(viaOptions), qPrintable(spelling));
        }
        QCOMPARE(run({"render", QStringLiteral("--session=") + file, "--size", "500x400", "-o", viaExe}, &err), 0);
        QVERIFY(QImage(viaExe) == QImage(viaOptions));
        // The window too: --session with --screenshot shows the session's view.
        auto window = [&](const QStringList& args, QString* error) {
            QProcess p;
            QProcessEnvironment offscreen = env;
            offscreen.insert("QT_QPA_PLATFORM", "offscreen");
            p.setProcessEnvironment(offscreen);
            p.start(exe, args);
            if (!p.waitForFinished(120000)) return -1;
            *error = QString::fromLocal8Bit(p.readAllStandardError());
            return p.exitCode();
        };
        const QString shot = dir_.filePath("cli-window.png"), shotOptions = dir_.filePath("cli-window-options.png");
        QCOMPARE(window({"--session", file, "--window-size", "1024x700", "--screenshot", shot}, &err), 0);
        QCOMPARE(window({small_, "--layer", "2", "--view", "matrix", "--window-size", "1024x700", "--screenshot",
                         shotOptions},
                        &err),
                 0);
        QCOMPARE(QImage(shot).size(), QSize(1024, 700));
        QVERIFY2(QImage(shot) == QImage(shotOptions), "attnlens --session shows another state than the options");
        QCOMPARE(window({"--session", dir_.filePath("missing-session.json"), "--screenshot", shot}, &err), 3);
        QVERIFY2(err.contains("missing-session.json"), qPrintable(err));
        // Without --screenshot the program is started for work: the window stays open with the
        // message (on stderr too) instead of ending.
        QProcess open;
        QProcessEnvironment offscreen = env;
        offscreen.insert("QT_QPA_PLATFORM", "offscreen");
        open.setProcessEnvironment(offscreen);
        open.start(exe, {"--session", dir_.filePath("missing-session.json")});
        QVERIFY(open.waitForStarted());
        QString said;
        QTRY_VERIFY_WITH_TIMEOUT(
            (said += QString::fromLocal8Bit(open.readAllStandardError())).contains("missing-session.json") ||
                open.state() != QProcess::Running,
            60000);
        QVERIFY2(!open.waitForFinished(1500), "a bad --session ended the program instead of showing the message");
        open.kill();
        open.waitForFinished();
    }
    QCOMPARE(run({"render", small_, "--view", "nonsense", "-o", dir_.filePath("x.png")}, &err), 2);
    QVERIFY2(err.contains("unknown view \"nonsense\""), qPrintable(err));
    QCOMPARE(run({"render", small_, "--paradigm", "nope", "-o", dir_.filePath("x.png")}, &err), 2);
    QVERIFY2(err.contains("--paradigm: unknown paradigm 'nope'"), qPrintable(err));
    QCOMPARE(run({"render", broken_, "-o", dir_.filePath("x.png")}, &err), 3);
    QCOMPARE(run({"render", small_, "--layer", "9", "-o", dir_.filePath("x.png")}, &err), 2);
    QVERIFY2(err.contains("--layer"), qPrintable(err));
    QCOMPARE(run({"render", small_, "-o", dir_.filePath("missing-dir/x.png")}, &err), 4);
    QVERIFY(!QFile::exists(dir_.filePath("x.png")));
}

int main(int argc, char** argv) {
    // Session::open checks each dump in a child process started from this executable.
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    return runAppTests<ExportTests>(argc, argv);
}

#include "export_tests.moc"
