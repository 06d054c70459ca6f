/*
 * test_footprint.c — the footprint goal, checked on every commit: replaying the recorded PyTorch
 * traces (bench/traces) on the host backend keeps peak mapped memory within 1.03 x peak live bytes
 * (the first footprint goal), every allocation counted, with the pool's default settings (size
 * classes on). The synthetic scenarios are replayed too, as regression guards at their measured
 * values (bench/RESULTS.md explains them). Uses the benchmark's trace loader; the replay is the
 * same loop as vpmm-replay's, untimed.
 */
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"
#include "trace.h"

static double replay_footprint(const char *name)
{
    char path[1024], err[512];
    trace_t t;
    vpmm_config_t cfg;
    vpmm_pool_t *pool;
    vpmm_stats_t s;
    void **ptr;
    static char tokens[64];

    /* The default 8 TiB reservation is what is checked, more address space than valgrind can
     * give (tests/sanitize/valgrind.sh sets this). */
    if (getenv("VPMM_TEST_UNDER_VALGRIND") != NULL)
        skip();
    snprintf(path, sizeof path, "%s/%s.trace.gz", VPMM_TRACE_DIR, name);
    if (trace_load(path, &t, err, sizeof err) != 0)
        fail_msg("%s", err);
    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.ignore_env = 1; /* the defaults are what is being checked */
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_SUCCESS);
    ptr = calloc(t.nslots, sizeof *ptr);
    assert_non_null(ptr);
    for (size_t i = 0; i < t.nops; i++) {
        const trace_op_t *op = &t.ops[i];
        vpmm_stream_t st = t.stream_ids[op->stream] == 0
                               ? NULL
                               : (vpmm_stream_t)&tokens[op->stream % sizeof tokens];
        if (op->kind == TRACE_ALLOC)
            assert_int_equal(vpmm_malloc(pool, op->size, st, &ptr[op->slot]), VPMM_SUCCESS);
        else
            assert_int_equal(vpmm_free(pool, ptr[op->slot]), VPMM_SUCCESS);
    }
    assert_int_equal(vpmm_pool_check(pool, stderr), 0);
    assert_int_equal(vpmm_get_stats(pool, &s), VPMM_SUCCESS);
    assert_int_equal(s.peak_live_bytes, t.peak_live);
    for (size_t i = 0; i < t.nslots; i++)
        vpmm_free(pool, ptr[i]); /* blocks the trace never freed (NULL otherwise: a no-op) */
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
    print_message("%-24s peak live %8.3f GB, peak mapped %8.3f GB, footprint %.4f\n", name,
                  (double)t.peak_live / 1e9, (double)s.peak_mapped_bytes / 1e9,
                  (double)s.peak_mapped_bytes / (double)t.peak_live);
    free(ptr);
    trace_free(&t);
    return (double)s.peak_mapped_bytes / (double)s.peak_live_bytes;
}

static void test_gpt2_train(void **state)
{
    (void)state;
    assert_true(replay_footprint("gpt2_train") <= 1.03);
}

static void test_bert_infer(void **state)
{
    (void)state;
    assert_true(replay_footprint("bert_infer") <= 1.03);
}

/* Traces recorded by bench/record_traces.py: a Llama-style decoder and a T5 trained
 * with AdamW over changing shapes. */
static void test_llama_t5_train(void **state)
{
    (void)state;
    assert_true(replay_footprint("llama_train") <= 1.03);
    assert_true(replay_footprint("t5_train") <= 1.03);
}

/* Greedy generation with a KV cache (bench/record_traces.py): 1.0168 measured (1.0219 before the
 * cache's miss rule, 1.0372 before size classes; PyTorch's own allocator held 1.257 in the live
 * program), guarded at 1.03 like the training and inference traces. */
static void test_llama_generate(void **state)
{
    (void)state;
    assert_true(replay_footprint("llama_generate") <= 1.03);
}

/* FSDP2 on 2 GPUs (bench/torch_multigpu.py fsdp2, rank 0's pool; 3 streams): 1.0528 measured
 * (1.1527 before a cache miss flushed a stale cache: docs/ALGORITHM.md, "The exact-size cache");
 * expandable segments held 1.125 in the live program. */
static void test_fsdp2_train(void **state)
{
    (void)state;
    assert_true(replay_footprint("fsdp2_train") <= 1.06);
}

/* Regression guards at the measured values (+ a little): these scenarios are harder. */
static void test_synthetic(void **state)
{
    (void)state;
    assert_true(replay_footprint("synthetic_multistream") <= 1.03);
    assert_true(replay_footprint("synthetic_scattered") <= 1.03); /* 1.082 before size classes */
    assert_true(replay_footprint("synthetic_kvcache") <= 1.18);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_train),     cmocka_unit_test(test_bert_infer),
        cmocka_unit_test(test_llama_t5_train), cmocka_unit_test(test_llama_generate),
        cmocka_unit_test(test_fsdp2_train),    cmocka_unit_test(test_synthetic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
