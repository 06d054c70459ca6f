/*
 * test_bench_util.c — the bench tools' shared helpers (bench/escape.c, cli.c, timing.c) and the
 * SVG timeline (bench/svg.c): JSON and XML escaping of quotes, markup, control characters and
 * invalid UTF-8; numbers refused with the option named (a sign, junk, out of range); an output
 * file created at once under a temporary name, renamed over the path after a successful run and
 * removed after a failed one (an earlier result at the path stays); quantiles; and a timeline
 * whose title is escaped, whose x axis has labelled ticks, whose byte labels are in the library's
 * units, and whose VA holes have a panel of their own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "escape.h"
#include "svg.h"
#include "test_util.h"
#include "timing.h"

/* What f wrote, via open_memstream: call with the stream, get the text (free it). */
typedef struct mem {
    char *buf;
    size_t len;
    FILE *f;
} mem_t;

static FILE *mem_open(mem_t *m)
{
    m->buf = NULL;
    m->len = 0;
    m->f = open_memstream(&m->buf, &m->len);
    assert_non_null(m->f);
    return m->f;
}

static char *mem_close(mem_t *m)
{
    assert_int_equal(fclose(m->f), 0);
    return m->buf;
}

static void expect_json(const char *in, const char *want)
{
    mem_t m;
    char *out;
    esc_json_string(mem_open(&m), in);
    out = mem_close(&m);
    if (strcmp(out, want) != 0)
        fail_msg("esc_json_string: got %s, want %s", out, want);
    free(out);
}

static void expect_xml(const char *in, const char *want)
{
    mem_t m;
    char *out;
    esc_xml_text(mem_open(&m), in);
    out = mem_close(&m);
    if (strcmp(out, want) != 0)
        fail_msg("esc_xml_text: got %s, want %s", out, want);
    free(out);
}

static void test_json_escape(void **state)
{
    (void)state;
    expect_json("gpt2.trace.gz", "\"gpt2.trace.gz\"");
    expect_json("we\"ird", "\"we\\\"ird\"");
    expect_json("back\\slash", "\"back\\\\slash\"");
    expect_json("a\nb\tc\rd\be\ff", "\"a\\nb\\tc\\rd\\be\\ff\"");
    expect_json("\x01\x1f", "\"\\u0001\\u001f\"");
    expect_json("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
    /* Not UTF-8: a Latin-1 byte, a lone continuation byte, an overlong '/', a surrogate, a
     * sequence cut short by the end, a code point past U+10FFFF. */
    expect_json("caf\xe9", "\"caf\\ufffd\"");
    expect_json("\x80x", "\"\\ufffdx\"");
    expect_json("\xc0\xaf", "\"\\ufffd\\ufffd\"");
    expect_json("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"");
    expect_json("\xe2\x82", "\"\\ufffd\\ufffd\"");
    expect_json("\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
    expect_json("", "\"\"");
    expect_json(NULL, "null");
}

static void test_xml_escape(void **state)
{
    (void)state;
    expect_xml("a<b&c.trace", "a&lt;b&amp;c.trace");
    expect_xml("x>y \"q\" 'a'", "x&gt;y &quot;q&quot; &#39;a&#39;");
    expect_xml("tab\tnl\n", "tab\tnl\n");
    expect_xml("bell\x07", "bell&#xfffd;"); /* XML 1.0 has no control characters */
    expect_xml("caf\xe9", "caf&#xfffd;");
    expect_xml("caf\xc3\xa9", "caf\xc3\xa9");
    expect_xml(NULL, "");
}

static void test_numbers(void **state)
{
    uint64_t v = 7;
    double d = 7;
    (void)state;
    assert_int_equal(cli_u64("t", "--n", "42", 1, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(cli_u64("t", "--n", "0x10", 0, 100, &v), 0);
    assert_int_equal(v, 16);
    assert_int_equal(cli_u64("t", "--n", "18446744073709551615", 0, UINT64_MAX, &v), 0);
    assert_true(v == UINT64_MAX);
    v = 7;
    /* strtoull would take "-1" as 2^64 - 1, " 5" and "+5" as 5. */
    assert_int_equal(cli_u64("t", "--n", "-1", 0, UINT64_MAX, &v), -1);
    assert_int_equal(cli_u64("t", "--n", " 5", 0, 100, &v), -1);
    assert_int_equal(cli_u64("t", "--n", "+5", 0, 100, &v), -1);
    assert_int_equal(cli_u64("t", "--n", "5x", 0, 100, &v), -1);
    assert_int_equal(cli_u64("t", "--n", "", 0, 100, &v), -1);
    assert_int_equal(cli_u64("t", "--n", "0x", 0, 100, &v), -1);
    assert_int_equal(cli_u64("t", "--n", "101", 0, 100, &v), -1);
    assert_int_equal(cli_u64("t", "--n", "0", 1, 100, &v), -1);
    assert_int_equal(cli_u64("t", "--n", "99999999999999999999", 0, UINT64_MAX, &v), -1);
    assert_int_equal(v, 7); /* untouched by a refusal */
    assert_int_equal(cli_double("t", "--s", "2.5", 0, 10, &d), 0);
    assert_true(d == 2.5);
    assert_int_equal(cli_double("t", "--s", "-1", 0, 10, &d), -1);
    assert_int_equal(cli_double("t", "--s", "nan", 0, 10, &d), -1);
    assert_int_equal(cli_double("t", "--s", "inf", 0, 1e300, &d), -1);
    assert_int_equal(cli_double("t", "--s", "3s", 0, 10, &d), -1);
    assert_true(d == 2.5);
    assert_non_null(cli_version());
    assert_true(strlen(cli_version()) >= 5); /* "0.1.0" */
}

static mode_t current_umask(void)
{
    mode_t m = umask(0);
    umask(m);
    return m;
}

static void test_output_file(void **state)
{
    cli_output_t o;
    char path[64];
    (void)state;
    snprintf(path, sizeof path, "/tmp/vpmm-bench-util-%d.svg", (int)getpid());
    /* A path that cannot be created fails now, not after the work. */
    assert_int_equal(cli_output_open(&o, "t", "--svg", "/nonexistent-dir/x.svg", NULL), -1);
    assert_int_equal(cli_output_open(&o, "t", "--svg", "/tmp", NULL), -1); /* a directory */
    /* Written under a temporary name beside it, which becomes the path after a successful run. */
    (void)unlink(path);
    assert_int_equal(cli_output_open(&o, "t", "--svg", path, "/nonexistent-input"), 0);
    assert_non_null(o.tmp);
    assert_int_equal(access(o.tmp, F_OK), 0); /* created from the start */
    assert_int_equal(access(path, F_OK), -1);
    fputs("<svg/>\n", o.f);
    {
        char tmp[128];
        struct stat st;
        snprintf(tmp, sizeof tmp, "%s", o.tmp);
        assert_int_equal(cli_output_close(&o, 1), 0);
        assert_int_equal(access(tmp, F_OK), -1);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_size, 7);
        assert_int_equal(st.st_mode & 0077, 0666 & 0077 & ~current_umask()); /* as fopen's */
    }
    assert_int_equal(cli_output_close(&o, 1), 0); /* closed: nothing to do */
    /* The input itself (however named) is refused, and left as it was. */
    assert_int_equal(cli_output_open(&o, "t", "--svg", path, path), -1);
    {
        char dotted[80];
        snprintf(dotted, sizeof dotted, "/tmp/./%s", path + 5);
        assert_int_equal(cli_output_open(&o, "t", "--svg", dotted, path), -1);
        assert_int_equal(access(path, F_OK), 0);
    }
    /* A failed run leaves the path as it was (an earlier result stays), and no temporary. */
    assert_int_equal(cli_output_open(&o, "t", "--svg", path, NULL), 0);
    fputs("<svg", o.f);
    assert_int_equal(cli_output_close(&o, 0), 0);
    {
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_size, 7);
    }
    assert_int_equal(unlink(path), 0);
    assert_int_equal(cli_output_open(&o, "t", "--svg", path, NULL), 0);
    assert_int_equal(cli_output_close(&o, 0), 0);
    assert_int_equal(access(path, F_OK), -1); /* nothing was there: nothing is */
    /* Never a file that is not a regular one (/dev/null stays). */
    assert_int_equal(cli_output_open(&o, "t", "--svg", "/dev/null", NULL), 0);
    assert_int_equal(cli_output_close(&o, 0), 0);
    assert_int_equal(access("/dev/null", F_OK), 0);
}

static void test_quantiles(void **state)
{
    uint32_t a[5] = { 50, 10, 40, 20, 30 };
    uint64_t b[4] = { 4, 3, 2, 1 };
    (void)state;
    assert_int_equal(timing_quantile_u32(a, 5, 0.5), 30);
    assert_int_equal(timing_quantile_u32(a, 5, 0.0), 10);
    assert_int_equal(timing_quantile_u32(a, 5, 1.0), 50);
    assert_int_equal(timing_quantile_u32(a, 0, 0.5), 0);
    assert_int_equal(timing_quantile_u64(b, 4, 0.5), 2); /* element (size_t)(0.5 * 3) */
    assert_int_equal(timing_to_ns(0), 0);
}

static size_t occurrences(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = strstr(s, what); p != NULL; p = strstr(p + 1, what))
        n++;
    return n;
}

/* A timeline of n points over nops operations, written to a string. */
static char *timeline(const char *title, size_t nops, int detail)
{
    svg_point_t pts[100];
    mem_t m;
    for (size_t i = 0; i < 100; i++) {
        memset(&pts[i], 0, sizeof pts[i]);
        pts[i].op = (i + 1) * nops / 100;
        pts[i].s.live = (i % 10) * 100000000ull;
        pts[i].s.device = 1000000000ull;
        pts[i].s.free = pts[i].s.device - pts[i].s.live;
        pts[i].s.holes = i * 30000000ull; /* 3 GB at the end: larger than the device */
    }
    assert_int_equal(svg_write(mem_open(&m), title, pts, 100, nops, detail), 0);
    return mem_close(&m);
}

static void test_svg(void **state)
{
    char *svg;
    (void)state;
    svg = timeline("a<b&c.trace on vpmm/host: footprint 1.000", 250000, 1);
    print_message("%.400s...\n", svg);
    assert_non_null(strstr(svg, ">a&lt;b&amp;c.trace on vpmm/host"));
    assert_null(strstr(svg, "a<b"));
    /* x-axis ticks, labelled in operations, and the axis title. */
    assert_non_null(strstr(svg, ">0</text>"));
    assert_non_null(strstr(svg, ">20k</text>")); /* a tick every 20k: about 8 of them */
    assert_non_null(strstr(svg, ">240k</text>"));
    assert_null(strstr(svg, ">260k</text>")); /* none past the end */
    assert_non_null(strstr(svg, ">operation (of 250000)</text>"));
    /* The holes have their own panel and axis: the physical one is scaled to the device's 1 GB
     * (954 MiB: gridlines every 200 MiB), not to the holes' 2.77 GiB, which only the virtual one
     * reaches (gridlines every 0.5 GiB, to 3 GiB). Units are the library's: powers of 1024. */
    assert_non_null(strstr(svg, "physical memory"));
    assert_non_null(strstr(svg, "virtual address space"));
    assert_non_null(strstr(svg, ">200 MiB</text>"));
    assert_non_null(strstr(svg, ">3 GiB</text>"));
    assert_int_equal(occurrences(svg, ">3 GiB</text>"), 1);
    assert_non_null(strstr(svg, "VA holes between regions, peak 2.77 GiB"));
    assert_null(strstr(svg, " MB<"));
    assert_null(strstr(svg, " GB<"));
    free(svg);

    /* Without detail (a baseline backend): no holes, no second panel. */
    svg = timeline("x", 1234567, 0);
    assert_null(strstr(svg, "virtual address space"));
    assert_null(strstr(svg, "VA holes"));
    assert_non_null(strstr(svg, ">1.2M</text>"));
    free(svg);

    /* A short trace: integer ticks only. */
    svg = timeline("x", 3, 1);
    assert_non_null(strstr(svg, ">3</text>"));
    assert_null(strstr(svg, ">0.5</text>"));
    free(svg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_escape), cmocka_unit_test(test_xml_escape),
        cmocka_unit_test(test_numbers),     cmocka_unit_test(test_output_file),
        cmocka_unit_test(test_quantiles),   cmocka_unit_test(test_svg),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
