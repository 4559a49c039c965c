#pragma once
// `attnlens render FILE --view V ... -o OUT.(png|svg|pdf)`: the GUI's figures without a window,
// drawn by the same view classes and the same export code as File > Export figure.
#include <QStringList>

class QTextStream;

namespace attnlens::gui {

// The name main() gives --session before QApplication sees the arguments (Qt takes "--session"
// for X11 session management); runRender and the window's parser accept both.
inline constexpr const char* kSessionOptionAlias = "attnlens-session-file";

// args: everything after "render". Exit codes as attnlens-cli: 0 ok, 2 usage, 3 input, 4 output.
int runRender(const QStringList& args, QTextStream& out, QTextStream& err);
QString renderUsage();

}  // namespace attnlens::gui
