#include "test_environment.h"

#include <cstdlib>
#include <initializer_list>

namespace attnlens::test {

void controlTestEnvironment() {
    for (const char* name :
         {// The open check's limits (the product's messages tell users to set them): tests that
          // need another limit set it on the command they run.
          "ATTNLENS_OPEN_TIMEOUT", "ATTNLENS_OPEN_CHECK_MEMORY",
          // OpenBLAS writes its core to stderr under it; tests assert what stderr holds.
          "OPENBLAS_VERBOSE",
          // Qt's scaling, fonts and theme change every size a GUI test measures.
          "QT_SCALE_FACTOR", "QT_SCREEN_SCALE_FACTORS", "QT_FONT_DPI", "QT_STYLE_OVERRIDE", "QT_QPA_PLATFORMTHEME",
          "QT_ENABLE_HIGHDPI_SCALING", "QT_AUTO_SCREEN_SCALE_FACTOR", "QT_SCALE_FACTOR_ROUNDING_POLICY",
          // The check scripts run /usr/bin/python3 with Debian's numpy and h5py, not a user's.
          "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"})
        ::unsetenv(name);
    // Numbers printed by programs that call setlocale (Qt does) and read back by the tests.
    ::setenv("LC_ALL", "C.UTF-8", 1);
    ::setenv("TZ", "UTC", 1);
    ::setenv("PYTHONNOUSERSITE", "1", 1);
}

namespace {
// Before main(): before GoogleTest, Qt or OpenBLAS read anything.
[[maybe_unused]] const bool gControlled = (controlTestEnvironment(), true);
}  // namespace

}  // namespace attnlens::test
