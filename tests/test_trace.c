/*
 * test_trace.c — bench/trace.c, the replay tool's trace loader: addresses become dense slots,
 * peak live is computed, comments and blank lines are skipped, and every kind of bad line is
 * refused with its line number (the first error wins); gzip input works.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "trace.h"

static char path[64];

static void write_trace(const char *text, int gz)
{
    FILE *f;
    snprintf(path, sizeof path, "/tmp/vpmm-trace-%d.trace", (int)getpid());
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    if (gz) {
        char cmd[160];
        snprintf(cmd, sizeof cmd, "gzip -f %s", path);
        assert_int_equal(system(cmd), 0);
        strcat(path, ".gz");
    }
}

static void expect_error(const char *text, const char *want)
{
    trace_t t;
    char err[256];
    write_trace(text, 0);
    assert_int_equal(trace_load(path, &t, err, sizeof err), -1);
    if (strstr(err, want) == NULL)
        fail_msg("error \"%s\" lacks \"%s\"", err, want);
    unlink(path);
}

static void test_good_trace(void **state)
{
    trace_t t;
    char err[256];
    (void)state;
    write_trace("# comment\n\n"
                "a 1000 512 0\n"
                "a 2000 1024 7\n"
                "f 1000 512 0\n"
                "c 1000 512 0\n"
                "a 1000 256 0\n" /* an address reused after its free */
                "f 2000 1024 7\n"
                "f 1000 256 0\n",
                1);
    assert_int_equal(trace_load(path, &t, err, sizeof err), 0);
    assert_int_equal(t.nops, 6);
    assert_int_equal(t.allocs, 3);
    assert_int_equal(t.frees, 3);
    assert_int_equal(t.completions, 1);
    assert_int_equal(t.peak_live, 1536);
    assert_int_equal(t.nstreams, 2);
    assert_int_equal(t.stream_ids[1], 7);
    assert_int_equal(t.nslots, 2); /* freed slots are reused */
    assert_int_equal(t.ops[2].kind, TRACE_FREE);
    assert_int_equal(t.ops[2].slot, t.ops[0].slot);
    trace_free(&t);
    unlink(path);
}

static void test_bad_lines(void **state)
{
    (void)state;
    expect_error("a 1000 512 0\nx 1000 512 0\n", ":2: unknown event 'x'");
    expect_error("a 1000 512\n", ":1: expected '<a|f|c> <addr-hex> <size> <stream>'");
    expect_error("a 1000 512 0 9\n", ":1: expected");
    expect_error("a zz 512 0\n", ":1: expected");
    expect_error("\n\na 0 512 0\n", ":3: address 0 is not a block");
    expect_error("a 1000 0 0\n", ":1: allocation of 0 bytes");
    expect_error("a 1000 512 0\na 1000 512 0\n",
                 ":2: allocation at 0x1000, which is still allocated");
    expect_error("f 1000 512 0\n", ":1: free of 0x1000, which is not allocated");
    expect_error("a 1000 512 0\nf 1000 256 0\n",
                 ":2: free of 0x1000 with size 256, allocated with 512");
    expect_error("# nothing\n", "no allocation events");
}

static void test_missing_file(void **state)
{
    trace_t t;
    char err[256];
    (void)state;
    assert_int_equal(trace_load("/nonexistent/x.trace", &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_trace),
        cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_missing_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
