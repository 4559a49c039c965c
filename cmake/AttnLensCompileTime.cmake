# Compile time on the 2-core CI machine (issue 30 goal 8). Five measures, switchable off:
#
# Precompiled headers (ATTNLENS_PRECOMPILE_HEADERS, default ON). Parsing Qt + QCustomPlot headers
# is about 15 of the 25 s a desktop-program file takes at -O2 -g; gtest + Eigen + nlohmann-json
# about 4 s of a light test file. One header set per kind of target, built once and reused by
# every target of that kind (REUSE_FROM needs equal code-generation flags: -fPIC libraries and
# -fPIE executables each get their own). Configure with -DATTNLENS_PRECOMPILE_HEADERS=OFF to check
# that every file still includes what it uses.
#
# Line tables only for test code (-g1 instead of -g under RelWithDebInfo): full debug information
# for template-heavy test files costs 25-30 % of their compile time. Failures, gdb backtraces and
# sanitizer reports still name file and line; the libraries and programs under test keep -g.
#
# LLVM's linker for executables where Debian's lld is installed (ATTNLENS_USE_LLD, default ON): a
# QtTest program links in 0.85 s instead of 4.4 s with GNU ld, and a build links about 40 programs.
# Executables only: pybind11 builds the Python module with GCC's -flto in Release, whose objects lld
# cannot read (the module came out without PyInit__attnlens).
#
# Unity batches for the GoogleTest programs (ATTNLENS_UNITY_TESTS, default ON): their files
# instantiate the same Eigen products and gtest templates, which one batch compiles once; six
# analysis test files took 36 s as one batch against 55 s apart. In a batch every file but the first
# is no longer the "main file", so GCC's -Wsubobject-linkage (gtest's TEST_F on a fixture in an
# anonymous namespace) and one -Wmaybe-uninitialized false positive of the inliner are off there.
# Test files must keep their helpers in anonymous namespaces with names of their own.
#
# Unity batches for the libraries and attnlens-cli too (ATTNLENS_UNITY_LIBRARIES, default ON):
# attnlens_core, attnlens_analysis, the desktop program's attnlens_gui_lib and the command-line
# program, eight files a batch. The desktop library compiled in 116 s of CPU against 275 s file by
# file (dev preset, 2 cores), the engine libraries in about two thirds of their time (each file
# instantiated the same Qt, Eigen and json templates); the dev build of the test command went from
# 628 to 470 s with the libraries alone.
# The same rule as for tests: helpers in anonymous namespaces need names of their own across a
# library (shared ones go to a header), and -Wsubobject-linkage is off in batches. Files whose
# file-scope pragmas must not reach their neighbours stay out (SKIP_UNITY_BUILD_INCLUSION).
# Configure with -DATTNLENS_UNITY_LIBRARIES=OFF for file-by-file rebuilds while editing one file.
option(ATTNLENS_PRECOMPILE_HEADERS "Precompile the common Qt, QCustomPlot, Eigen, json and gtest headers" ON)

set(ATTNLENS_PCH_STD <algorithm> <cmath> <cstdint> <functional> <map> <memory> <optional> <span>
    <string> <vector>)
set(ATTNLENS_PCH_QT <Eigen/Core> <nlohmann/json.hpp> <QString> <QStringList> <QFileInfo> <QLabel>
    <QHBoxLayout> <QVBoxLayout> <QComboBox> <QCheckBox> <QPushButton> <qcustomplot.h>)

# attnlens_precompile(<target> <kind>): kind is gui (the desktop program's library), gui_tests
# (QtTest executables) or gtest (GoogleTest executables). The first target of a kind builds the
# header; later ones reuse it.
function(attnlens_precompile target kind)
  if(NOT ATTNLENS_PRECOMPILE_HEADERS)
    return()
  endif()
  get_property(owner GLOBAL PROPERTY ATTNLENS_PCH_OWNER_${kind})
  if(owner)
    target_precompile_headers(${target} REUSE_FROM ${owner})
    return()
  endif()
  if(kind STREQUAL "gui")
    target_precompile_headers(${target} PRIVATE ${ATTNLENS_PCH_STD} ${ATTNLENS_PCH_QT})
  elseif(kind STREQUAL "gui_tests")
    target_precompile_headers(${target} PRIVATE ${ATTNLENS_PCH_STD} ${ATTNLENS_PCH_QT} <QTest> <QSignalSpy>)
  elseif(kind STREQUAL "gtest")
    target_precompile_headers(${target} PRIVATE ${ATTNLENS_PCH_STD} <random> <Eigen/Core> <nlohmann/json.hpp>
                              <gtest/gtest.h> <gmock/gmock.h>)
  else()
    message(FATAL_ERROR "attnlens_precompile: unknown kind '${kind}'")
  endif()
  set_property(GLOBAL PROPERTY ATTNLENS_PCH_OWNER_${kind} ${target})
endfunction()

option(ATTNLENS_USE_LLD "Link executables with lld (-fuse-ld=lld) when the compiler can" ON)
if(ATTNLENS_USE_LLD)
  include(CheckLinkerFlag)
  check_linker_flag(CXX -fuse-ld=lld ATTNLENS_LINKER_LLD_WORKS)
  if(ATTNLENS_LINKER_LLD_WORKS)
    string(APPEND CMAKE_EXE_LINKER_FLAGS " -fuse-ld=lld")
  endif()
endif()

option(ATTNLENS_UNITY_TESTS "Compile the GoogleTest programs' files in unity batches" ON)
function(attnlens_unity_tests target)
  if(ATTNLENS_UNITY_TESTS)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 6)
    target_compile_options(${target} PRIVATE -Wno-subobject-linkage -Wno-maybe-uninitialized)
  endif()
endfunction()

option(ATTNLENS_UNITY_LIBRARIES "Compile the libraries' and attnlens-cli's files in unity batches" ON)
function(attnlens_unity_sources target)
  if(ATTNLENS_UNITY_LIBRARIES)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
    target_compile_options(${target} PRIVATE -Wno-subobject-linkage)
  endif()
endfunction()

# attnlens_test_code(<target>): line tables only, see above.
function(attnlens_test_code target)
  target_compile_options(${target} PRIVATE $<$<CONFIG:RelWithDebInfo>:-g1>)
endfunction()
