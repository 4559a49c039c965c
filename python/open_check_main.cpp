// attnlens-open-check: the child of the Python module's open check (attnlens/dump/open_check.h).
//
// The module cannot fork a Python interpreter safely (NumPy's OpenBLAS has started threads by then), and
// the interpreter cannot be started as the child, so the package ships this small program beside
// _attnlens: DumpReader::open and the chunk-index walks in a separate process, whose crash or stall on a
// damaged file becomes an ordinary InputError instead of the end of the user's kernel.
#include <cstdio>

#include "attnlens/dump/open_check.h"

int main(int argc, char** argv) {
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    std::fprintf(stderr,
                 "attnlens-open-check: the Python module's open-check child (started with %s); there is "
                 "nothing to run by hand\n",
                 attnlens::kOpenCheckArgument);
    return 2;
}
