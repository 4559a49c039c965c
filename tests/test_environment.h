#pragma once
// The environment every test program runs in (issue 52): tests assert contracts, so what they run
// must not depend on variables the user or the machine happens to export.

namespace attnlens::test {

// Clears the variables that change what the programs under test do or print (the open check's
// limits, OpenBLAS's diagnostics, Qt's scaling and theme, the Python path of the check scripts)
// and fixes locale and time zone. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE stay as the machine has
// them: some machines export them, the suite must pass either way, and the CI's second run of the
// CLI, core and analysis programs exports them (scripts/test-under-blas-variables.sh). Subprocesses
// inherit the result. Called before main() in the GoogleTest programs and first thing in the GUI
// suites' main().
void controlTestEnvironment();

}  // namespace attnlens::test
