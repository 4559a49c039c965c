// attnlens: the desktop program, and `attnlens render` for figures without a window.
#include <QApplication>
#include <QCommandLineParser>
#include <QEvent>
#include <QTextStream>
#include <QTimer>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attnlens/dump/list_parser.h"
#include "attnlens/dump/open_check.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "document/job_runner.h"
#include "document/session.h"
#include "shell/main_window.h"
#include "shell/render_command.h"
#include "shell/selection_options.h"
#include "shell/view_options.h"
#include "views/token_map_view.h"
#include "views/view_registry.h"

namespace {

// --first-map-time: prints the wall-clock time (Unix seconds) once the token map has painted its
// first map, then quits. tests/bench/gui_start_time.py subtracts the time it started the process,
// so loading the libraries, opening the dump and computing the row are all counted.
class FirstMapTimer : public QObject {
public:
    explicit FirstMapTimer(attnlens::gui::TokenMapView* view) : QObject(view), view_(view) {
        view->plot()->installEventFilter(this);
    }

protected:
    bool eventFilter(QObject*, QEvent* e) override {
        if (e->type() == QEvent::Paint && !done_ && view_->showsMap()) {
            done_ = true;
            // A zero-delay timer fires after this paint event has been handled, i.e. painted.
            QTimer::singleShot(0, this, [] {
                const auto now = std::chrono::system_clock::now().time_since_epoch();
                // Whatever the locale (QApplication calls setlocale: printf's %f would write a
                // decimal comma under de_DE), the reader expects a point.
                const QByteArray seconds = QByteArray::number(std::chrono::duration<double>(now).count(), 'f', 6);
                std::printf("first map painted at %s\n", seconds.constData());
                std::fflush(stdout);
                QApplication::exit(0);
            });
        }
        return false;
    }

private:
    attnlens::gui::TokenMapView* view_;
    bool done_ = false;
};

// QGuiApplication takes "-session ID" and "--session ID" for X11 session management and removes
// them from the arguments before any parser sees them: our --session (a session file) would
// vanish. Renamed before QApplication starts; both parsers accept the internal name
// (attnlens::gui::kSessionOptionAlias).
std::vector<std::string> renameSessionOption(int argc, char** argv) {
    std::vector<std::string> args(argv, argv + argc);
    for (std::size_t i = 1; i < args.size(); ++i) {
        std::string& a = args[i];
        if (a == "--") break;
        if (a == "--session" || a == "-session")
            a = std::string("--") + attnlens::gui::kSessionOptionAlias;
        else if (a.rfind("--session=", 0) == 0 || a.rfind("-session=", 0) == 0)
            a = std::string("--") + attnlens::gui::kSessionOptionAlias + a.substr(a.find('='));
    }
    return args;
}

// The desktop program's options (beside `attnlens render`'s, in render_command.cpp).
struct StartOptions {
    // For documentation: open, show a view, wait for its analyses, save the whole window, quit.
    QCommandLineOption view{QStringLiteral("view"),
                            QStringLiteral("view to show first (%1)").arg(attnlens::gui::viewIdList()),
                            QStringLiteral("V")};
    attnlens::gui::SelectionOptions selection;  // image, layer, head, query, paradigm, branch, rollout: as render
    attnlens::gui::ViewOptions settings;        // the shown paradigms, scope, rollout and views' settings: as render
    QCommandLineOption screenshot{
        QStringLiteral("screenshot"),
        QStringLiteral("save a picture of the window to PNG once its analyses are done, then quit"),
        QStringLiteral("PNG")};
    QCommandLineOption windowSize{QStringLiteral("window-size"), QStringLiteral("window size WxH"),
                                  QStringLiteral("WxH")};
    QCommandLineOption sessionFile{
        QStringList{QStringLiteral("session"), QString::fromLatin1(attnlens::gui::kSessionOptionAlias)},
        QStringLiteral("restore a session saved by File > Save session (its dump, selection and view); "
                       "the other options then change it"),
        QStringLiteral("JSON")};
    QCommandLineOption firstMapTime{
        QStringLiteral("first-map-time"),
        QStringLiteral("print the wall-clock time (Unix seconds) at which the token map's first map was painted, "
                       "then quit (tests/bench/gui_start_time.py)")};

    void addTo(QCommandLineParser& parser) const {
        parser.setApplicationDescription(
            QStringLiteral("AttnLens: attention of vision transformers under softmax and linear paradigms.\n"
                           "Without FILE or --session, the session of the last exit is restored, else the\n"
                           "bundled example dump is opened.\n\n") +
            attnlens::gui::renderUsage());
        parser.addHelpOption();
        parser.addVersionOption();
        parser.addPositionalArgument(QStringLiteral("FILE"), QStringLiteral("attnlens.dump HDF5 file (.h5)"));
        parser.addOptions({view, screenshot, windowSize, sessionFile, firstMapTime});
        parser.addOptions(selection.all());
        parser.addOptions(settings.all());
    }
};

// Opens what the command line names (a session, a file, the last session or the example) and
// sizes the window; returns the size asked for (invalid when none). Error(Usage, Input) when the
// command line cannot be followed.
QSize openAsAsked(attnlens::gui::MainWindow& window, const QCommandLineParser& parser, const StartOptions& o) {
    const QStringList files = parser.positionalArguments();
    if (parser.isSet(o.sessionFile)) {
        // A session that cannot be restored is an error for a reproducible command line.
        if (!window.openSession(parser.value(o.sessionFile))) attnlens::throwInput(window.lastError().toStdString());
        if (!files.isEmpty()) attnlens::throwUsage("give either FILE or --session, not both");
    } else if (!files.isEmpty()) {
        window.openFile(files.front());
    } else if (!window.restoreLastSession()) {
        window.openExample();
    }
    // After the session, whose window layout it changes like any other option.
    if (!parser.isSet(o.windowSize)) return {};
    const QStringList wh = parser.value(o.windowSize).split('x');
    if (wh.size() != 2) attnlens::throwUsage("--window-size: expected WxH, e.g. 1100x800");
    const QSize size(attnlens::parseInt(wh[0].toStdString(), 100, 20000, "--window-size"),
                     attnlens::parseInt(wh[1].toStdString(), 100, 20000, "--window-size"));
    window.resize(size);
    return size;
}

// The selection options (shell/selection_options.h), then the views' settings (view_options.h),
// read as `attnlens render` reads them, each view taking its own. A bad value ends the program
// with the message and exit code of attnlens-cli.
void selectAsAsked(attnlens::gui::MainWindow& window, const QCommandLineParser& parser, const StartOptions& o) {
    using namespace attnlens::gui;
    Session* session = window.session();
    if (session->isOpen()) {
        // The options left unset keep what was opened (the last session's selection, say).
        applySelectionOptions(*session, parser, o.selection, UnsetSelection::Kept, false);
        applySessionViewOptions(*session, parser, o.settings);
        applyMapContentOption(*session, parser, o.selection);
        for (PlotView* v : window.views())
            applyViewOptions(*v, *session, parser, o.settings, UnsetSelection::Kept, ViewFit::AnyView);
    }
    if (parser.isSet(o.view) && !findView(parser.value(o.view)))
        attnlens::throwUsage("--view: unknown view \"" + parser.value(o.view).toStdString() + "\" (" +
                             viewIdList().toStdString() + ")");
}

// --screenshot: once no job is running, the window (at `size` again: it can only grow while the
// views fill in) is saved to `path` and the program quits (0, or 4 when it cannot be written).
void saveWhenIdle(attnlens::gui::MainWindow& window, const QString& path, QSize size) {
    attnlens::gui::Session* session = window.session();
    auto poll = std::make_shared<std::function<void()>>();
    *poll = [&window, session, path, poll, size]() {
        if (session->jobs().busy()) {
            QTimer::singleShot(200, &window, *poll);
            return;
        }
        if (size.isValid()) window.resize(size);
        // The picture once the layouts and plots have followed.
        QTimer::singleShot(300, &window, [&window, path]() {
            const bool ok = window.grab().save(path);
            QTextStream(stderr) << (ok ? "wrote " : "could not write ") << path << "\n";
            QApplication::exit(ok ? 0 : 4);
        });
    };
    QTimer::singleShot(500, &window, *poll);
}

}  // namespace

int main(int argc, char** argv) {
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    const bool render = argc > 1 && std::strcmp(argv[1], "render") == 0;
    // Rendering needs no display; an explicit QT_QPA_PLATFORM (e.g. xcb) still wins. Without a
    // display the program still starts offscreen, so that --help, a bad option and --screenshot
    // behave as with one (QApplication aborted on xcb: --help exited 134).
    const bool noDisplay = qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM") && qEnvironmentVariableIsEmpty("DISPLAY") &&
                           qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY");
    if ((render || noDisplay) && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    std::vector<std::string> args = renameSessionOption(argc, argv);
    std::vector<char*> appArgv;
    for (std::string& a : args) appArgv.push_back(a.data());
    appArgv.push_back(nullptr);
    int appArgc = argc;
    QApplication app(appArgc, appArgv.data());
    QApplication::setOrganizationName(QStringLiteral("AttnLens"));
    QApplication::setApplicationName(QStringLiteral("attnlens"));
    QApplication::setApplicationVersion(QStringLiteral(ATTNLENS_VERSION));

    if (render) {
        QTextStream out(stdout), err(stderr);
        return attnlens::gui::runRender(QApplication::arguments().mid(2), out, err);
    }

    const StartOptions options;
    QCommandLineParser parser;
    options.addTo(parser);
    // Parsed here rather than by QCommandLineParser::process, whose errors exit 1: a bad option is a
    // usage error (exit 2) before any window, as in attnlens-cli and `attnlens render`.
    if (!parser.parse(QCoreApplication::arguments())) {
        QTextStream(stderr) << "attnlens: error: " << parser.errorText() << " (attnlens --help lists the options)\n";
        return attnlens::exitCodeFor(attnlens::ErrorKind::Usage);
    }
    if (parser.isSet(QStringLiteral("help")) || parser.isSet(QStringLiteral("help-all"))) parser.showHelp(0);
    if (parser.isSet(QStringLiteral("version"))) parser.showVersion();
    const bool picture = parser.isSet(options.screenshot) || parser.isSet(options.firstMapTime);

    attnlens::gui::MainWindow window;
    if (parser.isSet(options.firstMapTime)) new FirstMapTimer(window.tokenMapView());
    QSize requestedSize;  // --window-size
    try {
        requestedSize = openAsAsked(window, parser, options);
        selectAsAsked(window, parser, options);
    } catch (const attnlens::Error& e) {
        QTextStream(stderr) << "attnlens: error: " << e.what() << "\n";
        // A bad option, or a command line that makes a picture, ends the program before any window;
        // a file that cannot be opened opens the window with the message (the options after it are
        // left out), as when the user opens one.
        if (picture || noDisplay || e.kind() == attnlens::ErrorKind::Usage) return attnlens::exitCodeFor(e.kind());
        window.show();
        if (window.lastError() != QString::fromUtf8(e.what()))
            window.showError(QStringLiteral("Cannot start as asked"), QString::fromUtf8(e.what()));
        return app.exec();
    }
    // After the options' own messages: a window nobody can see would run until killed.
    if (noDisplay && !picture) {
        QTextStream(stderr) << "attnlens: error: no display to open a window on (DISPLAY and WAYLAND_DISPLAY are "
                               "unset); `attnlens render` draws any view to a file without one\n";
        return attnlens::exitCodeFor(attnlens::ErrorKind::Usage);
    }
    window.show();
    if (parser.isSet(options.view)) window.showView(parser.value(options.view));
    if (parser.isSet(options.screenshot)) saveWhenIdle(window, parser.value(options.screenshot), requestedSize);
    return app.exec();
}
