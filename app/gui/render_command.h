#pragma once
// `attnlens render FILE --view V ... -o OUT.(png|svg|pdf)`: the GUI's figures without a window,
// drawn by the same view classes and the same export code as File > Export figure.
#include <QStringList>

class QTextStream;

namespace attnlens::gui {

// args: everything after "render". Exit codes as attnlens-cli: 0 ok, 2 usage, 3 input, 4 output.
int runRender(const QStringList& args, QTextStream& out, QTextStream& err);
QString renderUsage();

}  // namespace attnlens::gui
