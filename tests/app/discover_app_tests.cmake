# Runs when ctest reads the test list (included from the generated app_<topic>_include.cmake, see
# CMakeLists.txt, with app_test_executable and app_test_list set): one CTest entry app.<function>
# per test function of a QtTest executable, as `EXECUTABLE -functions` lists them. The entries are
# kept in app_test_list and listed again only when the executable or this script is newer.
# A suite that is not built gets an entry that fails (as gtest_discover_tests does); one that cannot
# list its functions (it crashes, hangs or lists none) stops ctest with the reason, so that a broken
# suite never passes as zero tests.
if(NOT EXISTS "${app_test_executable}")
  get_filename_component(app_test_target "${app_test_executable}" NAME_WE)
  add_test("app.${app_test_target}_NOT_BUILT" "${app_test_executable}")
  return()
endif()

if(NOT EXISTS "${app_test_list}" OR "${app_test_executable}" IS_NEWER_THAN "${app_test_list}"
   OR "${CMAKE_CURRENT_LIST_FILE}" IS_NEWER_THAN "${app_test_list}")
  execute_process(COMMAND "${app_test_executable}" -functions RESULT_VARIABLE result OUTPUT_VARIABLE output
                  ERROR_VARIABLE errors TIMEOUT 60)
  # QtTest prints one "name()" line per test function (not initTestCase, cleanup, ...).
  string(REPLACE "\n" ";" lines "${output}")
  set(functions "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^([A-Za-z_][A-Za-z0-9_]*)\\(\\)$")
      list(APPEND functions "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(NOT result EQUAL 0 OR NOT functions)
    message(FATAL_ERROR "${app_test_executable} -functions listed no test functions (exit status: ${result})\n"
                        "${output}${errors}")
  endif()
  set(entries "")
  foreach(fn IN LISTS functions)
    string(APPEND entries "add_test([[app.${fn}]] [[${app_test_executable}]] [[${fn}]])\n"
           "set_tests_properties([[app.${fn}]] PROPERTIES ENVIRONMENT QT_QPA_PLATFORM=offscreen TIMEOUT 300 "
           "LABELS gui)\n")
  endforeach()
  file(WRITE "${app_test_list}" "${entries}")
endif()
include("${app_test_list}")
