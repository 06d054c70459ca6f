/*
 * nearfull_rule.c — the near-full rule's accounting and the stress that exercises it (contracts in
 * nearfull_rule.h). The free whole pages are found by merging the shared pool's free regions
 * (vpmm_pool_walk: a free region's neighbour of another state — ready, pending — is another
 * region, but their pages are free alike) and laying the handles over them
 * (vpmm_pool_walk_segments): a page is free when no live block touches it.
 */
#include "nearfull_rule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((size_t)1 << 20)

/* ---- the accounting ------------------------------------------------------------------------- */

typedef struct span {
    uintptr_t addr;
    size_t size;
} span_t;

typedef struct spans {
    span_t *v;
    size_t n, cap;
    int oom;
} spans_t;

static void push(spans_t *w, uintptr_t addr, size_t size)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 1024;
        span_t *v = realloc(w->v, cap * sizeof *v);
        if (v == NULL) {
            w->oom = 1;
            return;
        }
        w->v = v;
        w->cap = cap;
    }
    w->v[w->n++] = (span_t){ addr, size };
}

static int free_visit(const vpmm_region_info_t *r, void *user)
{
    spans_t *w = user;
    if (r->pool != 0 || r->state != VPMM_REGION_FREE)
        return 0;
    if (w->n > 0 && w->v[w->n - 1].addr + w->v[w->n - 1].size == r->addr)
        w->v[w->n - 1].size += r->size;
    else
        push(w, r->addr, r->size);
    return w->oom;
}

static int segment_visit(const vpmm_segment_info_t *s, void *user)
{
    spans_t *w = user;
    if (s->pool == 0)
        push(w, s->addr, s->size);
    return w->oom;
}

/* Whether [a, a + len) lies inside one free span (sorted, disjoint); *k is a cursor that only
 * moves forward (the pages are asked for in address order). */
static int inside_free(const spans_t *f, size_t *k, uintptr_t a, size_t len)
{
    while (*k < f->n && f->v[*k].addr + f->v[*k].size <= a)
        (*k)++;
    return *k < f->n && f->v[*k].addr <= a && a + len <= f->v[*k].addr + f->v[*k].size;
}

int nf_count(vpmm_pool_t *pool, size_t size, size_t device, size_t cap, nf_count_t *out)
{
    spans_t f = { 0 }, h = { 0 };
    vpmm_stats_t st;
    size_t k = 0, page, rsize;
    int rc = 0;

    memset(out, 0, sizeof *out);
    if (vpmm_get_stats(pool, &st) != VPMM_SUCCESS ||
        vpmm_pool_walk(pool, free_visit, &f) != VPMM_SUCCESS ||
        vpmm_pool_walk_segments(pool, segment_visit, &h) != VPMM_SUCCESS || f.oom || h.oom) {
        rc = -1;
        goto out;
    }
    page = st.page_size;
    for (size_t i = 0; i < h.n; i++) {
        const size_t pages = h.v[i].size / page;
        size_t nfree = 0;
        for (size_t j = 0; j < pages; j++)
            nfree += (size_t)inside_free(&f, &k, h.v[i].addr + j * page, page);
        if (pages == 1) {
            out->single += nfree;
        } else if (nfree == pages) {
            out->whole_free += nfree;
        } else if (nfree > 0) {
            out->trapped += nfree;
            out->trapped_handles++;
        }
    }
    out->room = device > st.mapped_bytes ? (device - st.mapped_bytes) / page : 0;
    if (cap != 0) {
        size_t croom = cap > st.mapped_bytes ? (cap - st.mapped_bytes) / page : 0;
        out->room = croom < out->room ? croom : out->room;
    }
    rsize = (size + VPMM_ALIGNMENT - 1) / VPMM_ALIGNMENT * VPMM_ALIGNMENT;
    out->need = (rsize + page - 1) / page;
out:
    free(f.v);
    free(h.v);
    return rc;
}

int nf_rule_covers(const nf_count_t *c)
{
    return c->single + c->whole_free + c->trapped + c->room >= c->need;
}

int nf_movable_covers(const nf_count_t *c)
{
    return c->single + c->whole_free + c->room >= c->need;
}

/* ---- the stress ----------------------------------------------------------------------------- */

typedef struct rng {
    uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r) /* splitmix64 */
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Log-uniform in [lo, hi]. */
static size_t log_uniform(rng_t *r, size_t lo, size_t hi)
{
    const double u = (double)(rng_next(r) >> 11) / 9007199254740992.0;
    const double v = (double)lo * exp(u * log((double)hi / (double)lo));
    return v < (double)lo ? lo : v > (double)hi ? hi : (size_t)v;
}

#define NF_MAX_LIVE    ((size_t)1 << 16)
#define NF_MAX_STREAMS 8

int nf_run(const nf_params_t *prm, nf_result_t *res, nf_oom_fn on_oom, void *user)
{
    vpmm_config_t cfg;
    vpmm_pool_t *pool = NULL;
    vpmm_graph_pool_t *gp = NULL;
    vpmm_stats_t st;
    void *held = NULL, **live;
    size_t nlive = 0;
    rng_t r = { prm->seed };
    vpmm_stream_t streams[NF_MAX_STREAMS];
    size_t nstreams = 0;
    int rc = 0;

    memset(res, 0, sizeof *res);
    live = malloc(NF_MAX_LIVE * sizeof *live);
    if (live == NULL)
        return -1;
    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_HOST;
    cfg.ignore_env = 1; /* the defaults are what is measured */
    cfg.host_memory = prm->device;
    cfg.max_bytes = prm->cap;
    cfg.handle_pages = prm->handle_pages;
    if (prm->no_large_handles)
        cfg.large_handles = 0;
    if (prm->streams != NULL)
        cfg.device = 0; /* the shared node, which the caller's controls reach */
    if (vpmm_pool_create(&cfg, &pool) != VPMM_SUCCESS) {
        fprintf(stderr, "nearfull: vpmm_pool_create: %s\n", vpmm_last_error());
        free(live);
        return -1;
    }
    if (prm->graph_bytes != 0 &&
        (vpmm_graph_pool_create(pool, &gp) != VPMM_SUCCESS ||
         vpmm_graph_pool_malloc(gp, prm->graph_bytes, NULL, &held) != VPMM_SUCCESS)) {
        fprintf(stderr, "nearfull: the graph pool's memory: %s\n", vpmm_last_error());
        goto fail;
    }
    for (size_t i = 0; prm->streams != NULL && i < prm->streams->n && i < NF_MAX_STREAMS; i++)
        streams[nstreams++] = prm->streams->create(prm->streams->user);
    for (uint64_t op = 0; op < prm->ops; op++) {
        size_t size;
        void *p = NULL;
        vpmm_status_t s;
        vpmm_stream_t on = NULL;
        nf_count_t c;
        if (nstreams > 0) {
            const uint64_t x = rng_next(&r);
            on = streams[(x >> 8) % nstreams];
            if ((x & 7) == 0) {
                prm->streams->enqueue(prm->streams->user, on);
                continue;
            }
            if ((x & 7) == 1) {
                prm->streams->advance(prm->streams->user, on);
                continue;
            }
        }
        if (nlive > 0 && (rng_next(&r) & 1)) {
            size_t i = (size_t)(rng_next(&r) % nlive);
            if (vpmm_free(pool, live[i]) != VPMM_SUCCESS)
                goto fail;
            live[i] = live[--nlive];
            res->frees++;
            continue;
        }
        size = rng_next(&r) % 100 < prm->large_percent ? log_uniform(&r, 3 * MiB, prm->device)
                                                       : log_uniform(&r, 1, 3 * MiB);
        s = vpmm_malloc(pool, size, on, &p);
        if (s == VPMM_SUCCESS) {
            if (nlive == NF_MAX_LIVE)
                vpmm_free(pool, p); /* enough blocks live: this one is not kept */
            else
                live[nlive++] = p;
            res->mallocs++;
            if (vpmm_get_stats(pool, &st) != VPMM_SUCCESS)
                goto fail;
            res->peak_mapped =
                st.mapped_bytes > res->peak_mapped ? st.mapped_bytes : res->peak_mapped;
            res->peak_live = st.live_bytes > res->peak_live ? st.live_bytes : res->peak_live;
            continue;
        }
        if (s != VPMM_ERROR_OUT_OF_MEMORY) {
            fprintf(stderr, "nearfull: vpmm_malloc(%zu): %s\n", size, vpmm_last_error());
            goto fail;
        }
        res->ooms++;
        if (nf_count(pool, size, prm->device, prm->cap, &c) != 0)
            goto fail;
        res->violations += (uint64_t)nf_rule_covers(&c);
        res->movable += (uint64_t)nf_movable_covers(&c);
        if (on_oom != NULL)
            on_oom(user, pool, op, size, &c);
    }
    goto out;
fail:
    rc = -1;
out:
    for (size_t i = 0; i < nlive; i++)
        vpmm_free(pool, live[i]);
    if (nstreams > 0) {
        prm->streams->finish(prm->streams->user);
        for (size_t i = 0; i < nstreams; i++)
            if (vpmm_stream_release(pool, streams[i]) != VPMM_SUCCESS)
                rc = -1;
    }
    if (held != NULL)
        vpmm_free(pool, held);
    if (gp != NULL)
        vpmm_graph_pool_release(gp);
    res->check = (int)vpmm_pool_check(pool, stderr);
    vpmm_pool_destroy(pool);
    free(live);
    return rc;
}
