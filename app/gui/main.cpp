// attnlens: the desktop program, and `attnlens render` for figures without a window.
#include <QApplication>
#include <QCommandLineParser>
#include <QTextStream>
#include <cstdio>
#include <cstring>

#include "main_window.h"
#include "render_command.h"

int main(int argc, char** argv) {
    const bool render = argc > 1 && std::strcmp(argv[1], "render") == 0;
    // Rendering needs no display; an explicit QT_QPA_PLATFORM (e.g. xcb) still wins.
    if (render && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("AttnLens"));
    QApplication::setApplicationName(QStringLiteral("attnlens"));
    QApplication::setApplicationVersion(QStringLiteral(ATTNLENS_VERSION));

    if (render) {
        QTextStream out(stdout), err(stderr);
        return attnlens::gui::runRender(QApplication::arguments().mid(2), out, err);
    }

    QCommandLineParser parser;
    parser.setApplicationDescription(
        QStringLiteral("AttnLens: attention of vision transformers under softmax and linear paradigms.\n"
                       "Without FILE the bundled example dump is opened.\n\n") +
        attnlens::gui::renderUsage());
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument(QStringLiteral("FILE"), QStringLiteral("attnlens.dump HDF5 file (.h5)"));
    parser.process(app);

    attnlens::gui::MainWindow window;
    window.show();
    const QStringList files = parser.positionalArguments();
    if (!files.isEmpty()) {
        window.openFile(files.front());
    } else {
        window.openExample();
    }
    return app.exec();
}
