/*
 * test_trace.c — bench/trace.c, the replay tool's trace loader: addresses become dense slots,
 * peak live is computed, comments and blank lines are skipped, and every kind of bad line is
 * refused with its line number (the first error wins), negative sizes and streams included; gzip
 * input works, and gzip data cut short (anywhere: inside a line, at a line's end, in the trailer)
 * or corrupt is reported as such, not as a bad line nor as a shorter trace.
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
    /* scanf's %llu would take these as 2^64 - 512 and 2^64 - 1. */
    expect_error("a 1000 512 0\na 2000 -512 0\n", ":2: negative size -512");
    expect_error("a 1000 512 -1\n", ":1: negative stream -1");
    expect_error("a 1000 +512 0\n", ":1: expected");
    expect_error("a 1000 99999999999999999999 0\n", ":1: size 99999999999999999999 does not fit");
    expect_error("a -1000 512 0\n", ":1: expected");
}

/* A trace of n allocations and frees, compressed; its size in *gz_size. */
static void write_long_trace(size_t n, long *gz_size)
{
    char *text = malloc(n * 64 + 1), *p = text;
    FILE *f;
    assert_non_null(text);
    for (size_t i = 0; i < n; i++) {
        p += sprintf(p, "a %zx %zu 0\n", 0x100000 + i * 0x1000, 256 + i * 7 % 4096);
        if (i % 2 == 1)
            p += sprintf(p, "f %zx %zu 0\n", 0x100000 + (i - 1) * 0x1000, 256 + (i - 1) * 7 % 4096);
    }
    write_trace(text, 1);
    free(text);
    f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *gz_size = ftell(f);
    fclose(f);
}

static void test_truncated_gzip(void **state)
{
    trace_t t;
    char err[256];
    long size, cuts[8];
    (void)state;
    write_long_trace(20000, &size);
    assert_int_equal(trace_load(path, &t, err, sizeof err), 0); /* whole: fine */
    trace_free(&t);
    /* In the header, in the middle (likely inside a line), in the 8-byte trailer (CRC, length). */
    cuts[0] = 5;
    cuts[1] = size / 3;
    cuts[2] = size / 2;
    cuts[3] = size - 9;
    cuts[4] = size - 8;
    cuts[5] = size - 4;
    cuts[6] = size - 1;
    for (int i = 0; i < 7; i++) {
        assert_int_equal(truncate(path, cuts[i]), 0);
        assert_int_equal(trace_load(path, &t, err, sizeof err), -1);
        print_message("cut at %ld of %ld: %s\n", cuts[i], size, err);
        if (strstr(err, "truncated") == NULL)
            fail_msg("cut at %ld of %ld bytes: \"%s\" does not say truncated", cuts[i], size, err);
        write_long_trace(20000, &size); /* whole again for the next cut */
    }
    unlink(path);
}

static void test_corrupt_gzip(void **state)
{
    trace_t t;
    char err[256];
    long size;
    int byte;
    FILE *f;
    (void)state;
    write_long_trace(20000, &size);
    f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, size / 2, SEEK_SET);
    byte = fgetc(f);
    fseek(f, size / 2, SEEK_SET);
    fputc(byte ^ 0xff, f);
    fclose(f);
    assert_int_equal(trace_load(path, &t, err, sizeof err), -1);
    print_message("%s\n", err);
    if (strstr(err, "truncated") == NULL && strstr(err, "corrupt") == NULL)
        fail_msg("a corrupt gzip file: \"%s\" says neither corrupt nor truncated", err);
    unlink(path);
    /* Plain text behind a .gz name is not gzip data either. */
    write_trace("a 1000 512 0\n", 0);
    {
        char gz[80];
        snprintf(gz, sizeof gz, "%s.gz", path);
        assert_int_equal(rename(path, gz), 0);
        assert_int_equal(trace_load(gz, &t, err, sizeof err), -1);
        assert_non_null(strstr(err, "gzip"));
        unlink(gz);
    }
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
        cmocka_unit_test(test_good_trace),   cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_missing_file), cmocka_unit_test(test_truncated_gzip),
        cmocka_unit_test(test_corrupt_gzip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
