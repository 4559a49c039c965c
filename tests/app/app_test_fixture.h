// Shared fixture of the QtTest suites that drive the real AttnLens window on the offscreen platform
// (one executable per topic, see CMakeLists.txt): the test dumps every suite opens, the window under
// test, the comparisons with the core's numbers, and the common main().
#pragma once

#include <QObject>
#include <QPoint>
#include <QString>
#include <QTemporaryDir>
#include <QtTest>
#include <functional>
#include <memory>
#include <string>

#include "attnlens/attention/attention.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/open_check.h"
#include "document/session.h"
#include "shell/main_window.h"
#include "views/plot_view.h"

namespace attnlens::gui::test {

// The core's row, computed without any GUI code: a second reader, a fresh AttentionHead.
RowVector coreRow(const QString& path, int image, int layer, int head, const std::string& paradigm, Index query,
                  RowStatus* status = nullptr);

// The position of the layer called `name` in the dump; -1 when there is none.
int layerNamed(const DumpInfo& info, const std::string& name);

// Equal up to rounding (1e-12 relative); NaN equals only NaN.
bool sameValue(double a, double b);

// Every spatial cell of a colour map equals the row's weight for that token.
bool mapShowsRow(QCPColorMap* map, const TokenLayout& l, const RowVector& row, QString* why);

// The widget pixel of plot coordinates (x, y) in an axis rect.
QPoint pixelOf(QCPAxisRect* rect, double x, double y);

// Every text a view's plot draws (titles, notes, messages), one per line.
QString plotTexts(PlotView* v);

// The root attributes every test dump starts with (format.md 1): format, format_version 1, the
// grid and the prefix tokens.
void writeDumpRoot(DumpWriter& writer, int gridH, int gridW, int prefix = 1);

// Damaged dumps written by /usr/bin/python3 with h5py (the C++ writer cannot damage its own output
// chunk by chunk). Each returns the path, or an empty string and why; pythonUnavailable(why) tells
// a missing python3/h5py (a skip) from a script that failed (a test failure).
bool pythonUnavailable(const QString& why);
// Issue 12's dump: gzip-compressed float32, 2 images, 4 layers "0".."3", 2 heads, grid 6 x 6 + CLS,
// d = 32; /layers/2/k's chunk of image 0 overwritten with 4 KiB of garbage ("inflate() failed").
QString writeDamagedDump(const QString& path, QString* why);
// A damaged copy of the bundled example (resources/examples): the chunk index entry of
// /layers/mala.block1/k for image 0 points past the end of the file (that (image, layer) cannot be
// read; everything else can), and image 3's /layers/inline.block2/q holds NaN in head 0's CLS query.
QString writeDamagedExampleCopy(const QString& path, QString* why);

// Base of every GUI test class: initTestCase writes the test dumps into a temporary directory
// (ATTNLENS_KEEP_TEST_DUMPS=1 keeps it), cleanup stops the window's jobs and closes it.
class AppTestFixture : public QObject {
    Q_OBJECT
protected:
    QTemporaryDir dir_;
    QString small_, nanDump_, broken_, truncated_, dwc_, mixed_;
    std::unique_ptr<MainWindow> window_;

    MainWindow& openWindow(const QString& path);
    // Lays the shown plot out now so that pixel <-> coordinate conversions are current.
    static void layoutNow(PlotView* v);
    void waitIdle(Session* s) { QTRY_VERIFY_WITH_TIMEOUT(!s->jobs().busy(), 60000); }
    // Shows every view of the window on the current selection, waits for its jobs, and checks that
    // none says FAILED or NOT SHOWN and that no issue was reported.
    static void expectEveryViewShows(MainWindow& w);

private Q_SLOTS:
    void initTestCase();
    void cleanup();
};

// Each suite's main() after attnlens::runOpenCheckChildIfRequested (Session::open checks each dump
// in a child process started from the test executable): offscreen unless told otherwise, settings in
// a private directory, then QTest::qExec of the test class.
int runAppTests(int argc, char** argv, const std::function<std::unique_ptr<QObject>()>& makeTests);

template <class Tests>
int runAppTests(int argc, char** argv) {
    return runAppTests(argc, argv, [] { return std::make_unique<Tests>(); });
}

}  // namespace attnlens::gui::test
