/*
 * test_version.c — tests of src/api/version.c: vpmm_version() is "MAJOR.MINOR.PATCH" and equals the
 * header's VPMM_VERSION_* macros, VPMM_VERSION combines them, and both equal the version CMake
 * built the library as (project(VERSION), read from the header: VPMM_CMAKE_VERSION, passed by
 * tests/CMakeLists.txt). No pool, no driver.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "vpmm.h"

static void test_version_string_matches_macros(void **state)
{
    char want[64];
    (void)state;
    snprintf(want, sizeof want, "%d.%d.%d", VPMM_VERSION_MAJOR, VPMM_VERSION_MINOR,
             VPMM_VERSION_PATCH);
    assert_non_null(vpmm_version());
    assert_string_equal(vpmm_version(), want);
    /* A static string: the same pointer every time. */
    assert_ptr_equal(vpmm_version(), vpmm_version());
}

static void test_version_number(void **state)
{
    (void)state;
    assert_int_equal(VPMM_VERSION,
                     VPMM_VERSION_MAJOR * 10000 + VPMM_VERSION_MINOR * 100 + VPMM_VERSION_PATCH);
    /* Each part fits its two decimal digits of VPMM_VERSION. */
    assert_true(VPMM_VERSION_MINOR >= 0 && VPMM_VERSION_MINOR < 100);
    assert_true(VPMM_VERSION_PATCH >= 0 && VPMM_VERSION_PATCH < 100);
#if VPMM_VERSION < 100
#error "VPMM_VERSION must be usable in #if, and vpmm is at least 0.1.0"
#endif
}

static void test_version_matches_cmake(void **state)
{
    (void)state;
    assert_string_equal(vpmm_version(), VPMM_CMAKE_VERSION);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_string_matches_macros),
        cmocka_unit_test(test_version_number),
        cmocka_unit_test(test_version_matches_cmake),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
