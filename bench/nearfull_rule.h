/*
 * nearfull_rule.h — the near-full rule (docs/ALGORITHM.md), measured from outside the pool, and the
 * seeded stress that drives a pool to the end of its device. Shared by vpmm-nearfull
 * (bench/nearfull.c) and tests/test_nearfull.c. Public API only (vpmm.h).
 *
 * The rule (docs/ALGORITHM.md, "The near-full rule"): a malloc succeeds while the shared pool's
 * free memory in whole pages, plus the pages the device and the cap still allow, covers it.
 * nf_count() sorts the shared pool's free whole pages by the handle they lie in:
 *   single      a handle of one page: defragmentation moves it
 *   whole_free  a handle of several pages, all free: it moves whole
 *   trapped     a handle of several pages that also holds live blocks: it cannot move, and its
 *               free pages serve only what fits around the live blocks
 * vpmm keeps the rule for the first two kinds (nf_movable_covers); the third is what handles
 * sized by their use are to remove.
 */
#ifndef VPMM_BENCH_NEARFULL_RULE_H
#define VPMM_BENCH_NEARFULL_RULE_H

#include <stddef.h>
#include <stdint.h>

#include "vpmm.h"

typedef struct nf_count {
    size_t single, whole_free, trapped; /* free whole pages, by the kind of handle they lie in */
    size_t trapped_handles;             /* handles holding the trapped pages */
    size_t room;                        /* pages the device and the cap still allow */
    size_t need;                        /* pages the refused request spans */
} nf_count_t;

/* What the rule counts for a request of `size` bytes refused by pool, on a device of `device`
 * bytes (the pool alone on it) under a cap of `cap` bytes (0: none). 0, or -1 (no host memory,
 * or a walk failed). */
int nf_count(vpmm_pool_t *pool, size_t size, size_t device, size_t cap, nf_count_t *out);

/* Whether the rule said the request fits: with every free whole page, or with the pages of
 * movable handles only (single-page and fully free ones). */
int nf_rule_covers(const nf_count_t *c);
int nf_movable_covers(const nf_count_t *c);

/* Streams with work in flight, for a caller that can make them (tests/test_nearfull.c: the host
 * backend's controls, which vpmm.h does not offer). The pool is then made on device 0 of the host
 * backend's process-wide shared node (config.device = 0), so that the caller reaches the same
 * node (vpmm_host_open_shared); `user` is the caller's. */
typedef struct nf_streams {
    size_t n;                                     /* streams the mallocs spread over (at most 8) */
    vpmm_stream_t (*create)(void *user);          /* a new stream of the node */
    void (*enqueue)(void *user, vpmm_stream_t s); /* one work item on s */
    void (*advance)(void *user, vpmm_stream_t s); /* s's oldest work item finishes */
    void (*finish)(void *user);                   /* every stream's work finishes (at the end) */
    void *user;
} nf_streams_t;

typedef struct nf_params {
    uint64_t seed, ops;
    size_t device, cap;          /* bytes; cap 0: none */
    size_t graph_bytes;          /* held by a graph pool from the start (0: none) */
    unsigned large_percent;      /* mallocs of 3 MiB up to the device's size */
    size_t handle_pages;         /* config.handle_pages (0: the library's) */
    int no_large_handles;        /* 1: config.large_handles = 0; 0: the library's */
    const nf_streams_t *streams; /* NULL: the legacy stream only, no work */
} nf_params_t;

typedef struct nf_result {
    uint64_t mallocs, frees, ooms;
    uint64_t violations; /* refused although nf_rule_covers */
    uint64_t movable;    /* refused although nf_movable_covers */
    size_t peak_mapped, peak_live;
    int check; /* vpmm_pool_check's finding count at the end */
} nf_result_t;

/* Called at each refused request, with what the rule counts; the pool may be inspected (not
 * changed). */
typedef void (*nf_oom_fn)(void *user, vpmm_pool_t *pool, uint64_t op, size_t size,
                          const nf_count_t *c);

/* The stress: one stream (the legacy one), blocks of 1 B to 3 MiB and, large_percent of the
 * mallocs, of 3 MiB up to the device's size (both log-uniform); each step a malloc or, half the
 * time, the free of a random live block. With prm->streams, the mallocs spread over its streams,
 * and a quarter of the steps instead enqueue work on one of them or finish one's oldest item, so
 * that freed memory stays pending on several streams. Host backend. 0, or -1 after a message on
 * stderr. */
int nf_run(const nf_params_t *prm, nf_result_t *res, nf_oom_fn on_oom, void *user);

#endif /* VPMM_BENCH_NEARFULL_RULE_H */
