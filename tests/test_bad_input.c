/*
 * test_bad_input.c — the bad-input table of docs/BAD_INPUT.md, as one table (rows[], at the end)
 * and one runner (run_row). A row is one line of the document (its name is the document's last
 * column, and the cmocka test's): a fixture (no pool, a host-backend test pool, the pool with some
 * state, or that and a captured graph with a checkpoint), what its setup adds, and its calls:
 * each one API call, the bad argument it gets and the status it must return. For every call the
 * runner asserts:
 *   - the exact status;
 *   - that vpmm_last_error() names the problem (one or two substrings); a call that succeeds
 *     must leave it alone, so each call is made right after poison() and a success must leave the
 *     poison there;
 *   - that out pointers are NULL after an error, and value outputs untouched, as documented;
 *   - for pool creation, that the base configuration then creates a pool that works;
 * and for the row, after its calls, that the pool is unchanged (tsnap before/after,
 * assert_snap_equal; another pool the row made too), its invariants hold and the driver holds
 * what the pool believes (CHECK_POOL, assert_driver_matches_pool), and that it still works (a
 * malloc and a free). Rows where the misuse is not refused but has a defined effect (a free
 * during someone else's capture, a release of an unknown stream, free(NULL)) assert that effect
 * instead, in their check. A row whose pool changes between its calls says so with a THEN step
 * (what happens, then a new snapshot).
 *
 * The last rows were found by this table (docs/BAD_INPUT.md, "Found by the table") and fixed in
 * src/; they stay as regression tests.
 *
 * Several devices and processes: the pool is on a host node of several devices (its params) and,
 * for CUDA IPC, is the importer of another pool's memory (c->other, the exporter: their, their2);
 * every row also asserts that the pool's host node holds what it held (vpmm_host_counts), and the
 * IPC rows that the process holds the descriptors it held.
 *
 * Environment rows run between tenv_clear (test_util.c), which unsets every library knob and any
 * unknown VPMM_* name, so no row sees another's settings or the caller's shell. Single-threaded,
 * like every core test (one row makes its calls on a second thread, one at a time).
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_cuda.h"
#include "graph_test_util.h"
#include "ipc_wire.h"
#include "status.h"

/* ---- what a row is made of ------------------------------------------------------------------- */

typedef struct ctx ctx_t;

/*
 * The calls: OP_<X> makes the function named next to it. vpmm_pool_check and
 * vpmm_checkpoint_allocs return a count, vpmm_pool_backend_name, vpmm_strerror and
 * vpmm_status_name a string, vpmm_checkpoint_destroy nothing; every other one a status.
 */
#define CALLS(X)                                                                                   \
    X(OP_CONFIG_INIT, vpmm_config_init)                                                            \
    X(OP_POOL_CREATE, vpmm_pool_create)                                                            \
    X(OP_POOL_DESTROY, vpmm_pool_destroy)                                                          \
    X(OP_MALLOC, vpmm_malloc)                                                                      \
    X(OP_FREE, vpmm_free)                                                                          \
    X(OP_STREAM_RELEASE, vpmm_stream_release)                                                      \
    X(OP_TRIM, vpmm_trim)                                                                          \
    X(OP_GET_STATS, vpmm_get_stats)                                                                \
    X(OP_RESET_PEAK_STATS, vpmm_reset_peak_stats)                                                  \
    X(OP_POOL_WALK, vpmm_pool_walk)                                                                \
    X(OP_POOL_DUMP, vpmm_pool_dump)                                                                \
    X(OP_POOL_CHECK, vpmm_pool_check)                                                              \
    X(OP_OOM_REPORT, vpmm_pool_oom_report)                                                         \
    X(OP_LAST_DRIVER_ERROR, vpmm_pool_last_driver_error)                                           \
    X(OP_BACKEND_NAME, vpmm_pool_backend_name)                                                     \
    X(OP_GRAPH_POOL_CREATE, vpmm_graph_pool_create)                                                \
    X(OP_GRAPH_POOL_RETAIN, vpmm_graph_pool_retain)                                                \
    X(OP_GRAPH_POOL_RELEASE, vpmm_graph_pool_release)                                              \
    X(OP_GRAPH_POOL_STATS, vpmm_graph_pool_stats)                                                  \
    X(OP_GRAPH_POOL_RESET_PEAK_STATS, vpmm_graph_pool_reset_peak_stats)                            \
    X(OP_CAPTURE_BEGIN, vpmm_capture_begin)                                                        \
    X(OP_CAPTURE_END, vpmm_capture_end)                                                            \
    X(OP_CAPTURE_REGISTER, vpmm_capture_register)                                                  \
    X(OP_CAPTURE_GRAPH_POOL, vpmm_capture_graph_pool)                                              \
    X(OP_GRAPH_DESTROY, vpmm_graph_destroy)                                                        \
    X(OP_CHECKPOINT_TAKE, vpmm_checkpoint_take)                                                    \
    X(OP_CHECKPOINT_REAPPLY, vpmm_checkpoint_reapply)                                              \
    X(OP_CHECKPOINT_INFO, vpmm_checkpoint_info)                                                    \
    X(OP_CHECKPOINT_ALLOCS, vpmm_checkpoint_allocs)                                                \
    X(OP_CHECKPOINT_DESTROY, vpmm_checkpoint_destroy)                                              \
    X(OP_STRERROR, vpmm_strerror)                                                                  \
    X(OP_STATUS_NAME, vpmm_status_name)                                                            \
    X(OP_POOL_DEVICE, vpmm_pool_device)                                                            \
    X(OP_GRANT_ACCESS, vpmm_pool_grant_access)                                                     \
    X(OP_SET_SEGMENT_HOOK, vpmm_pool_set_segment_hook)                                             \
    X(OP_WALK_SEGMENTS, vpmm_pool_walk_segments)                                                   \
    X(OP_IPC_EXPORT, vpmm_ipc_export)                                                              \
    X(OP_IPC_UNSHARE, vpmm_ipc_unshare)                                                            \
    X(OP_IPC_OPEN, vpmm_ipc_open)                                                                  \
    X(OP_IPC_CLOSE, vpmm_ipc_close)

#define AS_ENUM(op, fn) op,
#define AS_NAME(op, fn) [op] = #fn,

/* OP_END ends a row's calls; OP_THEN is a step between calls: a function, then a new snapshot
 * of the pool (its calls are compared with the pool after the step). */
typedef enum op { OP_END, OP_THEN, CALLS(AS_ENUM) } op_t;

/* The arguments a call gets, by what they name: 0 is the fixture's own. */
typedef enum pool_arg { OWN_POOL, NULL_POOL, OTHER_POOL } pool_arg_t;
typedef enum gp_arg { OWN_GP, NULL_GP, MINE, THEIRS } gp_arg_t;
typedef enum ck_arg { OWN_CK, NULL_CK } ck_arg_t;
typedef enum graph_arg { OWN_GRAPH, NULL_GRAPH } graph_arg_t;
typedef enum stream_arg {
    S_NULL,       /* stream 0 */
    S_LEGACY,     /* VPMM_STREAM_LEGACY (0x1) */
    S_PER_THREAD, /* VPMM_STREAM_PER_THREAD (0x2) */
    S_S,          /* the fixture's stream */
    S_CS,         /* the stream G1 was captured on */
    S_S2,         /* another stream a row made */
    S_EXT,        /* a stream captured outside vpmm */
    S_JOINED,     /* a stream joined into cs's capture by an event */
    S_NEVER,      /* a stream the pool never saw */
    S_DEAD0,      /* (vpmm_stream_t)0xdead0 */
    S_1000,       /* (vpmm_stream_t)0x1000 */
} stream_arg_t;
typedef enum ptr_arg {
    P_NULL,
    P_BIG,   /* the fixture's 3 MiB allocation on s */
    P_SMALL, /* its 1000 bytes on the legacy stream */
    P_OUT,   /* G1's output */
    P_A,     /* what rows allocate: a, b, x, later, ... */
    P_B,
    P_X,
    P_PRIV,
    P_LATER,
    P_THEIRS, /* another pool's allocation */
    P_THEIR_PRIV,
    P_STACK,  /* a stack address */
    P_ONE,    /* (void *)1 */
    P_TOP,    /* the top page */
    P_HANDLE, /* the pool handle itself */
    P_Q,      /* what vpmm_ipc_open returned, still open */
    P_Q2,     /* what it returned for another allocation, closed since */
} ptr_arg_t;
/* The bytes vpmm_ipc_open gets: the exporter's handle of their (c->h), or a copy changed so that
 * it is no handle (ipc_wire.h's layout). */
typedef enum handle_arg {
    H_OK,        /* as exported: its share is not taken yet */
    H_NULL,      /* NULL */
    H_SHORT,     /* its first 10 bytes */
    H_MAGIC,     /* the magic with a bit flipped */
    H_VERSION,   /* another wire version */
    H_LEN_SHORT, /* one byte short of the length its handle count says */
    H_LEN_LONG,  /* an entry's worth longer */
    H_OUTSIDE,   /* the allocation's size past the end of its handles */
    H_SERIAL0,   /* the first entry's serial number 0 */
    H_FD,        /* the first entry's descriptor one the exporter does not have */
    H_PID,       /* an exporter that does not exist (INT32_MAX: past any pid_max) */
    H_STALE,     /* the handle of their2, opened and closed since: its share is over */
} handle_arg_t;
typedef enum out_arg {
    OUT,       /* the out argument points at a sentinel */
    NULL_OUT,  /* NULL for the (first) out argument */
    NULL_OUT2, /* NULL for the second */
    NULL_BOTH, /* NULL for both */
} out_arg_t;

/* A call's flags. */
enum {
    KEEPS_OUT = 1 << 0,         /* a success that must not write its out argument either */
    OTHER_THREAD = 1 << 1,      /* made on a thread of its own */
    NO_DRIVER_CALL = 1 << 2,    /* makes no driver call */
    ONE_CAPTURE_QUERY = 1 << 3, /* makes one: is a stream being captured? */
    SAYS_LEN = 1 << 4,          /* a refusal that writes *out_len: the length needed (c->need) */
};

/* A configuration for vpmm_pool_create: base_config() with these changes (0: none). */
typedef struct cfg {
    int null;        /* no config at all */
    int defaults;    /* vpmm_config_init's backend, not the host backend */
    int ignore_env;  /* config.ignore_env */
    int va_from_env; /* config.va_size 0: VPMM_VA_SIZE decides */
    int backend, device, cache_percent, verbose, default_stream;
    size_t page_size, va_size, max_bytes, prealloc_pages;
} cfg_t;

typedef struct call {
    op_t op;
    vpmm_status_t want; /* the status */
    const char *says;   /* a substring of vpmm_last_error(); NULL: a success leaves it alone;
                         * WANT: what the row's setup wrote into c->want */
    const char *says2;  /* and another substring */
    pool_arg_t pool;
    gp_arg_t gp;
    ck_arg_t ck;
    graph_arg_t graph;
    stream_arg_t stream;
    ptr_arg_t ptr;
    size_t off;       /* added to ptr */
    size_t size;      /* bytes (malloc, trim, oom_report) or a count (dead pointers, allocs) */
    int mode;         /* capture mode */
    int device;       /* vpmm_pool_grant_access's device */
    handle_arg_t hdl; /* vpmm_ipc_open's bytes */
    struct {
        ptr_arg_t ptr;
        size_t off;
    } dead[2]; /* reapply's dead pointers (size of them; NULL when size is 0) */
    out_arg_t out;
    int code;          /* OP_STRERROR, OP_STATUS_NAME: the status value */
    size_t count;      /* what a count op returns */
    const char *text;  /* what a string op returns (NULL: NULL) */
    const char *env;   /* OP_POOL_CREATE: a variable set to value for the call */
    const char *value; /* (unset after it) */
    cfg_t cfg;         /* OP_POOL_CREATE's config */
    unsigned flags;
    void (*then)(ctx_t *c); /* OP_THEN */
} call_t;

static const char WANT[] = "(the message the row formatted)";

/* The rows' shorthands (clang-format would spread each over many lines). */
/* clang-format off */
/* A step between calls: fn (NULL: nothing), then the row's snapshot is taken again. */
#define THEN(fn) { OP_THEN, .then = (fn) }
/* A bad VPMM_* value: creation fails naming the variable; once unset, the pool is created. */
#define ENV(name, val, msg) \
    { OP_POOL_CREATE, VPMM_ERROR_INVALID_ENV, (msg), (name), .env = (name), .value = (val) }
/* The same for VPMM_VA_SIZE: config.va_size 0, so that the variable is the one used. */
#define ENV_VA(name, val, msg) \
    { OP_POOL_CREATE, VPMM_ERROR_INVALID_ENV, (msg), (name), .env = (name), .value = (val), \
      .cfg = { .va_from_env = 1 } }
/* A bad config field (environment ignored). */
#define CONFIG(st, msg, ...) { OP_POOL_CREATE, (st), (msg), .cfg = { .ignore_env = 1, __VA_ARGS__ } }
/* clang-format on */

typedef enum fixture {
    NO_POOL,
    POOL, /* a test pool (tpool_open) */
    FX,   /* and a stream s with two live allocations and a cached free block */
    GFX,  /* and a graph pool gp with one captured graph G1 and a checkpoint ck */
} fixture_t;

/* What the row asserts of the pool after its calls and its check. */
typedef enum after {
    UNCHANGED, /* as before the calls (snapshot, invariants, driver), and it still works */
    SAME,      /* the same, without the malloc and free */
    EFFECT,    /* the calls had an effect: the row's check asserts it */
} after_t;

/* A row's flags. */
enum {
    ENV_CLEARED = 1 << 0,  /* runs between tenv_clear */
    NEEDS_NO_GPU = 1 << 1, /* skipped where a CUDA device is present */
};

#define MAX_CALLS 12

typedef struct row {
    const char *name; /* the test's: docs/BAD_INPUT.md's last column */
    fixture_t fixture;
    tpool_params_t params; /* the pool's (va_size 0: 4 GiB) */
    unsigned flags;
    void (*setup)(ctx_t *c); /* what the calls need besides the fixture: before the snapshot */
    call_t calls[MAX_CALLS];
    void (*check)(ctx_t *c); /* what else the row asserts, after its calls */
    after_t after;
    void (*undo)(ctx_t *c); /* takes back what setup made and the fixture does not */
} row_t;

/* ---- the context a row runs in --------------------------------------------------------------- */

#define HANDLE_CAP 512 /* room for an IPC handle of the rows' allocations (a few pages) */

struct ctx {
    const row_t *row;
    tpool_t t;             /* POOL, FX, GFX */
    vpmm_stream_t s;       /* FX: a stream with allocations (POOL: made by setup) */
    void *big;             /* FX: 3 MiB on s */
    void *small;           /* FX: 1000 bytes on the legacy stream */
    vpmm_stream_t cs;      /* GFX: the stream G1 was captured on */
    vpmm_graph_pool_t *gp; /* GFX: G1's graph pool (POOL, FX: made by setup) */
    vpmm_graph_t g;        /* GFX: G1 */
    void *out;             /* GFX: G1's output, live (NULL once a row freed it) */
    vpmm_checkpoint_t *ck; /* GFX: a checkpoint taken after G1 */
    tsnap_t before;        /* the pool before the calls */
    /* What setups add; fixture_close releases the graph pools and graphs, and the other pool. */
    tpool_t other;
    tsnap_t other_before;
    vpmm_graph_pool_t *mine, *theirs, *gp2; /* theirs: the other pool's */
    vpmm_graph_t g2, og;                    /* og: the other pool's */
    vpmm_stream_t s2, ext, joined, never;
    vpmm_drv_event_t ev;
    void *a, *b, *x, *priv, *later, *tmp, *keep, *their, *their_priv;
    uint64_t id, ext_id, forbidden, records;
    vpmm_graph_pool_stats_t gs1, gs2;
    vpmm_stats_t stats;
    char want[128];
    int on_stack;
    /* Several devices and processes: other = the exporter (their, their2), t = the importer. */
    vpmm_driver_t *view; /* a bare view of another device of t's node */
    unsigned char h[HANDLE_CAP], stale[HANDLE_CAP], bad[HANDLE_CAP + 64];
    size_t hlen, stale_len;
    void *q, *q2, *their2; /* q: their, opened here; q2: their2, opened and closed */
    size_t need;           /* the length of big's IPC handle */
    size_t fds;            /* the process's open descriptors after setup */
    size_t hooked;         /* segment events the row's hook heard */
    vpmm_host_counts_t hc; /* t's host node before the calls */
    /* The calls' outputs: set to sentinels before each call. */
    struct {
        vpmm_pool_t *pool;
        void *p;
        vpmm_graph_t g;
        vpmm_graph_pool_t *gp;
        vpmm_checkpoint_t *ck;
        vpmm_stats_t stats;
        vpmm_graph_pool_stats_t gstats;
        vpmm_checkpoint_info_t info;
        vpmm_checkpoint_alloc_t al[2];
        size_t released, visited;
        char buf[16];
        int code;
        const char *call;
        int device;
        size_t len;
        unsigned char handle[256];
    } o;
    size_t count;     /* what a count op returned */
    const char *text; /* what a string op returned */
};

#define POISON    "(poisoned by test_bad_input)"
#define UNTOUCHED "untouched"
#define SENTINEL  0x5a

/* Sets the thread's last error to a marker: a call that succeeds must leave it there. */
static void poison(void)
{
    vpmm_i_set_error("%s", POISON);
}

static void assert_error_mentions(const char *err, const char *needle)
{
    if (strstr(err, needle) == NULL)
        fail_msg("last error \"%s\" does not mention \"%s\"", err, needle);
}

/* What the pool's host node holds (every view's and pool's of it, imports included). */
static vpmm_host_counts_t host_counts(const ctx_t *c)
{
    vpmm_host_counts_t hc;
    vpmm_host_counts(c->t.host, &hc);
    return hc;
}

/* The pool is as it was before the calls, and consistent; its host node holds what it held (no
 * handle, import, mapping or reservation made or left behind). */
static void same(ctx_t *c)
{
    tsnap_t now = tsnap(c->t.pool);
    vpmm_host_counts_t hc = host_counts(c);
    assert_snap_equal(&c->before, &now);
    CHECK_POOL(c->t.pool);
    assert_driver_matches_pool(&c->t);
    assert_int_equal(hc.handles, c->hc.handles);
    assert_int_equal(hc.handle_bytes, c->hc.handle_bytes);
    assert_int_equal(hc.imported, c->hc.imported);
    assert_int_equal(hc.imported_bytes, c->hc.imported_bytes);
    assert_int_equal(hc.mappings, c->hc.mappings);
    assert_int_equal(hc.mapped_bytes, c->hc.mapped_bytes);
    assert_int_equal(hc.reservations, c->hc.reservations);
    assert_int_equal(hc.reserved_bytes, c->hc.reserved_bytes);
}

/* The same, and it still serves a malloc and a free. */
static void unchanged(ctx_t *c)
{
    same(c);
    tfree(c->t.pool, tmalloc(c->t.pool, 4096, NULL));
}

/* ---- fixtures -------------------------------------------------------------------------------- */

static void fixture_open(ctx_t *c, const row_t *r)
{
    tpool_params_t prm = r->params;
    if (r->fixture == NO_POOL)
        return;
    /* Every pool here reserves 4 GiB chunks (a graph pool's too) unless a row says otherwise:
     * a row may hold two pools with a graph pool each, which must fit in the address space
     * valgrind allows. */
    if (prm.va_size == 0)
        prm.va_size = 4 * GiB;
    tpool_open(&c->t, &prm);
    if (r->fixture == POOL)
        return;
    c->s = vpmm_host_stream_create(c->t.host);
    c->big = tmalloc(c->t.pool, 3 * MiB, c->s);
    c->small = tmalloc(c->t.pool, 1000, NULL);
    tfree(c->t.pool, tmalloc(c->t.pool, 64 * KiB, c->s)); /* in s's exact-size cache */
    if (r->fixture == FX)
        return;
    /* G1 on cs: a temporary freed inside the capture, and an output that stays live. */
    c->cs = vpmm_host_stream_create(c->t.host);
    c->gp = tgp_create(&c->t);
    tcapture_begin(&c->t, c->gp, c->cs);
    tfree(c->t.pool, tmalloc(c->t.pool, 2 * MiB, c->cs));
    c->out = tmalloc(c->t.pool, 100 * KiB, c->cs);
    c->g = tcapture_end(&c->t, c->cs);
    c->ck = tcheckpoint_take(c->gp);
}

static void release(vpmm_graph_pool_t *gp)
{
    if (gp != NULL)
        assert_int_equal(vpmm_graph_pool_release(gp), VPMM_SUCCESS);
}

static void fixture_close(ctx_t *c)
{
    if (c->other.pool != NULL) {
        release(c->theirs);
        tpool_close(&c->other);
    }
    if (c->t.pool == NULL)
        return;
    if (c->g2 != NULL)
        assert_int_equal(vpmm_graph_destroy(c->t.pool, c->g2), VPMM_SUCCESS);
    vpmm_checkpoint_destroy(c->ck);
    if (c->out != NULL)
        tfree(c->t.pool, c->out);
    if (c->g != NULL)
        assert_int_equal(vpmm_graph_destroy(c->t.pool, c->g), VPMM_SUCCESS);
    release(c->gp);
    release(c->gp2);
    release(c->mine);
    if (c->big != NULL)
        tfree(c->t.pool, c->big);
    if (c->small != NULL)
        tfree(c->t.pool, c->small);
    tpool_close(&c->t);
}

/* Another pool, with a graph pool of its own (theirs). */
static void open_other(ctx_t *c)
{
    tpool_open(&c->other, &(tpool_params_t){ .va_size = 4 * GiB });
    c->theirs = tgp_create(&c->other);
}

/* ---- making a call --------------------------------------------------------------------------- */

static vpmm_pool_t *pool_arg(ctx_t *c, pool_arg_t a)
{
    return a == OWN_POOL ? c->t.pool : a == OTHER_POOL ? c->other.pool : NULL;
}

static vpmm_graph_pool_t *gp_arg(ctx_t *c, gp_arg_t a)
{
    vpmm_graph_pool_t *const gps[] = {
        [OWN_GP] = c->gp, [NULL_GP] = NULL, [MINE] = c->mine, [THEIRS] = c->theirs
    };
    return gps[a];
}

static vpmm_stream_t stream_arg(ctx_t *c, stream_arg_t a)
{
    const vpmm_stream_t streams[] = {
        [S_NULL] = NULL,
        [S_LEGACY] = VPMM_STREAM_LEGACY,
        [S_PER_THREAD] = VPMM_STREAM_PER_THREAD,
        [S_S] = c->s,
        [S_CS] = c->cs,
        [S_S2] = c->s2,
        [S_EXT] = c->ext,
        [S_JOINED] = c->joined,
        [S_NEVER] = c->never,
        [S_DEAD0] = (vpmm_stream_t)0xdead0,
        [S_1000] = (vpmm_stream_t)0x1000,
    };
    return streams[a];
}

static void *ptr_arg(ctx_t *c, ptr_arg_t a, size_t off)
{
    void *const ptrs[] = {
        [P_NULL] = NULL,
        [P_BIG] = c->big,
        [P_SMALL] = c->small,
        [P_OUT] = c->out,
        [P_A] = c->a,
        [P_B] = c->b,
        [P_X] = c->x,
        [P_PRIV] = c->priv,
        [P_LATER] = c->later,
        [P_THEIRS] = c->their,
        [P_THEIR_PRIV] = c->their_priv,
        [P_STACK] = &c->on_stack,
        [P_ONE] = (void *)1,
        [P_TOP] = (void *)(uintptr_t)-4096,
        [P_HANDLE] = c->t.pool,
        [P_Q] = c->q,
        [P_Q2] = c->q2,
    };
    return ptrs[a] == NULL ? NULL : (char *)ptrs[a] + off;
}

/* A host pool with a small VA chunk (the default 8 TiB may not fit under valgrind or ASan), and
 * a call's changes to it. */
static void base_config(vpmm_config_t *v, const cfg_t *f)
{
    vpmm_config_init(v);
    if (!f->defaults)
        v->backend = VPMM_BACKEND_HOST;
    v->va_size = f->va_from_env ? 0 : 1 * GiB;
    v->ignore_env = f->ignore_env;
    if (f->backend)
        v->backend = (vpmm_backend_t)f->backend;
    if (f->device)
        v->device = f->device;
    if (f->cache_percent)
        v->cache_percent = f->cache_percent;
    if (f->verbose)
        v->verbose = f->verbose;
    if (f->default_stream)
        v->default_stream = (vpmm_default_stream_t)f->default_stream;
    if (f->page_size)
        v->page_size = f->page_size;
    if (f->va_size)
        v->va_size = f->va_size;
    if (f->max_bytes)
        v->max_bytes = f->max_bytes;
    if (f->prealloc_pages)
        v->prealloc_pages = f->prealloc_pages;
}

static int count_visit(const vpmm_region_info_t *r, void *user)
{
    (void)r;
    ++*(size_t *)user;
    return 0;
}

static int count_segment(const vpmm_segment_info_t *s, void *user)
{
    (void)s;
    ++*(size_t *)user;
    return 0;
}

static void count_segment_event(void *user, vpmm_segment_event_t ev, const vpmm_segment_info_t *s)
{
    (void)ev;
    (void)s;
    ++*(size_t *)user;
}

/* vpmm_ipc_open's bytes (into c->bad when changed) and their length. */
static const void *handle_arg(ctx_t *c, handle_arg_t a, size_t *len)
{
    vpmm_ipc_header_t hd;
    vpmm_ipc_entry_t e;
    *len = c->hlen;
    if (a == H_OK)
        return c->h;
    if (a == H_NULL)
        return NULL;
    if (a == H_STALE) {
        *len = c->stale_len;
        return c->stale;
    }
    assert_true(c->hlen >= sizeof hd + sizeof e);
    memset(c->bad, 0, sizeof c->bad);
    memcpy(c->bad, c->h, c->hlen);
    memcpy(&hd, c->bad, sizeof hd);
    memcpy(&e, c->bad + sizeof hd, sizeof e);
    switch (a) {
    case H_SHORT:
        *len = 10;
        break;
    case H_MAGIC:
        hd.magic[0] ^= 1;
        break;
    case H_VERSION:
        hd.version = VPMM_IPC_VERSION + 1;
        break;
    case H_LEN_SHORT:
        *len -= 1;
        break;
    case H_LEN_LONG:
        *len += sizeof e; /* zeros */
        break;
    case H_OUTSIDE:
        hd.size = UINT64_MAX - hd.offset;
        break;
    case H_SERIAL0:
        e.serial = 0;
        break;
    case H_FD:
        e.fd = 0x7f7f7f7f;
        break;
    case H_PID:
        hd.pid = INT32_MAX;
        break;
    default:
        fail_msg("handle_arg %d", (int)a);
    }
    memcpy(c->bad, &hd, sizeof hd);
    memcpy(c->bad + sizeof hd, &e, sizeof e);
    return c->bad;
}

static void set_sentinels(ctx_t *c)
{
    memset(&c->o, SENTINEL, sizeof c->o);
    c->o.pool = (vpmm_pool_t *)&c->o.pool;
    c->o.p = (void *)1;
    c->o.g = (vpmm_graph_t)1;
    c->o.gp = (vpmm_graph_pool_t *)1;
    c->o.ck = (vpmm_checkpoint_t *)1;
    c->o.released = 12345;
    c->o.visited = 0;
    snprintf(c->o.buf, sizeof c->o.buf, "%s", UNTOUCHED);
    c->o.code = 7;
    c->o.call = UNTOUCHED;
}

/* Makes the call; a count or string result goes to c->count or c->text. */
static vpmm_status_t invoke(ctx_t *c, const call_t *k)
{
    vpmm_pool_t *pool = pool_arg(c, k->pool);
    vpmm_graph_pool_t *gp = gp_arg(c, k->gp);
    vpmm_checkpoint_t *ck = k->ck == OWN_CK ? c->ck : NULL;
    vpmm_stream_t s = stream_arg(c, k->stream);
    int out = k->out != NULL_OUT && k->out != NULL_BOTH;
    int out2 = k->out != NULL_OUT2 && k->out != NULL_BOTH;
    switch (k->op) {
    case OP_CONFIG_INIT:
        return vpmm_config_init(NULL);
    case OP_POOL_CREATE: {
        vpmm_config_t cfg;
        base_config(&cfg, &k->cfg);
        return vpmm_pool_create(k->cfg.null ? NULL : &cfg, out ? &c->o.pool : NULL);
    }
    case OP_POOL_DESTROY:
        return vpmm_pool_destroy(pool);
    case OP_MALLOC:
        return vpmm_malloc(pool, k->size, s, out ? &c->o.p : NULL);
    case OP_FREE:
        return vpmm_free(pool, ptr_arg(c, k->ptr, k->off));
    case OP_STREAM_RELEASE:
        return vpmm_stream_release(pool, s);
    case OP_TRIM:
        return vpmm_trim(pool, k->size, out ? &c->o.released : NULL);
    case OP_GET_STATS:
        return vpmm_get_stats(pool, out ? &c->o.stats : NULL);
    case OP_RESET_PEAK_STATS:
        return vpmm_reset_peak_stats(pool);
    case OP_POOL_WALK:
        return vpmm_pool_walk(pool, out ? count_visit : NULL, out ? &c->o.visited : NULL);
    case OP_POOL_DUMP:
        return vpmm_pool_dump(pool, out ? stdout : NULL);
    case OP_POOL_CHECK:
        c->count = vpmm_pool_check(pool, out ? stderr : NULL);
        return VPMM_SUCCESS;
    case OP_OOM_REPORT:
        return vpmm_pool_oom_report(pool, out ? c->o.buf : NULL, k->size);
    case OP_LAST_DRIVER_ERROR:
        return vpmm_pool_last_driver_error(pool, out ? &c->o.code : NULL, out2 ? &c->o.call : NULL);
    case OP_BACKEND_NAME:
        c->text = vpmm_pool_backend_name(pool);
        return VPMM_SUCCESS;
    case OP_GRAPH_POOL_CREATE:
        return vpmm_graph_pool_create(pool, out ? &c->o.gp : NULL);
    case OP_GRAPH_POOL_RETAIN:
        return vpmm_graph_pool_retain(gp);
    case OP_GRAPH_POOL_RELEASE:
        return vpmm_graph_pool_release(gp);
    case OP_GRAPH_POOL_STATS:
        return vpmm_graph_pool_stats(gp, out ? &c->o.gstats : NULL);
    case OP_GRAPH_POOL_RESET_PEAK_STATS:
        return vpmm_graph_pool_reset_peak_stats(gp);
    case OP_CAPTURE_BEGIN:
        return vpmm_capture_begin(pool, gp, s, (vpmm_stream_capture_mode_t)k->mode);
    case OP_CAPTURE_END:
        return vpmm_capture_end(pool, s, out ? &c->o.g : NULL);
    case OP_CAPTURE_REGISTER:
        return vpmm_capture_register(pool, gp, s);
    case OP_CAPTURE_GRAPH_POOL:
        return vpmm_capture_graph_pool(pool, s, out ? &c->o.gp : NULL);
    case OP_GRAPH_DESTROY:
        return vpmm_graph_destroy(pool, k->graph == OWN_GRAPH ? c->g : NULL);
    case OP_CHECKPOINT_TAKE:
        return vpmm_checkpoint_take(gp, out ? &c->o.ck : NULL);
    case OP_CHECKPOINT_REAPPLY: {
        void *dead[2];
        for (size_t i = 0; i < k->size; i++)
            dead[i] = ptr_arg(c, k->dead[i].ptr, k->dead[i].off);
        return vpmm_checkpoint_reapply(gp, ck, out && k->size > 0 ? dead : NULL, k->size);
    }
    case OP_CHECKPOINT_INFO:
        return vpmm_checkpoint_info(ck, out ? &c->o.info : NULL);
    case OP_CHECKPOINT_ALLOCS:
        c->count = vpmm_checkpoint_allocs(ck, out ? c->o.al : NULL, k->size);
        return VPMM_SUCCESS;
    case OP_CHECKPOINT_DESTROY:
        vpmm_checkpoint_destroy(ck);
        return VPMM_SUCCESS;
    case OP_STRERROR:
        c->text = vpmm_strerror((vpmm_status_t)k->code);
        return VPMM_SUCCESS;
    case OP_STATUS_NAME:
        c->text = vpmm_status_name((vpmm_status_t)k->code);
        return VPMM_SUCCESS;
    case OP_POOL_DEVICE:
        return vpmm_pool_device(pool, out ? &c->o.device : NULL);
    case OP_GRANT_ACCESS:
        return vpmm_pool_grant_access(pool, k->device);
    case OP_SET_SEGMENT_HOOK:
        return vpmm_pool_set_segment_hook(pool, out ? count_segment_event : NULL, &c->hooked);
    case OP_WALK_SEGMENTS:
        return vpmm_pool_walk_segments(pool, out ? count_segment : NULL, &c->o.visited);
    case OP_IPC_EXPORT:
        assert_true(k->size <= sizeof c->o.handle);
        return vpmm_ipc_export(pool, ptr_arg(c, k->ptr, k->off), out ? c->o.handle : NULL, k->size,
                               out2 ? &c->o.len : NULL);
    case OP_IPC_UNSHARE:
        return vpmm_ipc_unshare(pool, ptr_arg(c, k->ptr, k->off));
    case OP_IPC_OPEN: {
        size_t len;
        const void *bytes = handle_arg(c, k->hdl, &len);
        return vpmm_ipc_open(pool, bytes, len, out ? &c->o.p : NULL);
    }
    case OP_IPC_CLOSE:
        return vpmm_ipc_close(pool, ptr_arg(c, k->ptr, k->off));
    case OP_END:
    case OP_THEN:
        break;
    }
    fail_msg("op %d is not a call", (int)k->op);
    return VPMM_SUCCESS;
}

/* A call made on a thread of its own: its status and its last error (which is per thread). */
typedef struct away {
    ctx_t *c;
    const call_t *k;
    vpmm_status_t st;
    char err[256];
} away_t;

static void *call_away(void *arg)
{
    away_t *a = arg;
    poison();
    a->st = invoke(a->c, a->k);
    snprintf(a->err, sizeof a->err, "%s", vpmm_last_error());
    return NULL;
}

static int is_sentinel(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i] != SENTINEL)
            return 0;
    return 1;
}

static void assert_sentinel(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i] != SENTINEL)
            fail_msg("byte %zu of an output the call must not write was written", i);
}

/* After an error, out pointers are NULL and value outputs untouched (set_sentinels). */
static void check_outputs(ctx_t *c, const call_t *k, vpmm_status_t st)
{
    const int untouched = st != VPMM_SUCCESS || (k->flags & KEEPS_OUT);
    if (st != VPMM_SUCCESS && k->out == OUT) {
        if (k->op == OP_POOL_CREATE)
            assert_null(c->o.pool);
        if (k->op == OP_MALLOC)
            assert_null(c->o.p);
        if (k->op == OP_CAPTURE_END)
            assert_null(c->o.g);
        if (k->op == OP_GRAPH_POOL_CREATE || k->op == OP_CAPTURE_GRAPH_POOL)
            assert_null(c->o.gp);
        if (k->op == OP_CHECKPOINT_TAKE)
            assert_null(c->o.ck);
        if (k->op == OP_IPC_OPEN)
            assert_null(c->o.p);
    }
    if (!untouched)
        return;
    assert_sentinel(&c->o.stats, sizeof c->o.stats);
    assert_sentinel(&c->o.gstats, sizeof c->o.gstats);
    assert_sentinel(&c->o.info, sizeof c->o.info);
    assert_sentinel(c->o.al, sizeof c->o.al);
    assert_int_equal(c->o.released, 12345);
    assert_int_equal(c->o.visited, 0); /* the visitor was never called */
    assert_string_equal(c->o.buf, UNTOUCHED);
    assert_int_equal(c->o.code, 7);
    assert_ptr_equal(c->o.call, UNTOUCHED);
    assert_sentinel(&c->o.device, sizeof c->o.device);
    assert_sentinel(c->o.handle, sizeof c->o.handle);
    if (k->flags & SAYS_LEN) /* the length needed, so that the caller can size its buffer */
        assert_int_equal(c->o.len, c->need);
    else if (!is_sentinel(&c->o.len, sizeof c->o.len))
        fail_msg("*out_len was written (%zu) by a call that must leave it alone", c->o.len);
}

/* vpmm_pool_create with the base configuration (and the call's ignore_env) works. */
static void expect_create_works(const call_t *k)
{
    vpmm_config_t v;
    vpmm_pool_t *pool = NULL;
    vpmm_status_t st;
    base_config(&v, &(cfg_t){ .ignore_env = k->cfg.ignore_env });
    st = vpmm_pool_create(&v, &pool);
    if (st != VPMM_SUCCESS)
        fail_msg("vpmm_pool_create: %s (\"%s\")", vpmm_status_name(st), vpmm_last_error());
    tfree(pool, tmalloc(pool, 4096, NULL));
    CHECK_POOL(pool);
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
}

static const char *op_name(op_t op)
{
    static const char *const names[] = { CALLS(AS_NAME) };
    return names[op];
}

/* Makes call i of the row and asserts everything the table says of it. */
static void make_call(ctx_t *c, int i)
{
    const call_t *k = &c->row->calls[i];
    const char *fn = op_name(k->op);
    uint64_t calls = 0, queries = 0;
    vpmm_status_t st;
    char err[256];

    set_sentinels(c);
    if (c->t.fault != NULL) {
        calls = vpmm_fault_total_calls(c->t.fault);
        queries = vpmm_fault_calls(c->t.fault, VPMM_DRV_CAPTURE_INFO);
    }
    if (k->env != NULL)
        assert_int_equal(setenv(k->env, k->value, 1), 0);
    if (k->flags & OTHER_THREAD) {
        away_t a = { .c = c, .k = k };
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, call_away, &a), 0);
        assert_int_equal(pthread_join(th, NULL), 0);
        st = a.st;
        snprintf(err, sizeof err, "%s", a.err);
    } else {
        poison();
        st = invoke(c, k);
        snprintf(err, sizeof err, "%s", vpmm_last_error());
    }

    switch (k->op) {
    case OP_POOL_CHECK:
    case OP_CHECKPOINT_ALLOCS:
        if (c->count != k->count)
            fail_msg("%s, call %d (%s): returned %zu, want %zu", c->row->name, i, fn, c->count,
                     k->count);
        break;
    case OP_BACKEND_NAME:
    case OP_STRERROR:
    case OP_STATUS_NAME:
        if (k->text == NULL)
            assert_null(c->text);
        else
            assert_string_equal(c->text, k->text);
        break;
    default:
        if (st != k->want)
            fail_msg("%s, call %d (%s): got %s (\"%s\"), want %s", c->row->name, i, fn,
                     vpmm_status_name(st), err, vpmm_status_name(k->want));
        break;
    }
    if (k->says == NULL && strcmp(err, POISON) != 0)
        fail_msg("%s, call %d (%s) succeeded but changed the last error to \"%s\"", c->row->name, i,
                 fn, err);
    if (k->says != NULL)
        assert_error_mentions(err, k->says == WANT ? c->want : k->says);
    if (k->says2 != NULL)
        assert_error_mentions(err, k->says2);
    check_outputs(c, k, st);
    if (k->flags & NO_DRIVER_CALL)
        assert_int_equal(vpmm_fault_total_calls(c->t.fault) - calls, 0);
    if (k->flags & ONE_CAPTURE_QUERY) {
        assert_int_equal(vpmm_fault_total_calls(c->t.fault) - calls, 1);
        assert_int_equal(vpmm_fault_calls(c->t.fault, VPMM_DRV_CAPTURE_INFO) - queries, 1);
    }
    if (k->op == OP_POOL_CREATE) {
        /* Nothing is left of the refused creation: without the variable, or with the base
         * config, the next one works. */
        if (k->env != NULL)
            assert_int_equal(unsetenv(k->env), 0);
        expect_create_works(k);
    }
}

static void run_row(void **state)
{
    const row_t *r = *state;
    ctx_t c;

    if ((r->flags & NEEDS_NO_GPU) && vpmm_driver_cuda_device_count() > 0)
        skip();
    memset(&c, 0, sizeof c);
    c.row = r;
    fixture_open(&c, r);
    if (r->setup != NULL)
        r->setup(&c);
    if (c.t.pool != NULL) {
        c.before = tsnap(c.t.pool);
        c.hc = host_counts(&c);
    }
    if (c.other.pool != NULL)
        c.other_before = tsnap(c.other.pool);
    for (int i = 0; i < MAX_CALLS && r->calls[i].op != OP_END; i++) {
        if (r->calls[i].op != OP_THEN) {
            make_call(&c, i);
            continue;
        }
        if (r->calls[i].then != NULL)
            r->calls[i].then(&c);
        c.before = tsnap(c.t.pool); /* THEN steps are for rows with a pool */
        c.hc = host_counts(&c);
    }
    if (r->check != NULL)
        r->check(&c);
    if (c.t.pool != NULL && r->after != EFFECT) {
        if (r->after == UNCHANGED)
            unchanged(&c);
        else
            same(&c);
    }
    if (c.other.pool != NULL) {
        tsnap_t now = tsnap(c.other.pool);
        assert_snap_equal(&c.other_before, &now); /* the other pool is untouched too */
    }
    if (r->undo != NULL)
        r->undo(&c);
    fixture_close(&c);
}

/* ---- what rows set up and check -------------------------------------------------------------- */

static void begin_cs(ctx_t *c)
{
    tcapture_begin(&c->t, c->gp, c->cs);
}

static void end_cs(ctx_t *c)
{
    assert_int_equal(vpmm_graph_destroy(c->t.pool, tcapture_end(&c->t, c->cs)), VPMM_SUCCESS);
}

static void cs_capturing(ctx_t *c)
{
    assert_int_equal(tcapture_status(&c->t, c->cs, NULL), VPMM_CAPTURE_ACTIVE);
}

static void cs_not_capturing(ctx_t *c)
{
    assert_int_equal(tcapture_status(&c->t, c->cs, NULL), VPMM_CAPTURE_NONE); /* not begun */
}

static void no_capture_begun(ctx_t *c)
{
    assert_int_equal(tgp_stats(c->gp).captures, 0);
}

static void no_graph(ctx_t *c)
{
    assert_int_equal(tgp_stats(c->gp).graphs, 0);
}

static void new_gp(ctx_t *c)
{
    c->gp = tgp_create(&c->t);
}

static void new_s_and_gp(ctx_t *c)
{
    c->s = vpmm_host_stream_create(c->t.host);
    c->gp = tgp_create(&c->t);
}

/* joined joins cs's capture through an event (c->ev). */
static void join_cs(ctx_t *c)
{
    c->joined = vpmm_host_stream_create(c->t.host);
    assert_int_equal(c->t.host->event_create(c->t.host, NULL, &c->ev), VPMM_DRV_OK);
    assert_int_equal(c->t.host->event_record(c->t.host, c->ev, c->cs), VPMM_DRV_OK);
    assert_int_equal(c->t.host->stream_wait_event(c->t.host, c->joined, c->ev), VPMM_DRV_OK);
}

static void end_cs_and_event(ctx_t *c)
{
    end_cs(c);
    assert_int_equal(c->t.host->event_destroy(c->t.host, c->ev), VPMM_DRV_OK);
}

/* NULL arguments: an external capture on s, begun between the calls that name cs and those that
 * name s. */
static void begin_external_on_s(ctx_t *c)
{
    assert_int_equal(vpmm_host_begin_capture(c->t.host, c->s, &c->id), VPMM_DRV_OK);
}

static void capture_on_s_goes_on(ctx_t *c)
{
    tsnap_t now = tsnap(c->t.pool);
    assert_int_equal(tcapture_status(&c->t, c->cs, NULL), VPMM_CAPTURE_NONE);
    assert_int_equal(tcapture_status(&c->t, c->s, NULL), VPMM_CAPTURE_ACTIVE); /* it goes on */
    assert_snap_equal(&c->before, &now); /* no graph pool was made for the capture */
    assert_int_equal(vpmm_host_end_capture(c->t.host, c->s), VPMM_DRV_OK);
}

/* Sizes: a graph pool may reserve a chunk larger than its usual one for one large request, but
 * the limit is the pool's VA chunk size all the same. */
static void new_cs_and_gp(ctx_t *c)
{
    c->cs = vpmm_host_stream_create(c->t.host);
    c->gp = tgp_create(&c->t);
}

static void graph_pool_made_nothing(ctx_t *c)
{
    assert_int_equal(tgp_stats(c->gp).mallocs, 0);
}

static void end_cs_then_one_chunk(ctx_t *c)
{
    end_cs(c);
    tfree(c->t.pool, tmalloc(c->t.pool, 256 * MiB, NULL)); /* exactly one chunk is fine */
}

/* Bad pointers. */
static void freed_a_b_priv(ctx_t *c)
{
    c->a = tmalloc(c->t.pool, 5 * MiB, c->s);
    c->b = tmalloc(c->t.pool, 4096, c->s);
    tfree(c->t.pool, c->a); /* shared blocks freed on s (cached or coalesced) */
    tfree(c->t.pool, c->b);
    begin_cs(c);
    c->priv = tmalloc(c->t.pool, 8192, c->cs);
    tfree(c->t.pool, c->priv); /* a graph pool's, pending until the capture ends */
}

/* The other pool's shared allocation, and one of its graph pool's (G on os). */
static void other_pool_allocations(ctx_t *c)
{
    vpmm_stream_t os;
    open_other(c);
    os = vpmm_host_stream_create(c->other.host);
    c->their = tmalloc(c->other.pool, 4096, NULL);
    tcapture_begin(&c->other, c->theirs, os);
    c->their_priv = tmalloc(c->other.pool, 4096, os);
    c->og = tcapture_end(&c->other, os);
}

static void free_other_pool_allocations(ctx_t *c)
{
    tfree(c->other.pool, c->their);
    tfree(c->other.pool, c->their_priv);
    assert_int_equal(vpmm_graph_destroy(c->other.pool, c->og), VPMM_SUCCESS);
}

static void big_plus_1g_is_a_hole(ctx_t *c)
{
    /* 1 GiB past big: reserved VA of the pool's chunk, never mapped (a hole). */
    assert_int_equal(tregion_of(c->t.pool, (char *)c->big + 1 * GiB).state, VPMM_REGION_HOLE);
}

static void later_dropped_by_reapply(ctx_t *c)
{
    begin_cs(c);
    c->later = tmalloc(c->t.pool, 300 * KiB, c->cs); /* made after the checkpoint */
    c->g2 = tcapture_end(&c->t, c->cs);
    assert_int_equal(vpmm_checkpoint_reapply(c->gp, c->ck, NULL, 0), VPMM_SUCCESS);
}

/* Frees during someone else's capture: out, freed, is its graph pool's, pending on cs. */
static void out_pending_on_cs(ctx_t *c, unsigned pool)
{
    vpmm_region_info_t r = tregion_of(c->t.pool, c->out);
    assert_int_equal(r.state, VPMM_REGION_FREE);
    assert_int_equal(r.pool, pool); /* still its graph pool's */
    assert_false(r.ready);          /* pending on its allocation stream ... */
    assert_ptr_equal(r.stream, c->cs);
}

/* A graph pool's allocation is freed while ANOTHER stream captures into ANOTHER graph pool: the
 * free is stream-ordered on its own allocation stream (pending until that stream's next marker),
 * stays in its graph pool, and the capture neither sees it nor is disturbed. */
static void other_stream_captures_elsewhere(ctx_t *c)
{
    c->s2 = vpmm_host_stream_create(c->t.host);
    c->gp2 = tgp_create(&c->t);
    tcapture_begin(&c->t, c->gp2, c->s2);
    tcapture_status(&c->t, c->s2, &c->id);
    c->gs1 = tgp_stats(c->gp);
    c->gs2 = tgp_stats(c->gp2);
    c->stats = tstats(c->t.pool);
    c->forbidden = tcapture_forbidden_calls(&c->t);
}

static void freed_on_cs_unseen_by_the_capture(ctx_t *c)
{
    vpmm_graph_pool_stats_t g1 = tgp_stats(c->gp), g2 = tgp_stats(c->gp2);
    vpmm_stats_t after = tstats(c->t.pool);
    uint64_t id;
    void *y;
    CHECK_POOL(c->t.pool);
    out_pending_on_cs(c, c->gs1.id); /* ... cs, not the capturing s2 */
    assert_int_equal(g1.frees, c->gs1.frees + 1);
    assert_int_equal(g1.live_allocs, c->gs1.live_allocs - 1);
    assert_memory_equal(&g2, &c->gs2, sizeof g2);
    assert_int_equal(after.frees, c->stats.frees + 1);
    assert_int_equal(after.live_bytes, c->stats.live_bytes - 100 * KiB);
    /* The capture goes on, undisturbed: no event, wait or sync was made, and its mallocs are
     * served by its own graph pool, never from the memory just freed. */
    assert_int_equal(tcapture_forbidden_calls(&c->t), c->forbidden);
    assert_int_equal(tcapture_status(&c->t, c->s2, &id), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(id, c->id);
    y = tmalloc(c->t.pool, 100 * KiB, c->s2);
    assert_ptr_not_equal(y, c->out);
    assert_int_equal(tregion_of(c->t.pool, y).pool, g2.id);
    tfree(c->t.pool, y);
    assert_int_equal(vpmm_graph_destroy(c->t.pool, tcapture_end(&c->t, c->s2)), VPMM_SUCCESS);
    release(c->gp2);
    c->gp2 = NULL;
    tfree(c->t.pool, tmalloc(c->t.pool, 4096, NULL));
    c->out = NULL;
}

/* A graph pool's allocation freed while its own allocation stream is capturing into ANOTHER graph
 * pool: the free is not part of that capture (it is not of its graph pool), so it is an ordinary
 * stream-ordered free, pending until the stream's next marker; no marker can be recorded while
 * the stream is captured, and that capture does not reuse the memory. */
static void cs_captures_elsewhere(ctx_t *c)
{
    c->gp2 = tgp_create(&c->t);
    tcapture_begin(&c->t, c->gp2, c->cs); /* out was allocated on cs, by G1's capture into gp */
    c->forbidden = tcapture_forbidden_calls(&c->t);
}

static void freed_on_cs_unseen_by_its_capture(ctx_t *c)
{
    void *y;
    CHECK_POOL(c->t.pool);
    out_pending_on_cs(c, tgp_stats(c->gp).id);
    y = tmalloc(c->t.pool, 100 * KiB, c->cs); /* gp2's, not out */
    assert_ptr_not_equal(y, c->out);
    assert_int_equal(tregion_of(c->t.pool, y).pool, tgp_stats(c->gp2).id);
    assert_int_equal(tcapture_forbidden_calls(&c->t), c->forbidden);
    assert_int_equal(tcapture_status(&c->t, c->cs, NULL), VPMM_CAPTURE_ACTIVE);
    tfree(c->t.pool, y);
    end_cs(c);
    release(c->gp2);
    c->gp2 = NULL;
    c->out = NULL;
}

/* The same, while the other stream captures into the SAME graph pool: still pending on the
 * allocation stream (only frees made inside a capture of the pool are capture-pending), so the
 * capture on the other stream does not reuse it. */
static void other_stream_captures_into_gp(ctx_t *c)
{
    c->s2 = vpmm_host_stream_create(c->t.host);
    tcapture_begin(&c->t, c->gp, c->s2);
    c->forbidden = tcapture_forbidden_calls(&c->t);
}

static void freed_on_cs_unseen_by_the_capture_into_gp(ctx_t *c)
{
    void *y;
    CHECK_POOL(c->t.pool);
    out_pending_on_cs(c, tgp_stats(c->gp).id);
    y = tmalloc(c->t.pool, 100 * KiB, c->s2);
    assert_ptr_not_equal(y, c->out);
    assert_int_equal(tcapture_forbidden_calls(&c->t), c->forbidden);
    assert_int_equal(tcapture_status(&c->t, c->s2, NULL), VPMM_CAPTURE_ACTIVE);
    tfree(c->t.pool, y);
    assert_int_equal(vpmm_graph_destroy(c->t.pool, tcapture_end(&c->t, c->s2)), VPMM_SUCCESS);
    /* Still pending on cs after that capture: it waits for cs's marker, not for captures. */
    out_pending_on_cs(c, tgp_stats(c->gp).id);
    c->out = NULL;
}

/* A shared allocation freed while its stream is being captured by someone else (a capture begun
 * outside vpmm, e.g. torch.cuda.graph): it is stream-ordered on that stream like any free — the
 * memory stays in the shared pool, pending on the stream; the capture's own mallocs come from
 * its graph pool, never from it; no marker is recorded on the stream while it is captured, so
 * other streams cannot take it during the capture; after the capture the stream reuses it at
 * once. (A graph that used it must not be replayed after that: it was freed.) */
static void x_in_use_on_captured_s(ctx_t *c)
{
    c->s2 = vpmm_host_stream_create(c->t.host);
    c->x = tmalloc(c->t.pool, 5 * MiB, c->s);
    vpmm_host_enqueue(c->t.host, c->s); /* a kernel using x, still running */
    assert_int_equal(vpmm_host_begin_capture(c->t.host, c->s, &c->id), VPMM_DRV_OK);
    c->stats = tstats(c->t.pool);
    c->records = vpmm_fault_calls(c->t.fault, VPMM_DRV_EVENT_RECORD);
}

static void x_pending_on_s(ctx_t *c)
{
    vpmm_region_info_t r = tregion_of(c->t.pool, c->x);
    assert_int_equal(r.state, VPMM_REGION_FREE);
    assert_int_equal(r.pool, 0);
    assert_false(r.ready);
    assert_ptr_equal(r.stream, c->s);
}

static void x_stream_ordered_on_s(ctx_t *c)
{
    vpmm_stats_t after = tstats(c->t.pool);
    void *y, *z, *w;
    CHECK_POOL(c->t.pool);
    assert_int_equal(after.frees, c->stats.frees + 1);
    assert_int_equal(after.graph_pools, c->stats.graph_pools); /* nothing private happened */
    x_pending_on_s(c);
    /* The capture's malloc of the same size comes from its graph pool. */
    y = tmalloc(c->t.pool, 5 * MiB, c->s);
    assert_ptr_not_equal(y, c->x);
    assert_true(tregion_of(c->t.pool, y).pool != 0);
    /* Another stream's malloc (a slow path: it polls and marks streams) does not get it. */
    z = tmalloc(c->t.pool, 5 * MiB, c->s2);
    assert_ptr_not_equal(z, c->x);
    assert_int_equal(vpmm_fault_calls(c->t.fault, VPMM_DRV_EVENT_RECORD), c->records);
    assert_int_equal(tcapture_status(&c->t, c->s, NULL), VPMM_CAPTURE_ACTIVE);
    x_pending_on_s(c);
    tfree(c->t.pool, y);
    assert_int_equal(vpmm_host_end_capture(c->t.host, c->s), VPMM_DRV_OK);
    /* After the capture, its stream reuses it at once (stream order). */
    w = tmalloc(c->t.pool, 5 * MiB, c->s);
    assert_ptr_equal(w, c->x);
    tfree(c->t.pool, w);
    tfree(c->t.pool, z);
}

/* Captures: stream 0 of a program built with per-thread default streams is the calling thread's
 * own stream: it can be captured (not refused as the legacy stream), and its allocations come
 * from the graph pool. */
static void stream_zero_allocates_from_gp(ctx_t *c)
{
    assert_int_equal(tgp_stats(c->gp).captures, 1);
    c->a = tmalloc(c->t.pool, 4096, NULL);
    assert_int_equal(tgp_stats(c->gp).live_allocs, 1);
}

static void free_a_destroy_graph(ctx_t *c)
{
    tfree(c->t.pool, c->a);
    assert_int_equal(vpmm_graph_destroy(c->t.pool, c->o.g), VPMM_SUCCESS);
}

/* The per-thread handle names the calling thread's own stream: another thread cannot end (or
 * release) a capture of this thread's per-thread stream through it — its own is not capturing. */
static void per_thread_stream_captured(ctx_t *c)
{
    new_gp(c);
    tcapture_begin(&c->t, c->gp, VPMM_STREAM_PER_THREAD);
    c->a = tmalloc(c->t.pool, 4096, VPMM_STREAM_PER_THREAD);
}

static void capture_goes_on(ctx_t *c)
{
    assert_int_equal(tgp_stats(c->gp).captures, 1);
}

static void end_per_thread_capture(ctx_t *c)
{
    tfree(c->t.pool, c->a);
    assert_int_equal(vpmm_graph_destroy(c->t.pool, tcapture_end(&c->t, VPMM_STREAM_PER_THREAD)),
                     VPMM_SUCCESS);
}

static void three_captures(ctx_t *c)
{
    c->ext = vpmm_host_stream_create(c->t.host);
    begin_cs(c); /* by vpmm */
    tcapture_status(&c->t, c->cs, &c->id);
    join_cs(c);
    /* ext: begun outside vpmm. */
    assert_int_equal(vpmm_host_begin_capture(c->t.host, c->ext, &c->ext_id), VPMM_DRV_OK);
}

static void three_captures_go_on(ctx_t *c)
{
    uint64_t id;
    /* Every capture goes on as it was. */
    assert_int_equal(tcapture_status(&c->t, c->cs, &id), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(id, c->id);
    assert_int_equal(tcapture_status(&c->t, c->joined, &id), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(id, c->id);
    assert_int_equal(tcapture_status(&c->t, c->ext, &id), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(id, c->ext_id);
    assert_int_equal(tgp_stats(c->gp).captures, 1);
}

static void end_three_captures(ctx_t *c)
{
    assert_int_equal(vpmm_host_end_capture(c->t.host, c->ext), VPMM_DRV_OK);
    end_cs_and_event(c);
}

static void theirs_not_begun(ctx_t *c)
{
    cs_not_capturing(c);
    assert_int_equal(tgp_stats(c->theirs).captures, 0);
}

/* cudaStreamEndCapture on a stream that joined a capture but did not begin it is refused by the
 * driver; vpmm reports the driver's refusal, and the capture goes on. */
static void cs_captured_and_joined(ctx_t *c)
{
    begin_cs(c);
    join_cs(c);
}

static void driver_refused_capture_goes_on(ctx_t *c)
{
    int code;
    const char *call;
    assert_int_equal(vpmm_pool_last_driver_error(c->t.pool, &code, &call), VPMM_SUCCESS);
    assert_int_equal(code, 903);
    assert_string_equal(call, "cuStreamEndCapture");
    assert_int_equal(tcapture_status(&c->t, c->cs, NULL), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(tcapture_status(&c->t, c->joined, NULL), VPMM_CAPTURE_ACTIVE);
    assert_int_equal(tgp_stats(c->gp).captures, 1);
}

static void other_pool_and_external_capture_on_cs(ctx_t *c)
{
    open_other(c);
    assert_int_equal(vpmm_host_begin_capture(c->t.host, c->cs, &c->id), VPMM_DRV_OK);
}

static void theirs_not_registered(ctx_t *c)
{
    assert_int_equal(tgp_stats(c->theirs).captures, 0);
    cs_capturing(c);
}

static void end_external_capture_on_cs(ctx_t *c)
{
    assert_int_equal(vpmm_host_end_capture(c->t.host, c->cs), VPMM_DRV_OK);
}

static void cs_served_by_gp(ctx_t *c)
{
    c->mine = tgp_create(&c->t);
    begin_cs(c); /* served by gp */
    snprintf(c->want, sizeof c->want, "is already served by graph pool g%u", tgp_stats(c->gp).id);
}

/* A capture begun outside vpmm that already allocated: its first malloc gave it a graph pool of
 * its own, so registering it afterwards is too late. */
static void external_capture_that_allocated(ctx_t *c)
{
    void *p;
    assert_int_equal(tgp_stats(c->mine).captures, 0);
    assert_int_equal(tgp_stats(c->gp).captures, 1);
    unchanged(c);
    p = tmalloc(c->t.pool, 4096, c->cs); /* still served by gp */
    assert_int_equal(tregion_of(c->t.pool, p).pool, tgp_stats(c->gp).id);
    tfree(c->t.pool, p);
    end_cs(c);
    assert_int_equal(vpmm_host_begin_capture(c->t.host, c->s, &c->id), VPMM_DRV_OK);
    c->a = tmalloc(c->t.pool, 4096, c->s);
    snprintf(c->want, sizeof c->want, "is already served by graph pool g%u",
             tregion_of(c->t.pool, c->a).pool);
}

static void mine_not_registered(ctx_t *c)
{
    assert_int_equal(tgp_stats(c->mine).captures, 0);
}

static void end_external_capture_on_s(ctx_t *c)
{
    tfree(c->t.pool, c->a);
    assert_int_equal(vpmm_host_end_capture(c->t.host, c->s), VPMM_DRV_OK);
}

/* Graph pools: a release with no handle reference left is refused — as long as the graph pool
 * still exists (a graph keeps it). Once nothing references it, it is freed and the handle
 * dangles: a further release is a use after free, as with free(3). */
static void gp_kept_by_g1_only(ctx_t *c)
{
    assert_int_equal(vpmm_graph_pool_retain(c->gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(c->gp), VPMM_SUCCESS);
    assert_int_equal(vpmm_graph_pool_release(c->gp), VPMM_SUCCESS); /* G1 keeps it alive */
    assert_int_equal(tgp_stats(c->gp).graphs, 1);
    snprintf(c->want, sizeof c->want,
             "vpmm_graph_pool_release: graph pool g%u has no handle reference",
             tgp_stats(c->gp).id);
}

static void g1_keeps_gp(ctx_t *c)
{
    assert_int_equal(tgp_stats(c->gp).graphs, 1);
}

static void retain_gp(ctx_t *c)
{
    /* Take a handle again for fixture_close's release. */
    assert_int_equal(vpmm_graph_pool_retain(c->gp), VPMM_SUCCESS);
}

/* Checkpoints. */
static void mine_and_theirs(ctx_t *c)
{
    open_other(c);
    c->mine = tgp_create(&c->t);
    snprintf(c->want, sizeof c->want, "the checkpoint is of graph pool g%u, not g%u",
             tgp_stats(c->gp).id, tgp_stats(c->mine).id);
}

/* Captured into by a capture begun elsewhere and registered. */
static void gp_captured_on_s2(ctx_t *c)
{
    c->s2 = vpmm_host_stream_create(c->t.host);
    tcapture_register(&c->t, c->gp, c->s2);
    c->a = tmalloc(c->t.pool, 4096, c->s2);
}

static void s2_capturing(ctx_t *c)
{
    assert_int_equal(tcapture_status(&c->t, c->s2, NULL), VPMM_CAPTURE_ACTIVE);
}

static void end_capture_on_s2(ctx_t *c)
{
    tfree(c->t.pool, c->a);
    assert_int_equal(vpmm_host_end_capture(c->t.host, c->s2), VPMM_DRV_OK);
}

static void later_made_after_ck(ctx_t *c)
{
    begin_cs(c);
    c->later = tmalloc(c->t.pool, 4096, c->cs); /* an allocation of the graph pool, made after */
    c->g2 = tcapture_end(&c->t, c->cs);
}

static void free_later(ctx_t *c)
{
    tfree(c->t.pool, c->later);
}

/* A graph with a checkpoint whose allocation a (8 MiB) is freed; keep (1 MiB) is live. */
static void checkpoint_of_a(ctx_t *c)
{
    new_s_and_gp(c);
    tcapture_begin(&c->t, c->gp, c->s);
    c->keep = tmalloc(c->t.pool, 1 * MiB, c->s);
    c->a = tmalloc(c->t.pool, 8 * MiB, c->s);
    c->g = tcapture_end(&c->t, c->s);
    c->ck = tcheckpoint_take(c->gp);
    tfree(c->t.pool, c->a);
}

/* The graph dies, and the shared pool takes a's pages from the idle graph pool. */
static void a_unmapped(ctx_t *c)
{
    checkpoint_of_a(c);
    assert_int_equal(vpmm_graph_destroy(c->t.pool, c->g), VPMM_SUCCESS);
    c->g = NULL;
    c->x = tmalloc(c->t.pool, 14 * MiB, NULL);
    assert_true(tgp_stats(c->gp).mapped_bytes < 8 * MiB);
}

/* The way out: list the unmapped allocation as dead. */
static void reapply_with_a_dead(ctx_t *c)
{
    assert_int_equal(vpmm_checkpoint_reapply(c->gp, c->ck, &c->a, 1), VPMM_SUCCESS);
    CHECK_POOL(c->t.pool);
    tfree(c->t.pool, c->x);
    tfree(c->t.pool, c->keep);
    tfree(c->t.pool, tmalloc(c->t.pool, 4096, NULL));
}

/* Destroy. */
static void g_holds_gp_alone(ctx_t *c)
{
    new_s_and_gp(c);
    tcapture_begin(&c->t, c->gp, c->s);
    tfree(c->t.pool, tmalloc(c->t.pool, 4096, c->s));
    c->g = tcapture_end(&c->t, c->s);
    release(c->gp); /* only the graph holds it */
    c->gp = NULL;
}

/* During a capture into a graph pool whose handle is held: the graph being captured holds it. */
static void capture_on_s(ctx_t *c)
{
    new_s_and_gp(c);
    tcapture_begin(&c->t, c->gp, c->s);
    c->a = tmalloc(c->t.pool, 4096, c->s);
}

static void capture_on_s_undisturbed(ctx_t *c)
{
    assert_int_equal(tcapture_status(&c->t, c->s, NULL), VPMM_CAPTURE_ACTIVE); /* undisturbed */
    assert_int_equal(tgp_stats(c->gp).captures, 1);
}

static void end_capture_on_s(ctx_t *c)
{
    tfree(c->t.pool, c->a);
    assert_int_equal(vpmm_graph_destroy(c->t.pool, tcapture_end(&c->t, c->s)), VPMM_SUCCESS);
}

/* Streams: a stream the pool never saw: nothing to forget; a no-op that succeeds (one capture
 * query each: a stream being captured would be refused). */
static void stream_never_seen(ctx_t *c)
{
    c->never = vpmm_host_stream_create(c->t.host);
}

/* Found by the table: the stream release during a capture, once with a live allocation on the
 * stream and once without, in one graph pool. Each capture is on a new stream s2, with a free
 * inside it that is capture-pending (for the capture's stream only). */
static void capture_on_new_stream(ctx_t *c)
{
    c->s2 = vpmm_host_stream_create(c->t.host);
    tcapture_begin(&c->t, c->gp, c->s2);
    if (c->a == NULL)
        c->a = tmalloc(c->t.pool, 4096, c->s2); /* the first: the stream has a live allocation */
    c->tmp = tmalloc(c->t.pool, 8192, c->s2);
    tfree(c->t.pool, c->tmp);
}

static void gp_and_capture_on_new_stream(ctx_t *c)
{
    new_gp(c);
    capture_on_new_stream(c);
}

static void release_refused_capture_goes_on(ctx_t *c)
{
    vpmm_graph_pool_t *served = NULL;
    void *b;
    same(c);
    assert_false(tregion_of(c->t.pool, c->tmp).ready); /* still for this capture's stream only */
    assert_int_equal(tgp_stats(c->gp).captures, 1);    /* the capture goes on */
    b = tmalloc(c->t.pool, 4096, c->s2);
    assert_int_equal(vpmm_capture_graph_pool(c->t.pool, c->s2, &served), VPMM_SUCCESS);
    assert_ptr_equal(served, c->gp); /* still served by the graph pool it was begun with */
    tfree(c->t.pool, b);
    assert_int_equal(vpmm_graph_destroy(c->t.pool, tcapture_end(&c->t, c->s2)), VPMM_SUCCESS);
    release(served);
    assert_int_equal(vpmm_stream_release(c->t.pool, c->s2), VPMM_SUCCESS); /* after the end */
    CHECK_POOL(c->t.pool);
}

static void free_a(ctx_t *c)
{
    tfree(c->t.pool, c->a);
}

/* The legacy stream's last marker would be legacy-stream work, which invalidates the capture of
 * a blocking stream: while any capture is in progress, releasing it (with frees unmarked) is
 * refused, before anything changes. */
static void legacy_frees_unmarked_during_capture(ctx_t *c)
{
    tfree(c->t.pool, tmalloc(c->t.pool, 5000, NULL)); /* cached on the legacy stream */
    c->s2 = vpmm_host_stream_create(c->t.host);
    tcapture_begin(&c->t, c->gp, c->s2);
}

static void same_then_end_capture(ctx_t *c)
{
    same(c);
    c->g2 = tcapture_end(&c->t, c->s2);
}

/* A capture whose graph pool has no handle: only the capture's graph holds it. */
static void handleless_capture_on_s(ctx_t *c)
{
    c->s = vpmm_host_stream_create(c->t.host);
    tcapture_begin(&c->t, NULL, c->s);
    c->a = tmalloc(c->t.pool, 4096, c->s);
}

static void s_capturing(ctx_t *c)
{
    assert_int_equal(tcapture_status(&c->t, c->s, NULL), VPMM_CAPTURE_ACTIVE); /* undisturbed */
}

/* a unmapped as above, but with the stream released first (s is going away). */
static void a_unmapped_stream_released(ctx_t *c)
{
    checkpoint_of_a(c);
    tfree(c->t.pool, c->keep);
    assert_int_equal(vpmm_graph_destroy(c->t.pool, c->g), VPMM_SUCCESS);
    c->g = NULL;
    assert_int_equal(vpmm_stream_release(c->t.pool, c->s), VPMM_SUCCESS);
    c->x = tmalloc(c->t.pool, 14 * MiB, NULL); /* takes a's pages from the idle graph pool */
}

/* test_env_unknown_name: once the name is right, the same variable makes the cap it meant. */
static void right_name_sets_the_cap(ctx_t *c)
{
    vpmm_config_t cfg;
    vpmm_pool_t *pool = NULL;
    (void)c;
    vpmm_config_init(&cfg);
    cfg.backend = VPMM_BACKEND_HOST;
    assert_int_equal(setenv("VPMM_MAX_BYTES", "4M", 1), 0);
    assert_int_equal(vpmm_pool_create(&cfg, &pool), VPMM_SUCCESS);
    assert_int_equal(unsetenv("VPMM_MAX_BYTES"), 0);
    assert_true(tstats(pool).max_bytes == 4 * MiB);
    tfree(pool, tmalloc(pool, 4096, NULL));
    assert_int_equal(vpmm_pool_destroy(pool), VPMM_SUCCESS);
}

static void free_x(ctx_t *c)
{
    tfree(c->t.pool, c->x);
}

/* ---- several devices and processes ----------------------------------------------------------- */

static size_t open_fds(void)
{
    size_t n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

/* A bare view of device `device` of the pool's host node (what a kernel there may touch). */
static vpmm_driver_t *view_of(ctx_t *c, int device)
{
    vpmm_driver_t *v = NULL;
    assert_int_equal(vpmm_host_open_device(c->t.host, device, &v), VPMM_DRV_OK);
    return v;
}

/* No device but the pool's own reaches its memory: no peer recorded, no grant made, and for
 * every other device of the node vpmm_host_can_access stays 0 (a kernel there would fault). */
static void no_peer(ctx_t *c)
{
    vpmm_stats_t s = tstats(c->t.pool);
    assert_int_equal(s.peers, 0);
    assert_int_equal(s.peer_grants, 0);
    for (int dev = 0; dev < c->t.host->device_count; dev++) {
        vpmm_driver_t *v = view_of(c, dev);
        int own = dev == c->t.host->device;
        assert_int_equal(vpmm_host_can_access(v, (uintptr_t)c->big, 3 * MiB), own);
        assert_int_equal(vpmm_host_can_access(v, (uintptr_t)c->small, 1000), own);
        v->close(v);
    }
}

/* The isolated device 2 of the node has a pool too (other, a sibling of t), with their. */
static void pool_on_isolated_device(ctx_t *c)
{
    tpool_open_sibling(&c->other, &c->t, 2, &(tpool_params_t){ .va_size = 4 * GiB });
    c->their = tmalloc(c->other.pool, 2 * MiB, NULL);
}

/* Neither pool granted anything: device 2 does not reach t's memory, device 0 not other's. */
static void no_peer_either_way(ctx_t *c)
{
    vpmm_stats_t s = tstats(c->other.pool);
    no_peer(c);
    assert_int_equal(s.peers, 0);
    assert_int_equal(s.peer_grants, 0);
    assert_false(vpmm_host_can_access(c->t.host, (uintptr_t)c->their, 2 * MiB));
    assert_true(vpmm_host_can_access(c->other.host, (uintptr_t)c->their, 2 * MiB));
}

static void free_their(ctx_t *c)
{
    tfree(c->other.pool, c->their);
}

/* Granting the own device changed nothing (THEN); device 1 is granted for the next calls. */
static void same_then_grant_device_1(ctx_t *c)
{
    same(c);
    assert_int_equal(vpmm_pool_grant_access(c->t.pool, 1), VPMM_SUCCESS);
    CHECK_POOL(c->t.pool);
    c->stats = tstats(c->t.pool);
    assert_int_equal(c->stats.peers, 2); /* bit 1 */
    assert_true(c->stats.peer_grants > 0);
}

/* Device 1 is still the one peer, granted once (peer_grants as after the grant), and reaches
 * the memory; the own device is no bit of `peers`. */
static void device_1_granted_once(ctx_t *c)
{
    vpmm_stats_t s = tstats(c->t.pool);
    vpmm_driver_t *v = view_of(c, 1);
    assert_int_equal(s.peers, 2);
    assert_int_equal(s.peer_grants, c->stats.peer_grants);
    assert_true(vpmm_host_can_access(v, (uintptr_t)c->big, 3 * MiB));
    assert_true(vpmm_host_can_access(v, (uintptr_t)c->small, 1000));
    v->close(v);
}

/* NULL arguments: a segment hook the pool keeps hearing through (a NULL pool changes no pool's
 * hook), until the row's last call takes it away. */
static void segment_hook_set(ctx_t *c)
{
    assert_int_equal(vpmm_pool_set_segment_hook(c->t.pool, count_segment_event, &c->hooked),
                     VPMM_SUCCESS);
}

/* A growth: new segments; c->hooked counts the events the hook hears of meanwhile. */
static void grow(ctx_t *c, size_t size)
{
    c->hooked = 0;
    tfree(c->t.pool, tmalloc(c->t.pool, size, NULL));
}

static void hook_still_hears(ctx_t *c)
{
    same(c);
    grow(c, 8 * MiB);
    assert_true(c->hooked > 0);
}

static void hook_gone(ctx_t *c)
{
    grow(c, 32 * MiB);
    assert_int_equal(c->hooked, 0);
}

/* The exporter: another pool (another process's, as far as the importer t can tell; small_bytes
 * 1: their and their2 share a page) with their shared: c->h is its handle, not opened yet. */
static size_t export_ok(ctx_t *c, void *p, unsigned char *buf)
{
    size_t len = 0;
    vpmm_status_t st = vpmm_ipc_export(c->other.pool, p, buf, HANDLE_CAP, &len);
    if (st != VPMM_SUCCESS)
        fail_msg("vpmm_ipc_export: %s (%s)", vpmm_status_name(st), vpmm_last_error());
    return len;
}

static void *open_ok(ctx_t *c, const unsigned char *h, size_t len)
{
    void *q = NULL;
    vpmm_status_t st = vpmm_ipc_open(c->t.pool, h, len, &q);
    if (st != VPMM_SUCCESS)
        fail_msg("vpmm_ipc_open: %s (%s)", vpmm_status_name(st), vpmm_last_error());
    CHECK_POOL(c->t.pool);
    return q;
}

static void close_ok(ctx_t *c, void *q)
{
    assert_int_equal(vpmm_ipc_close(c->t.pool, q), VPMM_SUCCESS);
    CHECK_POOL(c->t.pool);
}

static void exporter_shares_their(ctx_t *c)
{
    tpool_open(&c->other, &(tpool_params_t){ .va_size = 4 * GiB, .small_bytes = 1 });
    c->their = tmalloc(c->other.pool, 1 * MiB, NULL);
    memset(c->their, 0x11, 1 * MiB);
    c->hlen = export_ok(c, c->their, c->h);
}

/* And their2, shared, opened here and closed: its handle is stale (each export is opened once). */
static void their2_stale(ctx_t *c)
{
    exporter_shares_their(c);
    c->their2 = tmalloc(c->other.pool, 1 * MiB, NULL);
    c->stale_len = export_ok(c, c->their2, c->stale);
    c->q2 = open_ok(c, c->stale, c->stale_len);
    close_ok(c, c->q2);
    c->fds = open_fds();
}

/* And their opened here (q). */
static void their_open_here(ctx_t *c)
{
    exporter_shares_their(c);
    c->q = open_ok(c, c->h, c->hlen);
}

/* And their2 opened too and closed again (q2): the mapping both are on stays, for q. */
static void their_open_their2_closed(ctx_t *c)
{
    their_open_here(c);
    c->their2 = tmalloc(c->other.pool, 1 * MiB, NULL);
    c->stale_len = export_ok(c, c->their2, c->stale);
    c->q2 = open_ok(c, c->stale, c->stale_len);
    assert_int_equal((char *)c->q2 - (char *)c->q, (char *)c->their2 - (char *)c->their);
    close_ok(c, c->q2);
    assert_int_equal(tstats(c->t.pool).ipc_imports, 1);
    c->fds = open_fds();
}

/* q (imported) and p (exported, 1 MiB) are one memory: each sees what the other wrote. */
static void aliases(void *q_, void *p_)
{
    unsigned char *q = q_, *p = p_;
    assert_int_equal(q[0], p[0]);
    q[4096] = 0x5c;
    assert_int_equal(p[4096], 0x5c);
    p[1 * MiB - 1] = 0xa7;
    assert_int_equal(q[1 * MiB - 1], 0xa7);
}

static void q_aliases_their(ctx_t *c)
{
    aliases(c->q, c->their);
}

/* Nothing was imported or taken: no mapping, no descriptor left open. */
static void nothing_imported(ctx_t *c)
{
    assert_int_equal(tstats(c->t.pool).ipc_imports, 0);
    assert_int_equal(tstats(c->t.pool).ipc_imported_bytes, 0);
    assert_int_equal(open_fds(), c->fds);
}

/* The refused opens took no share: their handle opens now (once), and maps their memory. */
static void h_opens_then_free_theirs(ctx_t *c)
{
    c->q = open_ok(c, c->h, c->hlen);
    q_aliases_their(c);
    close_ok(c, c->q);
    tfree(c->other.pool, c->their);
    tfree(c->other.pool, c->their2);
}

static void free_theirs(ctx_t *c)
{
    tfree(c->other.pool, c->their);
    tfree(c->other.pool, c->their2);
}

/* The stale row: their opens (the refusals took no share), on the page their2 is on. */
static void their_opens_on_their2s_page(ctx_t *c)
{
    same(c);
    assert_int_equal(open_fds(), c->fds);
    c->q = open_ok(c, c->h, c->hlen);
    q_aliases_their(c);
    c->fds = open_fds();
}

/* The stale handle was refused although its pages are mapped here: the mapping keeps its one
 * open (q), nothing else was added. */
static void only_q_imported(ctx_t *c)
{
    assert_int_equal(tstats(c->t.pool).ipc_imports, 1);
    assert_int_equal(open_fds(), c->fds);
    q_aliases_their(c);
}

static void close_q_free_theirs_both(ctx_t *c)
{
    close_ok(c, c->q);
    free_theirs(c);
}

static void close_q_free_their(ctx_t *c)
{
    close_ok(c, c->q);
    tfree(c->other.pool, c->their);
}

/* NULL arguments: their shared (c->h, not opened: for the NULL out), their2 open here (q). */
static void their_shared_their2_open(ctx_t *c)
{
    exporter_shares_their(c);
    c->their2 = tmalloc(c->other.pool, 2 * MiB, NULL); /* on two pages: a mapping of its own */
    c->stale_len = export_ok(c, c->their2, c->stale);
    c->q = open_ok(c, c->stale, c->stale_len);
    c->fds = open_fds();
}

/* Only their2 is mapped here: the NULL out made no mapping of their. */
static void only_their2_imported(ctx_t *c)
{
    assert_int_equal(tstats(c->t.pool).ipc_imports, 1);
    assert_int_equal(open_fds(), c->fds);
    aliases(c->q, c->their2);
}

static void close_q_free_theirs(ctx_t *c)
{
    close_ok(c, c->q);
    h_opens_then_free_theirs(c); /* their2's share was not taken by the refused open */
}

/* The close row: q still works after the refused closes; then it is closed (THEN). */
static void q_works_then_close_it(ctx_t *c)
{
    same(c);
    assert_int_equal(open_fds(), c->fds);
    q_aliases_their(c);
    close_ok(c, c->q);
    assert_int_equal(tstats(c->t.pool).ipc_imports, 0);
    c->fds = open_fds(); /* the host backend's imported handle held one; it is gone */
}

/* The length of big's handle: a header and an entry per physical handle big touches (segments
 * are the pool's handles at their live addresses). */
static int count_big_segments(const vpmm_segment_info_t *s, void *user)
{
    ctx_t *c = user;
    uintptr_t lo = (uintptr_t)c->big, hi = lo + 3 * MiB;
    if (s->addr < hi && s->addr + s->size > lo)
        c->need++;
    return 0;
}

static void big_handle_length(ctx_t *c)
{
    assert_int_equal(vpmm_pool_walk_segments(c->t.pool, count_big_segments, c), VPMM_SUCCESS);
    c->need = sizeof(vpmm_ipc_header_t) + c->need * sizeof(vpmm_ipc_entry_t);
    assert_int_equal(c->need, 128); /* two pages of 2 MiB: the rows' buffers are sized for it */
    snprintf(c->want, sizeof c->want, "vpmm_ipc_export: the handle takes %zu bytes", c->need);
    c->fds = open_fds();
}

/* Nothing was exported: no share counted, no descriptor made. */
static void nothing_exported(ctx_t *c)
{
    vpmm_stats_t s = tstats(c->t.pool);
    assert_int_equal(s.ipc_exports, 0);
    assert_int_equal(s.ipc_shared, 0);
    assert_int_equal(open_fds(), c->fds);
}

/* Bad pointers for vpmm_ipc_export and vpmm_ipc_unshare: a freed block (a) and another pool's
 * allocation (their, exported by nobody). */
static void freed_a_and_their(ctx_t *c)
{
    c->a = tmalloc(c->t.pool, 5 * MiB, c->s);
    tfree(c->t.pool, c->a);
    tpool_open(&c->other, &(tpool_params_t){ .va_size = 4 * GiB });
    c->their = tmalloc(c->other.pool, 4096, NULL);
    c->fds = open_fds();
}

/* ---- the table ------------------------------------------------------------------------------- */

#define BAD VPMM_ERROR_INVALID_ARGUMENT

static const row_t rows[] = {
    /* NULL arguments, one row per function (or family) */
    { "test_null_config_init",
      NO_POOL,
      .calls = { { OP_CONFIG_INIT, BAD, "vpmm_config_init: config is NULL" } } },
    { "test_null_pool_create",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          /* even a bad config: the NULL out is reported first */
          { OP_POOL_CREATE, BAD, "vpmm_pool_create: out_pool is NULL", .out = NULL_OUT,
            .cfg = { .defaults = 1, .backend = 7 } },
          { OP_POOL_CREATE, BAD, "out_pool is NULL", .out = NULL_OUT, .cfg = { .null = 1 } } } },
    { "test_null_pool_destroy",
      NO_POOL,
      .calls = { { OP_POOL_DESTROY, BAD, "vpmm_pool_destroy: pool is NULL", .pool = NULL_POOL } } },
    { "test_null_malloc",
      FX,
      .calls = {
          /* *out_ptr is NULL on every error */
          { OP_MALLOC, BAD, "vpmm_malloc: pool is NULL", .pool = NULL_POOL, .size = 64 },
          { OP_MALLOC, BAD, "vpmm_malloc: out_ptr is NULL", .size = 64, .stream = S_S,
            .out = NULL_OUT },
          { OP_MALLOC, BAD, "out_ptr is NULL", .size = 0, .out = NULL_OUT } } },
    { "test_null_free_pool",
      FX,
      .calls = {
          /* big stays live (fixture_close frees it) */
          { OP_FREE, BAD, "vpmm_free: pool is NULL", .pool = NULL_POOL, .ptr = P_BIG },
          { OP_FREE, BAD, "vpmm_free: pool is NULL", .pool = NULL_POOL } } },
    { "test_free_null_pointer",
      FX,
      /* free(3), cudaFree(0): the frees counter does not move either */
      .calls = { { OP_FREE, VPMM_SUCCESS, NULL } } },
    { "test_null_stream_release",
      FX,
      .calls = { { OP_STREAM_RELEASE, BAD, "vpmm_stream_release: pool is NULL",
                   .pool = NULL_POOL, .stream = S_S } } },
    { "test_null_trim",
      NO_POOL,
      .calls = {
          /* out_released untouched */
          { OP_TRIM, BAD, "vpmm_trim: pool is NULL", .pool = NULL_POOL },
          { OP_TRIM, BAD, "vpmm_trim: pool is NULL", .pool = NULL_POOL, .out = NULL_OUT } } },
    { "test_null_stats",
      FX,
      .calls = {
          { OP_GET_STATS, BAD, "vpmm_get_stats: pool is NULL", .pool = NULL_POOL },
          { OP_GET_STATS, BAD, "vpmm_get_stats: out_stats is NULL", .out = NULL_OUT },
          { OP_RESET_PEAK_STATS, BAD, "vpmm_reset_peak_stats: pool is NULL",
            .pool = NULL_POOL } } },
    { "test_null_walk_dump_check",
      FX,
      .calls = {
          { OP_POOL_WALK, BAD, "vpmm_pool_walk: pool is NULL", .pool = NULL_POOL },
          { OP_POOL_WALK, BAD, "vpmm_pool_walk: visit is NULL", .out = NULL_OUT },
          { OP_POOL_DUMP, BAD, "vpmm_pool_dump: pool is NULL", .pool = NULL_POOL },
          { OP_POOL_DUMP, BAD, "vpmm_pool_dump: out is NULL", .out = NULL_OUT },
          /* vpmm_pool_check returns a count, not a status: a NULL pool is one violation */
          { OP_POOL_CHECK, .pool = NULL_POOL, .out = NULL_OUT, .count = 1 },
          { OP_POOL_CHECK, .pool = NULL_POOL, .count = 1 } } },
    { "test_null_oom_report",
      FX,
      .calls = {
          { OP_OOM_REPORT, BAD, "vpmm_pool_oom_report: pool is NULL", .pool = NULL_POOL,
            .size = 16 },
          { OP_OOM_REPORT, BAD, "vpmm_pool_oom_report: buf is NULL", .size = 16,
            .out = NULL_OUT },
          /* len 0 asks for nothing: NULL is fine then, and a buffer is not written */
          { OP_OOM_REPORT, VPMM_SUCCESS, NULL, .size = 0, .out = NULL_OUT },
          { OP_OOM_REPORT, VPMM_SUCCESS, NULL, .size = 0, .flags = KEEPS_OUT } } },
    { "test_null_last_driver_error",
      FX,
      .calls = {
          { OP_LAST_DRIVER_ERROR, BAD, "vpmm_pool_last_driver_error: NULL argument",
            .pool = NULL_POOL },
          { OP_LAST_DRIVER_ERROR, BAD, "vpmm_pool_last_driver_error: NULL argument",
            .out = NULL_OUT },
          { OP_LAST_DRIVER_ERROR, BAD, "vpmm_pool_last_driver_error: NULL argument",
            .out = NULL_OUT2 },
          { OP_BACKEND_NAME, .pool = NULL_POOL, .text = NULL } } }, /* a pointer result: NULL */
    { "test_null_graph_pool_calls",
      GFX,
      .calls = {
          { OP_GRAPH_POOL_CREATE, BAD, "vpmm_graph_pool_create: pool is NULL", .pool = NULL_POOL,
            .out = NULL_OUT },
          { OP_GRAPH_POOL_CREATE, BAD, "vpmm_graph_pool_create: out_graph_pool is NULL",
            .out = NULL_OUT },
          { OP_GRAPH_POOL_RETAIN, BAD, "vpmm_graph_pool_retain: graph_pool is NULL",
            .gp = NULL_GP },
          { OP_GRAPH_POOL_RELEASE, BAD, "vpmm_graph_pool_release: graph_pool is NULL",
            .gp = NULL_GP },
          { OP_GRAPH_POOL_STATS, BAD, "vpmm_graph_pool_stats: graph_pool is NULL", .gp = NULL_GP },
          { OP_GRAPH_POOL_STATS, BAD, "vpmm_graph_pool_stats: out_stats is NULL",
            .out = NULL_OUT },
          { OP_GRAPH_POOL_RESET_PEAK_STATS, BAD,
            "vpmm_graph_pool_reset_peak_stats: graph_pool is NULL", .gp = NULL_GP } } },
    { "test_null_capture_calls",
      GFX,
      .calls = {
          { OP_CAPTURE_BEGIN, BAD, "vpmm_capture_begin: pool is NULL", .pool = NULL_POOL,
            .stream = S_CS },
          { OP_CAPTURE_END, BAD, "vpmm_capture_end: pool is NULL", .pool = NULL_POOL,
            .stream = S_CS, .out = NULL_OUT },
          { OP_CAPTURE_REGISTER, BAD, "vpmm_capture_register: pool is NULL", .pool = NULL_POOL,
            .stream = S_CS },
          { OP_CAPTURE_GRAPH_POOL, BAD, "vpmm_capture_graph_pool: pool is NULL",
            .pool = NULL_POOL, .stream = S_CS, .out = NULL_OUT },
          { OP_GRAPH_DESTROY, BAD, "vpmm_graph_destroy: pool is NULL", .pool = NULL_POOL },
          { OP_GRAPH_DESTROY, BAD, "vpmm_graph_destroy: graph is NULL", .graph = NULL_GRAPH },
          /* NULL out pointers and graph pools, on a stream that is being captured */
          THEN(begin_external_on_s),
          { OP_CAPTURE_END, BAD, "vpmm_capture_end: out_graph is NULL", .stream = S_S,
            .out = NULL_OUT },
          { OP_CAPTURE_REGISTER, BAD, "vpmm_capture_register: graph_pool is NULL", .gp = NULL_GP,
            .stream = S_S },
          { OP_CAPTURE_GRAPH_POOL, BAD, "vpmm_capture_graph_pool: out_graph_pool is NULL",
            .stream = S_S, .out = NULL_OUT } },
      .check = capture_on_s_goes_on },
    { "test_null_checkpoint_calls",
      GFX,
      .calls = {
          { OP_CHECKPOINT_TAKE, BAD, "vpmm_checkpoint_take: graph_pool is NULL", .gp = NULL_GP,
            .out = NULL_OUT },
          { OP_CHECKPOINT_TAKE, BAD, "vpmm_checkpoint_take: out_checkpoint is NULL",
            .out = NULL_OUT },
          { OP_CHECKPOINT_REAPPLY, BAD, "vpmm_checkpoint_reapply: graph_pool is NULL",
            .gp = NULL_GP },
          { OP_CHECKPOINT_REAPPLY, BAD, "vpmm_checkpoint_reapply: checkpoint is NULL",
            .ck = NULL_CK },
          { OP_CHECKPOINT_REAPPLY, BAD, "vpmm_checkpoint_reapply: dead is NULL", .size = 1,
            .out = NULL_OUT },
          { OP_CHECKPOINT_INFO, BAD, "vpmm_checkpoint_info: checkpoint is NULL", .ck = NULL_CK },
          { OP_CHECKPOINT_INFO, BAD, "vpmm_checkpoint_info: out_info is NULL", .out = NULL_OUT },
          /* vpmm_checkpoint_allocs returns a count: 0 for no checkpoint; a NULL array only
           * sizes; destroy ignores NULL, like free(NULL) */
          { OP_CHECKPOINT_ALLOCS, .ck = NULL_CK, .size = 2, .count = 0, .flags = KEEPS_OUT },
          { OP_CHECKPOINT_ALLOCS, .size = 2, .out = NULL_OUT, .count = 1 },
          { OP_CHECKPOINT_DESTROY, .ck = NULL_CK } } },
    { "test_unknown_status",
      NO_POOL,
      .calls = { { OP_STRERROR, .code = 99, .text = "unknown status" },
                 { OP_STATUS_NAME, .code = 99, .text = "VPMM_STATUS_UNKNOWN" },
                 { OP_STATUS_NAME, .code = -1, .text = "VPMM_STATUS_UNKNOWN" } } },

    /* sizes */
    { "test_malloc_size_zero",
      GFX,
      .calls = {
          { OP_MALLOC, VPMM_ERROR_INVALID_SIZE, "vpmm_malloc: size is 0", .stream = S_S },
          /* on a stream that is being captured too: refused before routing, the graph pool
           * untouched and the capture still valid */
          THEN(begin_cs),
          { OP_MALLOC, VPMM_ERROR_INVALID_SIZE, "size is 0", .stream = S_CS } },
      .check = cs_capturing,
      .undo = end_cs },
    { "test_malloc_size_max",
      GFX,
      .calls = {
          { OP_MALLOC, VPMM_ERROR_SIZE_TOO_LARGE, "bytes exceed the VA chunk size",
            .size = SIZE_MAX, .stream = S_S },
          /* sizes whose rounding up to VPMM_ALIGNMENT overflows */
          { OP_MALLOC, VPMM_ERROR_SIZE_TOO_LARGE, "exceed the VA chunk size",
            .size = SIZE_MAX - 100 },
          { OP_MALLOC, VPMM_ERROR_SIZE_TOO_LARGE, "exceed the VA chunk size",
            .size = SIZE_MAX - VPMM_ALIGNMENT + 2 },
          THEN(begin_cs),
          { OP_MALLOC, VPMM_ERROR_SIZE_TOO_LARGE, "exceed the VA chunk size", .size = SIZE_MAX,
            .stream = S_CS } },
      .check = cs_capturing,
      .undo = end_cs },
    { "test_malloc_above_va_chunk",
      FX,
      { .va_size = 256 * MiB },
      .setup = new_cs_and_gp,
      .calls = {
          { OP_MALLOC, VPMM_ERROR_SIZE_TOO_LARGE,
            "268435457 bytes exceed the VA chunk size (268435456)", .size = 256 * MiB + 1,
            .stream = S_S },
          { OP_MALLOC, VPMM_ERROR_SIZE_TOO_LARGE, "exceed the VA chunk size", .size = 1 * GiB },
          THEN(begin_cs),
          { OP_MALLOC, VPMM_ERROR_SIZE_TOO_LARGE, "exceed the VA chunk size",
            .size = 256 * MiB + 1, .stream = S_CS } },
      .check = graph_pool_made_nothing,
      .undo = end_cs_then_one_chunk },

    /* bad pointers */
    { "test_free_double",
      GFX,
      .setup = freed_a_b_priv,
      .calls = { { OP_FREE, VPMM_ERROR_DOUBLE_FREE, "is not allocated (double free?)", .ptr = P_A },
                 { OP_FREE, VPMM_ERROR_DOUBLE_FREE, "double free", .ptr = P_B },
                 { OP_FREE, VPMM_ERROR_DOUBLE_FREE, "double free", .ptr = P_PRIV } },
      .undo = end_cs },
    { "test_free_interior",
      GFX,
      .calls = {
          { OP_FREE, VPMM_ERROR_INTERIOR_POINTER, "is 256 bytes into the allocation at",
            .ptr = P_BIG, .off = 256 },
          { OP_FREE, VPMM_ERROR_INTERIOR_POINTER, "is 2097153 bytes into", .ptr = P_BIG,
            .off = 2 * MiB + 1 },
          { OP_FREE, VPMM_ERROR_INTERIOR_POINTER, "999 bytes into", .ptr = P_SMALL, .off = 999 },
          /* a graph pool's allocation */
          { OP_FREE, VPMM_ERROR_INTERIOR_POINTER, "4096 bytes into", .ptr = P_OUT,
            .off = 4096 } } },
    { "test_free_foreign_stack",
      FX,
      .calls = {
          { OP_FREE, VPMM_ERROR_FOREIGN_POINTER, "is not inside this pool", .ptr = P_STACK },
          { OP_FREE, VPMM_ERROR_FOREIGN_POINTER, "not inside this pool", .ptr = P_ONE },
          { OP_FREE, VPMM_ERROR_FOREIGN_POINTER, "not inside this pool", .ptr = P_TOP },
          { OP_FREE, VPMM_ERROR_FOREIGN_POINTER, "not inside this pool", .ptr = P_HANDLE } } },
    { "test_free_foreign_other_pool",
      GFX,
      .setup = other_pool_allocations,
      .calls = {
          { OP_FREE, VPMM_ERROR_FOREIGN_POINTER, "is not inside this pool", .ptr = P_THEIRS },
          { OP_FREE, VPMM_ERROR_FOREIGN_POINTER, "not inside this pool", .ptr = P_THEIR_PRIV },
          { OP_FREE, VPMM_ERROR_FOREIGN_POINTER, "not inside this pool", .pool = OTHER_POOL,
            .ptr = P_OUT } },
      .undo = free_other_pool_allocations },
    { "test_free_never_allocated",
      FX,
      .setup = big_plus_1g_is_a_hole,
      .calls = { { OP_FREE, VPMM_ERROR_DOUBLE_FREE, "is not allocated (double free?)",
                   .ptr = P_BIG, .off = 1 * GiB } } },
    { "test_free_after_reapply",
      GFX,
      .setup = later_dropped_by_reapply,
      .calls = { { OP_FREE, VPMM_ERROR_DOUBLE_FREE, "double free", .ptr = P_LATER } } },

    /* frees during someone else's capture */
    { "test_free_private_during_other_capture",
      GFX,
      .setup = other_stream_captures_elsewhere,
      .calls = { { OP_FREE, VPMM_SUCCESS, NULL, .ptr = P_OUT, .flags = NO_DRIVER_CALL } },
      .check = freed_on_cs_unseen_by_the_capture,
      .after = EFFECT },
    { "test_free_private_while_its_stream_captures_elsewhere",
      GFX,
      .setup = cs_captures_elsewhere,
      .calls = { { OP_FREE, VPMM_SUCCESS, NULL, .ptr = P_OUT, .flags = NO_DRIVER_CALL } },
      .check = freed_on_cs_unseen_by_its_capture,
      .after = EFFECT },
    { "test_free_private_during_capture_into_its_pool",
      GFX,
      .setup = other_stream_captures_into_gp,
      /* its one driver call: is cs capturing into this graph pool? (no: then the marker rule) */
      .calls = { { OP_FREE, VPMM_SUCCESS, NULL, .ptr = P_OUT, .flags = ONE_CAPTURE_QUERY } },
      .check = freed_on_cs_unseen_by_the_capture_into_gp,
      .after = EFFECT },
    { "test_free_shared_during_capture_of_its_stream",
      FX,
      .setup = x_in_use_on_captured_s,
      .calls = { { OP_FREE, VPMM_SUCCESS, NULL, .ptr = P_X, .flags = NO_DRIVER_CALL } },
      .check = x_stream_ordered_on_s,
      .after = EFFECT },

    /* captures */
    { "test_capture_begin_legacy_stream",
      GFX,
      .calls = {
          { OP_CAPTURE_BEGIN, BAD, "the legacy default stream cannot be captured" },
          { OP_CAPTURE_BEGIN, BAD, "legacy default stream", .gp = NULL_GP, .stream = S_LEGACY,
            .mode = VPMM_STREAM_CAPTURE_RELAXED } },
      .check = no_capture_begun },
    { "test_capture_stream_zero_per_thread",
      POOL,
      { .va_size = 4 * GiB, .per_thread_default = 1 },
      .setup = new_gp,
      .calls = {
          { OP_CAPTURE_BEGIN, VPMM_SUCCESS, NULL },
          THEN(stream_zero_allocates_from_gp),
          /* the same capture, named by its per-thread handle */
          { OP_CAPTURE_END, VPMM_SUCCESS, NULL, .stream = S_PER_THREAD } },
      .check = free_a_destroy_graph,
      .after = EFFECT },
    { "test_capture_end_per_thread_from_other_thread",
      POOL,
      .setup = per_thread_stream_captured,
      .calls = {
          { OP_CAPTURE_END, VPMM_ERROR_NOT_CAPTURING, "is not being captured",
            .stream = S_PER_THREAD, .flags = OTHER_THREAD },
          /* its own, unknown stream: a no-op */
          { OP_STREAM_RELEASE, VPMM_SUCCESS, NULL, .stream = S_PER_THREAD,
            .flags = OTHER_THREAD } },
      .check = capture_goes_on, /* this thread's */
      .after = SAME,
      .undo = end_per_thread_capture },
    { "test_capture_begin_already_capturing",
      GFX,
      .setup = three_captures,
      .calls = {
          { OP_CAPTURE_BEGIN, VPMM_ERROR_STREAM_CAPTURING, "is already being captured",
            .stream = S_CS },
          { OP_CAPTURE_BEGIN, VPMM_ERROR_STREAM_CAPTURING, "is already being captured",
            .gp = NULL_GP, .stream = S_JOINED },
          { OP_CAPTURE_BEGIN, VPMM_ERROR_STREAM_CAPTURING, "is already being captured",
            .stream = S_EXT } },
      .check = three_captures_go_on,
      .undo = end_three_captures },
    { "test_capture_begin_other_pools_graph_pool",
      GFX,
      .setup = open_other,
      .calls = { { OP_CAPTURE_BEGIN, VPMM_ERROR_WRONG_POOL, "vpmm_capture_begin: graph pool g",
                   "belongs to another pool", .gp = THEIRS, .stream = S_CS } },
      .check = theirs_not_begun },
    { "test_capture_begin_bad_mode",
      GFX,
      .calls = { { OP_CAPTURE_BEGIN, BAD, "vpmm_capture_begin: unknown capture mode 3",
                   .stream = S_CS, .mode = 3 },
                 { OP_CAPTURE_BEGIN, BAD, "unknown capture mode -1", .gp = NULL_GP,
                   .stream = S_CS, .mode = -1 } },
      .check = cs_not_capturing },
    { "test_capture_end_not_capturing",
      GFX,
      .calls = { { OP_CAPTURE_END, VPMM_ERROR_NOT_CAPTURING, "vpmm_capture_end: stream",
                   "is not being captured", .stream = S_CS },
                 /* the legacy stream never is */
                 { OP_CAPTURE_END, VPMM_ERROR_NOT_CAPTURING, "is not being captured" } } },
    { "test_capture_end_joined_stream",
      GFX,
      .setup = cs_captured_and_joined,
      .calls = { { OP_CAPTURE_END, VPMM_ERROR_DRIVER,
                   "cuStreamEndCapture failed (driver error 903)", .stream = S_JOINED } },
      .check = driver_refused_capture_goes_on,
      .undo = end_cs_and_event },
    { "test_capture_register_other_pools_graph_pool",
      GFX,
      .setup = other_pool_and_external_capture_on_cs,
      .calls = { { OP_CAPTURE_REGISTER, VPMM_ERROR_WRONG_POOL,
                   "vpmm_capture_register: graph pool g", "belongs to another pool",
                   .gp = THEIRS, .stream = S_CS } },
      .check = theirs_not_registered,
      .undo = end_external_capture_on_cs },
    { "test_capture_register_served_by_other_graph_pool",
      GFX,
      .setup = cs_served_by_gp,
      .calls = {
          { OP_CAPTURE_REGISTER, VPMM_ERROR_WRONG_POOL, WANT, .gp = MINE, .stream = S_CS },
          THEN(external_capture_that_allocated),
          { OP_CAPTURE_REGISTER, VPMM_ERROR_WRONG_POOL, WANT, .gp = MINE, .stream = S_S } },
      .check = mine_not_registered,
      .undo = end_external_capture_on_s },
    { "test_capture_register_not_capturing",
      GFX,
      .calls = { { OP_CAPTURE_REGISTER, VPMM_ERROR_NOT_CAPTURING, "vpmm_capture_register: stream",
                   "is not being captured", .stream = S_CS },
                 { OP_CAPTURE_REGISTER, VPMM_ERROR_NOT_CAPTURING, "is not being captured" } },
      .check = no_capture_begun },
    { "test_capture_graph_pool_not_capturing",
      GFX,
      .calls = { { OP_CAPTURE_GRAPH_POOL, VPMM_ERROR_NOT_CAPTURING,
                   "vpmm_capture_graph_pool: stream", .stream = S_CS },
                 { OP_CAPTURE_GRAPH_POOL, VPMM_ERROR_NOT_CAPTURING, "is not being captured" } } },

    /* graph pools */
    { "test_graph_pool_release_more_than_retained",
      GFX,
      .setup = gp_kept_by_g1_only,
      .calls = { { OP_GRAPH_POOL_RELEASE, BAD, WANT } },
      .check = g1_keeps_gp,
      .undo = retain_gp },

    /* checkpoints */
    { "test_checkpoint_take_during_capture",
      GFX,
      .setup = begin_cs,
      .calls = { { OP_CHECKPOINT_TAKE, VPMM_ERROR_STREAM_CAPTURING,
                   "vpmm_checkpoint_take: graph pool g", "is being captured into" } },
      .check = cs_capturing,
      .undo = end_cs },
    { "test_checkpoint_reapply_other_graph_pool",
      GFX,
      .setup = mine_and_theirs,
      .calls = {
          { OP_CHECKPOINT_REAPPLY, VPMM_ERROR_WRONG_POOL, WANT, .gp = MINE },
          /* a graph pool of another pool: ids are unique in the process, so the same */
          { OP_CHECKPOINT_REAPPLY, VPMM_ERROR_WRONG_POOL, "the checkpoint is of graph pool g",
            .gp = THEIRS } } },
    { "test_checkpoint_reapply_during_capture",
      GFX,
      .setup = gp_captured_on_s2,
      .calls = { { OP_CHECKPOINT_REAPPLY, VPMM_ERROR_STREAM_CAPTURING,
                   "vpmm_checkpoint_reapply: graph pool g", "is being captured into" },
                 { OP_CHECKPOINT_REAPPLY, VPMM_ERROR_STREAM_CAPTURING, "is being captured into",
                   .size = 1, .dead = { { P_OUT } } } },
      .check = s2_capturing,
      .undo = end_capture_on_s2 },
    { "test_checkpoint_reapply_dead_not_in_checkpoint",
      GFX,
      .setup = later_made_after_ck,
      .calls = {
          { OP_CHECKPOINT_REAPPLY, BAD, "is not an allocation of the checkpoint", .size = 1,
            .dead = { { P_OUT, 256 } } },
          { OP_CHECKPOINT_REAPPLY, BAD, "dead[0] =", .size = 1, .dead = { { P_LATER } } },
          { OP_CHECKPOINT_REAPPLY, BAD, "is not an allocation of the checkpoint", .size = 1,
            .dead = { { P_SMALL } } },
          { OP_CHECKPOINT_REAPPLY, BAD, "is not an allocation of the checkpoint", .size = 1,
            .dead = { { P_NULL } } },
          /* the bad one is reported by its index */
          { OP_CHECKPOINT_REAPPLY, BAD, "dead[1] =", .size = 2,
            .dead = { { P_OUT }, { P_LATER } } } },
      .undo = free_later },
    { "test_checkpoint_reapply_dead_listed_twice",
      GFX,
      .calls = { { OP_CHECKPOINT_REAPPLY, BAD, "dead[1] =", "is listed twice", .size = 2,
                   .dead = { { P_OUT }, { P_OUT } } } } },
    { "test_checkpoint_reapply_conflict",
      POOL,
      { .va_size = 4 * GiB, .memory_limit = 16 * MiB },
      .setup = a_unmapped,
      .calls = { { OP_CHECKPOINT_REAPPLY, VPMM_ERROR_CHECKPOINT_CONFLICT,
                   "vpmm_checkpoint_reapply: the checkpoint's allocation at",
                   "(8388608 bytes) is no longer mapped in graph pool g" } },
      .after = SAME,
      .undo = reapply_with_a_dead },

    /* destroy */
    { "test_destroy_live_allocations",
      FX, /* fixture_close frees both, then destroy succeeds (and leaks nothing) */
      .calls = { { OP_POOL_DESTROY, VPMM_ERROR_POOL_BUSY,
                   "vpmm_pool_destroy: 2 allocations are still live" } } },
    { "test_destroy_live_graph_pool_handle",
      POOL,
      .setup = new_gp,
      .calls = { { OP_POOL_DESTROY, VPMM_ERROR_POOL_BUSY,
                   "vpmm_pool_destroy: 1 graph pool(s) still alive (1 handle reference(s) not "
                   "released, 0 graph(s) not destroyed)" } },
      .check = no_graph },
    { "test_destroy_live_graph",
      POOL,
      .setup = g_holds_gp_alone,
      /* it waits up to 0.5 s for CUDA's destructors, then refuses */
      .calls = { { OP_POOL_DESTROY, VPMM_ERROR_POOL_BUSY,
                   "vpmm_pool_destroy: 1 graph pool(s) still alive (0 handle reference(s) not "
                   "released, 1 graph(s) not destroyed)" } } },
    { "test_destroy_during_capture",
      POOL,
      .setup = capture_on_s,
      /* "... is being captured into graph pool gN" */
      .calls = { { OP_POOL_DESTROY, VPMM_ERROR_POOL_BUSY, "vpmm_pool_destroy: stream 0x" } },
      .check = capture_on_s_undisturbed,
      .undo = end_capture_on_s },

    /* streams */
    { "test_stream_release_unknown",
      FX,
      .setup = stream_never_seen,
      .calls = {
          { OP_STREAM_RELEASE, VPMM_SUCCESS, NULL, .stream = S_NEVER, .flags = ONE_CAPTURE_QUERY },
          { OP_STREAM_RELEASE, VPMM_SUCCESS, NULL, .stream = S_DEAD0, .flags = ONE_CAPTURE_QUERY },
          THEN(unchanged),
          /* twice for a known one: the second is a release of an unknown stream */
          { OP_STREAM_RELEASE, VPMM_SUCCESS, NULL, .stream = S_S },
          THEN(NULL),
          { OP_STREAM_RELEASE, VPMM_SUCCESS, NULL, .stream = S_S } } },

    /* bad environment values */
    { "test_env_backend",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          ENV("VPMM_BACKEND", "gpu", "VPMM_BACKEND='gpu': expected cuda or host"),
          ENV("VPMM_BACKEND", "CUDA", "VPMM_BACKEND='CUDA': expected cuda or host"),
          ENV("VPMM_BACKEND", "auto", "VPMM_BACKEND='auto': expected cuda or host (auto is gone"),
          ENV("VPMM_BACKEND", "", "VPMM_BACKEND='': expected") } },
    { "test_env_page_size",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          ENV("VPMM_PAGE_SIZE", "3X",
              "VPMM_PAGE_SIZE='3X': expected bytes with an optional K, M, G or T suffix"),
          ENV("VPMM_PAGE_SIZE", "1.5G", "VPMM_PAGE_SIZE='1.5G': expected bytes"),
          ENV("VPMM_PAGE_SIZE", "0", "VPMM_PAGE_SIZE='0': the page size must be positive"),
          ENV("VPMM_PAGE_SIZE", "18446744073709551616",
              "VPMM_PAGE_SIZE='18446744073709551616': value too large"),
          ENV("VPMM_PAGE_SIZE", "", "VPMM_PAGE_SIZE='': expected bytes") } },
    { "test_env_page_size_not_granular",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          ENV("VPMM_PAGE_SIZE", "3M",
              "VPMM_PAGE_SIZE=3145728: not a multiple of the allocation granularity (2 MiB)"),
          ENV("VPMM_PAGE_SIZE", "4K",
              "VPMM_PAGE_SIZE=4096: not a multiple of the allocation granularity") } },
    { "test_env_va_size",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          ENV_VA("VPMM_VA_SIZE", "abc", "VPMM_VA_SIZE='abc': expected bytes"),
          ENV_VA("VPMM_VA_SIZE", "0", "VPMM_VA_SIZE='0': the VA chunk size must be positive"),
          ENV_VA("VPMM_VA_SIZE", "3M",
                 "VPMM_VA_SIZE=3145728: must be a positive multiple of the page size (2 MiB)"),
          ENV_VA("VPMM_VA_SIZE", "1M",
                 "VPMM_VA_SIZE=1048576: must be a positive multiple of the page size") } },
    { "test_env_pages",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          ENV("VPMM_PAGES", "2K", "VPMM_PAGES='2K': expected a decimal count"),
          ENV("VPMM_PAGES", "-1", "VPMM_PAGES='-1': expected a decimal count"),
          ENV("VPMM_PAGES", "99999999999999999999999",
              "VPMM_PAGES='99999999999999999999999': value too large"),
          ENV("VPMM_PAGES", "513",
              "VPMM_PAGES=513: 513 pages of 2 MiB do not fit in one VA chunk of 1 GiB") } },
    { "test_env_host_memory",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          ENV("VPMM_HOST_MEMORY", "0",
              "VPMM_HOST_MEMORY='0': the emulated device memory must be positive"),
          ENV("VPMM_HOST_MEMORY", "1.5G", "VPMM_HOST_MEMORY='1.5G': expected bytes") } },
    { "test_env_cache_percent",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          ENV("VPMM_CACHE_PERCENT", "101", "VPMM_CACHE_PERCENT='101': expected 0 to 100"),
          ENV("VPMM_CACHE_PERCENT", "5%", "VPMM_CACHE_PERCENT='5%': expected a decimal count"),
          ENV("VPMM_CACHE_PERCENT", "10M",
              "VPMM_CACHE_PERCENT='10M': expected a decimal count") } },
    { "test_env_max_bytes",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          ENV("VPMM_MAX_BYTES", "lots", "VPMM_MAX_BYTES='lots': expected bytes"),
          ENV("VPMM_MAX_BYTES", "-4G", "VPMM_MAX_BYTES='-4G': expected bytes"),
          ENV("VPMM_MAX_BYTES", "1M", "VPMM_MAX_BYTES=1048576: less than one page (2 MiB)") } },
    { "test_env_verbose",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = { ENV("VPMM_VERBOSE", "2", "VPMM_VERBOSE='2': expected 0 or 1"),
                 ENV("VPMM_VERBOSE", "yes", "VPMM_VERBOSE='yes': expected a decimal count") } },
    { "test_env_default_stream",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          ENV("VPMM_DEFAULT_STREAM", "per_thread",
              "VPMM_DEFAULT_STREAM='per_thread': expected legacy or per-thread"),
          ENV("VPMM_DEFAULT_STREAM", "Legacy",
              "VPMM_DEFAULT_STREAM='Legacy': expected legacy or per-thread"),
          ENV("VPMM_DEFAULT_STREAM", "",
              "VPMM_DEFAULT_STREAM='': expected legacy or per-thread") } },
    /* not malformed, but no device for it: VPMM_BACKEND=cuda on a machine without a GPU */
    { "test_env_backend_cuda_without_device",
      NO_POOL,
      .flags = ENV_CLEARED | NEEDS_NO_GPU,
      .calls = { { OP_POOL_CREATE, VPMM_ERROR_NO_DEVICE, "no CUDA device", .env = "VPMM_BACKEND",
                   .value = "cuda", .cfg = { .defaults = 1 } } } },
    /* well-formed but no knob: a misspelled name is refused with the closest known one, although
     * the config sets the field; the right name then sets the cap (check) */
    { "test_env_unknown_name",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = { { OP_POOL_CREATE, VPMM_ERROR_INVALID_ENV, "VPMM_MAXBYTES is not a vpmm variable",
                   "did you mean VPMM_MAX_BYTES?", .env = "VPMM_MAXBYTES", .value = "1M",
                   .cfg = { .max_bytes = 64 * MiB } } },
      .check = right_name_sets_the_cap },

    /* bad config fields */
    { "test_config_backend",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          CONFIG(VPMM_ERROR_INVALID_CONFIG,
                 "config.backend=7: expected VPMM_BACKEND_DEFAULT, _CUDA or _HOST", .backend = 7),
          CONFIG(VPMM_ERROR_INVALID_CONFIG, "config.backend=-1: expected", .backend = -1) } },
    { "test_config_device",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = { CONFIG(VPMM_ERROR_INVALID_CONFIG,
                        "config.device=-2: expected -1 (current) or a device ordinal",
                        .device = -2) } },
    { "test_config_cache_percent",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          CONFIG(VPMM_ERROR_INVALID_CONFIG,
                 "config.cache_percent=101: expected -1 (default) or 0 to 100",
                 .cache_percent = 101),
          CONFIG(VPMM_ERROR_INVALID_CONFIG, "config.cache_percent=-2: expected",
                 .cache_percent = -2) } },
    { "test_config_verbose",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = { CONFIG(VPMM_ERROR_INVALID_CONFIG,
                        "config.verbose=2: expected -1 (default), 0 or 1", .verbose = 2),
                 CONFIG(VPMM_ERROR_INVALID_CONFIG, "config.verbose=-2: expected",
                        .verbose = -2) } },
    { "test_config_default_stream",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          CONFIG(VPMM_ERROR_INVALID_CONFIG,
                 "config.default_stream=3: expected VPMM_DEFAULT_STREAM_UNSET, _LEGACY or "
                 "_PER_THREAD",
                 .default_stream = 3),
          CONFIG(VPMM_ERROR_INVALID_CONFIG, "config.default_stream=-1: expected",
                 .default_stream = -1) } },
    { "test_config_page_size_not_granular",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          CONFIG(VPMM_ERROR_INVALID_CONFIG,
                 "config.page_size=3145728: not a multiple of the allocation granularity (2 MiB)",
                 .page_size = 3 * MiB),
          CONFIG(VPMM_ERROR_INVALID_CONFIG,
                 "config.page_size=4096: not a multiple of the allocation granularity",
                 .page_size = 4 * KiB),
          CONFIG(VPMM_ERROR_INVALID_CONFIG, "config.page_size=18446744073709551615: not a multiple",
                 .page_size = SIZE_MAX) } },
    { "test_config_va_size",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          CONFIG(VPMM_ERROR_INVALID_CONFIG,
                 "config.va_size=3145728: must be a positive multiple of the page size (2 MiB)",
                 .va_size = 3 * MiB),
          CONFIG(VPMM_ERROR_INVALID_CONFIG,
                 "config.va_size=1048576: must be a positive multiple of the page size",
                 .va_size = 1 * MiB) } },
    { "test_config_max_bytes",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = { CONFIG(VPMM_ERROR_INVALID_CONFIG,
                        "config.max_bytes=1048576: less than one page (2 MiB)",
                        .max_bytes = 1 * MiB) } },
    { "test_config_prealloc_pages",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = {
          CONFIG(VPMM_ERROR_INVALID_CONFIG,
                 "config.prealloc_pages=513: 513 pages of 2 MiB do not fit in one VA chunk of "
                 "1 GiB",
                 .prealloc_pages = 513),
          CONFIG(VPMM_ERROR_INVALID_CONFIG,
                 "config.prealloc_pages=3: 3 pages of 2 MiB exceed the cap of 4 MiB",
                 .prealloc_pages = 3, .max_bytes = 4 * MiB),
          CONFIG(VPMM_ERROR_INVALID_CONFIG, "do not fit in one VA chunk",
                 .prealloc_pages = SIZE_MAX) } },
    /* well-formed but impossible: a VA chunk larger than the address space */
    { "test_config_va_size_unreservable",
      NO_POOL,
      .flags = ENV_CLEARED,
      .calls = { CONFIG(VPMM_ERROR_OUT_OF_MEMORY, "cuMemAddressReserve failed",
                        .va_size = (size_t)1 << 62) } },

    /* several devices and processes (include/vpmm.h, "several devices", "segments", "sharing
     * memory with other processes"); the node's device 2 is isolated: no peer access to or from
     * it */
    { "test_null_device_calls",
      FX,
      .setup = segment_hook_set,
      .calls = {
          { OP_POOL_DEVICE, BAD, "vpmm_pool_device: pool is NULL", .pool = NULL_POOL },
          { OP_POOL_DEVICE, BAD, "vpmm_pool_device: out_device is NULL", .out = NULL_OUT },
          { OP_GRANT_ACCESS, BAD, "vpmm_pool_grant_access: pool is NULL", .pool = NULL_POOL,
            .device = 1, .flags = NO_DRIVER_CALL },
          { OP_SET_SEGMENT_HOOK, BAD, "vpmm_pool_set_segment_hook: pool is NULL",
            .pool = NULL_POOL },
          { OP_WALK_SEGMENTS, BAD, "vpmm_pool_walk_segments: pool is NULL", .pool = NULL_POOL },
          { OP_WALK_SEGMENTS, BAD, "vpmm_pool_walk_segments: visit is NULL", .out = NULL_OUT },
          /* the pool's hook is the one it had */
          THEN(hook_still_hears),
          /* a NULL hook is no misuse: it takes the hook away (undo: a growth is not heard) */
          { OP_SET_SEGMENT_HOOK, VPMM_SUCCESS, NULL, .out = NULL_OUT } },
      .undo = hook_gone },
    { "test_null_ipc_calls",
      FX,
      .setup = their_shared_their2_open,
      .calls = {
          /* out_len NULL (allowed): what a refusal writes there is test_ipc_export_out_len */
          { OP_IPC_EXPORT, BAD, "vpmm_ipc_export: pool is NULL", .pool = NULL_POOL, .ptr = P_BIG,
            .size = 256, .out = NULL_OUT2 },
          { OP_IPC_EXPORT, BAD, "vpmm_ipc_export: ptr is NULL", .size = 256, .out = NULL_OUT2 },
          { OP_IPC_UNSHARE, BAD, "vpmm_ipc_unshare: pool is NULL", .pool = NULL_POOL,
            .ptr = P_BIG },
          { OP_IPC_UNSHARE, BAD, "vpmm_ipc_unshare: ptr is NULL" },
          /* *out_ptr is NULL on every error; nothing is mapped */
          { OP_IPC_OPEN, BAD, "vpmm_ipc_open: pool is NULL", .pool = NULL_POOL },
          { OP_IPC_OPEN, BAD, "vpmm_ipc_open: handle is NULL", .hdl = H_NULL },
          { OP_IPC_OPEN, BAD, "vpmm_ipc_open: out_ptr is NULL", .out = NULL_OUT },
          { OP_IPC_CLOSE, BAD, "vpmm_ipc_close: pool is NULL", .pool = NULL_POOL, .ptr = P_Q },
          { OP_IPC_CLOSE, BAD, "vpmm_ipc_close: ptr is NULL" } },
      .check = only_their2_imported,
      .undo = close_q_free_theirs },
    { "test_grant_access_no_such_device",
      FX,
      { .devices = 3, .isolated = 4 },
      .calls = {
          { OP_GRANT_ACCESS, BAD, "vpmm_pool_grant_access: device -1 does not exist",
            .device = -1, .flags = NO_DRIVER_CALL },
          /* (the backend's name: "fault(host)", the test's decorator over the host backend) */
          { OP_GRANT_ACCESS, BAD, "vpmm_pool_grant_access: device 3 does not exist (the",
            "backend sees 3 devices)", .device = 3, .flags = NO_DRIVER_CALL },
          { OP_GRANT_ACCESS, BAD, "device 64 does not exist", .device = 64,
            .flags = NO_DRIVER_CALL } },
      .check = no_peer },
    { "test_grant_access_isolated_device",
      FX,
      { .devices = 3, .isolated = 4 },
      .setup = pool_on_isolated_device,
      .calls = {
          { OP_GRANT_ACCESS, VPMM_ERROR_NOT_SUPPORTED,
            "vpmm_pool_grant_access: device 2 cannot access device 0's memory",
            "(no peer access between them)", .device = 2, .flags = NO_DRIVER_CALL },
          /* the other way: the isolated device's pool to device 0 */
          { OP_GRANT_ACCESS, VPMM_ERROR_NOT_SUPPORTED,
            "vpmm_pool_grant_access: device 0 cannot access device 2's memory", "peer access",
            .pool = OTHER_POOL, .device = 0 } },
      .check = no_peer_either_way,
      .undo = free_their },
    { "test_grant_access_own_or_granted_device",
      FX,
      { .devices = 2 },
      .calls = {
          /* nothing to do, and no driver call: not even peer_grants moves */
          { OP_GRANT_ACCESS, VPMM_SUCCESS, NULL, .device = 0, .flags = NO_DRIVER_CALL },
          THEN(same_then_grant_device_1),
          { OP_GRANT_ACCESS, VPMM_SUCCESS, NULL, .device = 0, .flags = NO_DRIVER_CALL },
          { OP_GRANT_ACCESS, VPMM_SUCCESS, NULL, .device = 1, .flags = NO_DRIVER_CALL } },
      .check = device_1_granted_once },
    { "test_ipc_export_buffer_too_small",
      FX,
      .setup = big_handle_length,
      .calls = {
          /* the length needed in *out_len (SAYS_LEN), nothing exported, the buffer unwritten */
          { OP_IPC_EXPORT, BAD, WANT, "the buffer has 0", .ptr = P_BIG, .size = 0,
            .out = NULL_OUT, .flags = SAYS_LEN },
          { OP_IPC_EXPORT, BAD, WANT, "the buffer has 0", .ptr = P_BIG, .size = 256,
            .out = NULL_OUT, .flags = SAYS_LEN },
          { OP_IPC_EXPORT, BAD, WANT, "the buffer has 16", .ptr = P_BIG, .size = 16,
            .flags = SAYS_LEN },
          { OP_IPC_EXPORT, BAD, WANT, "the buffer has 127", .ptr = P_BIG, .size = 127,
            .flags = SAYS_LEN },
          { OP_IPC_EXPORT, BAD, WANT, .ptr = P_BIG, .size = 0, .out = NULL_BOTH } },
      .check = nothing_exported },
    { "test_ipc_export_bad_pointers",
      FX,
      .setup = freed_a_and_their,
      .calls = {
          { OP_IPC_EXPORT, VPMM_ERROR_DOUBLE_FREE, "vpmm_ipc_export: 0x",
            "is not allocated (double free?)", .ptr = P_A, .size = 256, .out = NULL_OUT2 },
          { OP_IPC_EXPORT, VPMM_ERROR_INTERIOR_POINTER, "vpmm_ipc_export: 0x",
            "is 256 bytes into the allocation at", .ptr = P_BIG, .off = 256, .size = 256,
            .out = NULL_OUT2 },
          { OP_IPC_EXPORT, VPMM_ERROR_FOREIGN_POINTER, "vpmm_ipc_export: 0x",
            "is not inside this pool", .ptr = P_STACK, .size = 256, .out = NULL_OUT2 },
          { OP_IPC_EXPORT, VPMM_ERROR_FOREIGN_POINTER, "is not inside this pool",
            .ptr = P_THEIRS, .size = 256, .out = NULL_OUT2 },
          /* a hole of the pool's VA: inside it, not allocated */
          { OP_IPC_EXPORT, VPMM_ERROR_DOUBLE_FREE, "is not allocated", .ptr = P_BIG,
            .off = 1 * GiB, .size = 256, .out = NULL_OUT2 } },
      .check = nothing_exported,
      .undo = free_their },
    { "test_ipc_export_graph_pool_allocation",
      GFX,
      .setup = big_handle_length,
      .calls = {
          { OP_IPC_EXPORT, VPMM_ERROR_NOT_SUPPORTED, "vpmm_ipc_export: 0x",
            "is a graph pool's allocation", .ptr = P_OUT, .size = 256, .out = NULL_OUT2 },
          /* refused before its length is asked for: a sizing call learns it cannot export */
          { OP_IPC_EXPORT, VPMM_ERROR_NOT_SUPPORTED, "is a graph pool's allocation",
            .ptr = P_OUT, .size = 0, .out = NULL_BOTH } },
      .check = nothing_exported },
    { "test_ipc_export_not_exportable",
      FX,
      { .not_exportable = 1 },
      .setup = big_handle_length,
      .calls = {
          { OP_IPC_EXPORT, VPMM_ERROR_NOT_SUPPORTED,
            "vpmm_ipc_export: this pool's memory cannot be exported", .ptr = P_BIG,
            .size = 256, .out = NULL_OUT2 },
          { OP_IPC_EXPORT, VPMM_ERROR_NOT_SUPPORTED, "cannot be exported", .ptr = P_BIG,
            .size = 0, .out = NULL_BOTH } },
      .check = nothing_exported },
    { "test_ipc_unshare_bad_pointers",
      FX,
      .setup = freed_a_and_their,
      .calls = {
          { OP_IPC_UNSHARE, VPMM_ERROR_DOUBLE_FREE, "vpmm_ipc_unshare: 0x",
            "is not allocated (double free?)", .ptr = P_A },
          { OP_IPC_UNSHARE, VPMM_ERROR_INTERIOR_POINTER, "vpmm_ipc_unshare: 0x",
            "is 256 bytes into the allocation at", .ptr = P_BIG, .off = 256 },
          { OP_IPC_UNSHARE, VPMM_ERROR_FOREIGN_POINTER, "vpmm_ipc_unshare: 0x",
            "is not inside this pool", .ptr = P_STACK },
          { OP_IPC_UNSHARE, VPMM_ERROR_FOREIGN_POINTER, "is not inside this pool",
            .ptr = P_THEIRS },
          /* an allocation never exported: nothing to do */
          { OP_IPC_UNSHARE, VPMM_SUCCESS, NULL, .ptr = P_SMALL, .flags = NO_DRIVER_CALL } },
      .check = nothing_exported,
      .undo = free_their },
    { "test_ipc_open_not_a_handle",
      POOL,
      .setup = their2_stale,
      .calls = {
          { OP_IPC_OPEN, BAD, "vpmm_ipc_open: not a vpmm IPC handle (too short)", .hdl = H_SHORT },
          { OP_IPC_OPEN, BAD, "not a vpmm IPC handle (wrong magic)", .hdl = H_MAGIC },
          { OP_IPC_OPEN, BAD, "not a vpmm IPC handle (another version of vpmm wrote it)",
            .hdl = H_VERSION },
          { OP_IPC_OPEN, BAD, "(its length does not match its handle count)",
            .hdl = H_LEN_SHORT },
          { OP_IPC_OPEN, BAD, "(its length does not match its handle count)",
            .hdl = H_LEN_LONG },
          { OP_IPC_OPEN, BAD, "(the allocation lies outside its handles)", .hdl = H_OUTSIDE },
          { OP_IPC_OPEN, BAD, "(a physical handle entry is out of range)", .hdl = H_SERIAL0 },
          { OP_IPC_OPEN, BAD, "vpmm_ipc_open: descriptor 2139062143 is not open in process",
            .hdl = H_FD } },
      .check = nothing_imported,
      .undo = h_opens_then_free_theirs },
    { "test_ipc_open_stale_handle",
      POOL,
      .setup = their2_stale,
      .calls = {
          { OP_IPC_OPEN, BAD, "vpmm_ipc_open: the handle is stale: its share is over",
            .hdl = H_STALE },
          { OP_IPC_OPEN, BAD, "vpmm_ipc_open: the exporting process 2147483647 has exited",
            .hdl = H_PID },
          /* stale too while its pages are mapped here for another allocation's open */
          THEN(their_opens_on_their2s_page),
          { OP_IPC_OPEN, BAD, "the handle is stale", .hdl = H_STALE } },
      .check = only_q_imported,
      .undo = close_q_free_theirs_both },
    { "test_ipc_close_not_opened",
      FX,
      .setup = their_open_their2_closed,
      .calls = {
          /* closed already, though its mapping stays (q is on it) */
          { OP_IPC_CLOSE, VPMM_ERROR_FOREIGN_POINTER, "vpmm_ipc_close: 0x",
            "is not a pointer vpmm_ipc_open returned here", .ptr = P_Q2 },
          { OP_IPC_CLOSE, VPMM_ERROR_FOREIGN_POINTER, "is not a pointer vpmm_ipc_open returned",
            .ptr = P_Q, .off = 256 },
          { OP_IPC_CLOSE, VPMM_ERROR_FOREIGN_POINTER, "is not a pointer vpmm_ipc_open returned",
            .ptr = P_BIG },
          { OP_IPC_CLOSE, VPMM_ERROR_FOREIGN_POINTER, "is not a pointer vpmm_ipc_open returned",
            .ptr = P_STACK },
          /* the exporter opened nothing: neither the importer's pointer nor its own */
          { OP_IPC_CLOSE, VPMM_ERROR_FOREIGN_POINTER, "is not a pointer vpmm_ipc_open returned",
            .pool = OTHER_POOL, .ptr = P_Q },
          { OP_IPC_CLOSE, VPMM_ERROR_FOREIGN_POINTER, "is not a pointer vpmm_ipc_open returned",
            .pool = OTHER_POOL, .ptr = P_THEIRS },
          THEN(q_works_then_close_it),
          /* closed already, its mapping gone */
          { OP_IPC_CLOSE, VPMM_ERROR_FOREIGN_POINTER, "is not a pointer vpmm_ipc_open returned",
            .ptr = P_Q },
          { OP_IPC_CLOSE, VPMM_ERROR_FOREIGN_POINTER, "is not a pointer vpmm_ipc_open returned",
            .ptr = P_Q2 } },
      .check = nothing_imported,
      .undo = free_theirs },
    { "test_destroy_with_open_import",
      POOL,
      .setup = their_open_here,
      .calls = { { OP_POOL_DESTROY, VPMM_ERROR_POOL_BUSY,
                   "vpmm_pool_destroy: 1 vpmm_ipc_open calls are not closed" } },
      .check = q_aliases_their, /* the import still works */
      .undo = close_q_free_their },

    /* found by this table, fixed in src/ (each row once asserted the bug) */

    /* vpmm_stream_release on a stream that is being captured: releasing means the stream is
     * about to be destroyed, which a capturing stream cannot be. Refused with
     * VPMM_ERROR_STREAM_CAPTURING and no change — with or without a live allocation on the
     * stream. (It used to end vpmm's record of the capture: memory freed earlier in the capture
     * became ready for every stream mid-capture, and the capture's next malloc was served by a
     * new graph pool.) */
    { "test_stream_release_during_capture",
      POOL,
      .setup = gp_and_capture_on_new_stream,
      .calls = {
          { OP_STREAM_RELEASE, VPMM_ERROR_STREAM_CAPTURING,
            "is being captured; end the capture first", .stream = S_S2 },
          THEN(release_refused_capture_goes_on),
          THEN(capture_on_new_stream), /* without a live allocation on it */
          { OP_STREAM_RELEASE, VPMM_ERROR_STREAM_CAPTURING,
            "is being captured; end the capture first", .stream = S_S2 },
          THEN(release_refused_capture_goes_on) },
      .after = EFFECT,
      .undo = free_a },
    { "test_stream_release_legacy_during_capture",
      GFX,
      .setup = legacy_frees_unmarked_during_capture,
      .calls = {
          { OP_STREAM_RELEASE, VPMM_ERROR_STREAM_CAPTURING,
            "cannot be recorded while a capture is in progress" },
          { OP_STREAM_RELEASE, VPMM_SUCCESS, NULL, .stream = S_LEGACY }, /* unknown */
          THEN(same_then_end_capture),
          { OP_STREAM_RELEASE, VPMM_SUCCESS, NULL } }, /* after the capture */
      .after = EFFECT },
    /* vpmm_pool_destroy during a capture into a graph pool that has no handle (a capture begun
     * by vpmm_capture_begin(pool, NULL, ...) or outside vpmm, e.g. torch.cuda.graph): refused
     * with VPMM_ERROR_POOL_BUSY before anything else. (It used to synchronise the device first,
     * waiting for graph destructors, which invalidates the capture: the graph was lost.) */
    { "test_destroy_during_handleless_capture",
      POOL,
      .setup = handleless_capture_on_s,
      .calls = { { OP_POOL_DESTROY, VPMM_ERROR_POOL_BUSY, "is being captured into graph pool" } },
      .check = s_capturing,
      .after = SAME,
      .undo = end_capture_on_s },
    /* A refused reapply (VPMM_ERROR_CHECKPOINT_CONFLICT) whose wanted allocation's stream was
     * released since: no new stream record (stream records are made only once validation
     * passed; it used to make one before the conflict was found). */
    { "test_checkpoint_conflict_released_stream",
      POOL,
      { .va_size = 4 * GiB, .memory_limit = 16 * MiB },
      .setup = a_unmapped_stream_released,
      .calls = { { OP_CHECKPOINT_REAPPLY, VPMM_ERROR_CHECKPOINT_CONFLICT, "is no longer mapped" } },
      .after = SAME, /* streams included */
      .undo = free_x },
    /* The header's convention: out pointers are set to NULL on error. The handle-returning calls
     * do so also when the pool / graph pool argument itself is NULL (they used to leave it
     * untouched). */
    { "test_out_pointer_on_null_handle",
      NO_POOL,
      .calls = {
          { OP_GRAPH_POOL_CREATE, BAD, "pool is NULL", .pool = NULL_POOL },
          { OP_CAPTURE_END, BAD, "pool is NULL", .pool = NULL_POOL, .stream = S_1000 },
          { OP_CAPTURE_GRAPH_POOL, BAD, "pool is NULL", .pool = NULL_POOL, .stream = S_1000 },
          { OP_CHECKPOINT_TAKE, BAD, "graph_pool is NULL", .gp = NULL_GP } } },

    /* vpmm_ipc_export refused for any reason but a buffer too small leaves *out_len untouched,
     * as every value output of a refused call (the header's conventions). It wrote 0. */
    { "test_ipc_export_out_len",
      FX,
      .setup = freed_a_and_their,
      .calls = {
          { OP_IPC_EXPORT, BAD, "vpmm_ipc_export: pool is NULL", .pool = NULL_POOL, .ptr = P_BIG,
            .size = 256 },
          { OP_IPC_EXPORT, BAD, "vpmm_ipc_export: ptr is NULL", .size = 256 },
          { OP_IPC_EXPORT, VPMM_ERROR_DOUBLE_FREE, "is not allocated", .ptr = P_A, .size = 256 },
          { OP_IPC_EXPORT, VPMM_ERROR_INTERIOR_POINTER, "is 256 bytes into", .ptr = P_BIG,
            .off = 256, .size = 256 },
          { OP_IPC_EXPORT, VPMM_ERROR_FOREIGN_POINTER, "is not inside this pool",
            .ptr = P_THEIRS, .size = 256 } },
      .check = nothing_exported,
      .undo = free_their },
};

#define NROWS (sizeof rows / sizeof rows[0])

/* ---- without graph/ -------------------------------------------------------------------------- */

/*
 * Without graph/ (VPMM_WITH_GRAPHS=OFF: every graph and checkpoint call returns
 * VPMM_ERROR_NOT_SUPPORTED, and so does a malloc on a captured stream) the rows that need graphs
 * are left out of the run: a GFX fixture, a graph or checkpoint call, or a step (setup, check,
 * undo, THEN) that makes or checks a graph pool, a graph, a checkpoint or a capture (the list
 * below: a new such step belongs in it). test_graphs_off.c tests what those calls do instead.
 */
#if !VPMM_HAVE_GRAPHS
static void (*const graph_steps[])(ctx_t *c) = { a_unmapped,
                                                 a_unmapped_stream_released,
                                                 begin_cs,
                                                 begin_external_on_s,
                                                 capture_goes_on,
                                                 capture_on_new_stream,
                                                 capture_on_s,
                                                 capture_on_s_goes_on,
                                                 capture_on_s_undisturbed,
                                                 cs_captured_and_joined,
                                                 cs_captures_elsewhere,
                                                 cs_capturing,
                                                 cs_not_capturing,
                                                 cs_served_by_gp,
                                                 driver_refused_capture_goes_on,
                                                 end_capture_on_s,
                                                 end_capture_on_s2,
                                                 end_cs,
                                                 end_cs_and_event,
                                                 end_cs_then_one_chunk,
                                                 end_external_capture_on_cs,
                                                 end_external_capture_on_s,
                                                 end_per_thread_capture,
                                                 end_three_captures,
                                                 external_capture_that_allocated,
                                                 free_a_destroy_graph,
                                                 free_other_pool_allocations,
                                                 freed_a_b_priv,
                                                 freed_on_cs_unseen_by_its_capture,
                                                 freed_on_cs_unseen_by_the_capture,
                                                 freed_on_cs_unseen_by_the_capture_into_gp,
                                                 g1_keeps_gp,
                                                 g_holds_gp_alone,
                                                 gp_and_capture_on_new_stream,
                                                 gp_captured_on_s2,
                                                 gp_kept_by_g1_only,
                                                 graph_pool_made_nothing,
                                                 handleless_capture_on_s,
                                                 later_dropped_by_reapply,
                                                 later_made_after_ck,
                                                 legacy_frees_unmarked_during_capture,
                                                 mine_and_theirs,
                                                 mine_not_registered,
                                                 new_cs_and_gp,
                                                 new_gp,
                                                 no_capture_begun,
                                                 no_graph,
                                                 open_other,
                                                 other_pool_allocations,
                                                 other_pool_and_external_capture_on_cs,
                                                 other_stream_captures_elsewhere,
                                                 other_stream_captures_into_gp,
                                                 per_thread_stream_captured,
                                                 reapply_with_a_dead,
                                                 release_refused_capture_goes_on,
                                                 retain_gp,
                                                 s2_capturing,
                                                 s_capturing,
                                                 same_then_end_capture,
                                                 stream_zero_allocates_from_gp,
                                                 theirs_not_begun,
                                                 theirs_not_registered,
                                                 three_captures,
                                                 three_captures_go_on,
                                                 x_in_use_on_captured_s,
                                                 x_stream_ordered_on_s };

static int uses_graphs(const row_t *r)
{
    void (*steps[MAX_CALLS + 3])(ctx_t * c);
    size_t n = 0;
    if (r->fixture == GFX)
        return 1;
    for (int i = 0; i < MAX_CALLS && r->calls[i].op != OP_END; i++) {
        if (r->calls[i].op >= OP_GRAPH_POOL_CREATE && r->calls[i].op <= OP_CHECKPOINT_DESTROY)
            return 1;
        if (r->calls[i].op == OP_THEN)
            steps[n++] = r->calls[i].then;
    }
    steps[n++] = r->setup;
    steps[n++] = r->check;
    steps[n++] = r->undo;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < sizeof graph_steps / sizeof graph_steps[0]; j++)
            if (steps[i] != NULL && steps[i] == graph_steps[j])
                return 1;
    return 0;
}
#endif

int main(void)
{
    struct CMUnitTest tests[NROWS];
    size_t n = 0;
    for (size_t i = 0; i < NROWS; i++) {
        CMFixtureFunction env = rows[i].flags & ENV_CLEARED ? tenv_clear : NULL;
#if !VPMM_HAVE_GRAPHS
        if (uses_graphs(&rows[i]))
            continue;
#endif
        tests[n++] = (struct CMUnitTest){ rows[i].name, run_row, env, env, (void *)&rows[i] };
    }
    /* cmocka_run_group_tests(tests, ...) with the count of rows kept (all of them with graphs) */
    return _cmocka_run_group_tests("tests", tests, n, NULL, NULL);
}
