/*
 * driver_host_graph.c — graphs, executable graphs and user objects of the host emulation backend
 * (driver_host.h, "graphs and user objects"); driver_host_stream.c owns the captures that create
 * graphs and the streams that launches run on, driver_host.c the node's lifetime.
 *
 * Reference model (driver.h rule 8). A user object's count is split: the caller's references
 * (caller_refs), and one per entry of the refs array of every graph and exec that holds it.
 * graph_retain_user_object moves one caller reference into a graph; instantiation copies the
 * graph's array into the exec, one new reference per entry. A destroyed exec keeps its references
 * while a launch of it is pending on some stream (launches are work items of those streams) and
 * is freed by the progress call that completes the last one.
 *
 *   caller --retain(move)--> graph --instantiate(copy)--> exec --launch--> stream item
 *      \_ release             \_ graph_destroy             \_ exec_destroy  \_ complete/advance
 *
 * When a count reaches zero the object leaves the table and waits on host_drv.dead; its destructor
 * runs in vpmm_host_i_graph_progress, which every call that can drop a reference ends with, so a
 * destructor always sees a consistent node (it may even call the backend again).
 *
 * Thread-safety: every entry of the table and every control runs under the node's recursive mutex
 * (driver.h rule 7; the entries' wrappers are in driver_host.c). Graphs, execs and user objects are
 * the node's: any view of it may use them.
 * Invariants: I8 and I9 above struct host_drv in driver_host_internal.h, checked here by
 * vpmm_host_i_graph_check (called from vpmm_host_check). Failure atomicity (rule 1): each call
 * allocates what it needs before its first visible change; destroy and release never allocate.
 */
#include "driver_host_internal.h"

#include <stdlib.h>
#include <string.h>

static const char call_instantiate[] = "cuGraphInstantiate";
static const char call_launch[] = "cuGraphLaunch";
static const char call_graph_destroy[] = "cuGraphDestroy";
static const char call_exec_destroy[] = "cuGraphExecDestroy";

/* ---- handles ------------------------------------------------------------------------------ */

static host_uobj_t *uobj_get(const host_drv_t *h, vpmm_drv_uobj_t obj)
{
    return vpmm_host_i_slot_get(&h->uobjs, (uint64_t)(uintptr_t)obj);
}

static host_graph_t *graph_get(const host_drv_t *h, vpmm_graph_t g)
{
    return vpmm_host_i_slot_get(&h->graphs, (uint64_t)(uintptr_t)g);
}

static host_exec_t *exec_get(const host_drv_t *h, vpmm_host_exec_t e)
{
    return vpmm_host_i_slot_get(&h->execs, (uint64_t)(uintptr_t)e);
}

/* ---- user objects ------------------------------------------------------------------------- */

/* Drops one reference; at zero the object dies and its destructor is owed (h->dead). */
static void uobj_unref(host_drv_t *h, host_uobj_t *o)
{
    if (--o->refs != 0)
        return;
    vpmm_host_i_slot_drop(&h->uobjs, o->id);
    o->id = 0;
    h->counts.user_objects--;
    o->next_dead = h->dead;
    h->dead = o;
}

static void unref_all(host_drv_t *h, host_uobj_t **refs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        uobj_unref(h, refs[i]);
}

/* Runs the destructors owed. The list is taken off the node first, so that each destructor
 * sees it as between calls (dead = NULL, I8); one that drops more references adds to h->dead,
 * which the outer loop drains next. */
static void run_destructors(host_drv_t *h)
{
    while (h->dead) {
        host_uobj_t *list = h->dead;
        h->dead = NULL;
        while (list) {
            host_uobj_t *o = list;
            list = o->next_dead;
            vpmm_drv_uobj_fn fn = o->destroy;
            void *arg = o->arg;
            free(o);
            fn(arg);
        }
    }
}

vpmm_dres_t vpmm_host_i_user_object_create(vpmm_driver_t *d, vpmm_drv_uobj_fn destroy, void *arg,
                                           vpmm_drv_uobj_t *out)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_USER_OBJECT_CREATE;
    if (!destroy || !out)
        return vpmm_host_i_fail_invalid(v, e);
    host_uobj_t *o = calloc(1, sizeof *o);
    uint64_t id = o ? vpmm_host_i_slot_put(&h->uobjs, o) : 0;
    if (id == 0) {
        free(o);
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    }
    o->id = id;
    o->destroy = destroy;
    o->arg = arg;
    o->refs = o->caller_refs = 1;
    h->counts.user_objects++;
    *out = (vpmm_drv_uobj_t)(uintptr_t)id;
    return VPMM_DRV_OK;
}

/* Moves one caller reference of obj into graph (which may still be being captured). */
vpmm_dres_t vpmm_host_i_graph_retain_user_object(vpmm_driver_t *d, vpmm_graph_t graph,
                                                 vpmm_drv_uobj_t obj)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    const vpmm_drv_entry_t e = VPMM_DRV_GRAPH_RETAIN_USER_OBJECT;
    host_graph_t *g = graph_get(h, graph);
    host_uobj_t *o = uobj_get(h, obj);
    if (!g || !o || o->caller_refs == 0)
        return vpmm_host_i_fail_invalid(v, e);
    if (RESERVE(g->refs, g->refs_cap, g->n_refs + 1))
        return vpmm_host_i_fail(v, e, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    g->refs[g->n_refs++] = o;
    o->caller_refs--; /* moved: o->refs is unchanged */
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_i_user_object_release(vpmm_driver_t *d, vpmm_drv_uobj_t obj)
{
    host_view_t *v = vpmm_host_i_view(d);
    host_drv_t *h = v->node;
    host_uobj_t *o = uobj_get(h, obj);
    if (!o || o->caller_refs == 0)
        return vpmm_host_i_fail_invalid(v, VPMM_DRV_USER_OBJECT_RELEASE);
    o->caller_refs--;
    uobj_unref(h, o);
    run_destructors(h);
    return VPMM_DRV_OK;
}

/* ---- graphs ------------------------------------------------------------------------------- */

host_graph_t *vpmm_host_i_graph_create(host_drv_t *h, host_capture_t *c)
{
    host_graph_t *g = calloc(1, sizeof *g);
    uint64_t id = g ? vpmm_host_i_slot_put(&h->graphs, g) : 0;
    if (id == 0) {
        free(g);
        return NULL;
    }
    g->id = id;
    g->capture = c;
    g->next = h->graph_list;
    if (g->next)
        g->next->prev = g;
    h->graph_list = g;
    h->counts.graphs++;
    return g;
}

void vpmm_host_i_graph_free(host_drv_t *h, host_graph_t *g)
{
    unref_all(h, g->refs, g->n_refs);
    vpmm_host_i_slot_drop(&h->graphs, g->id);
    if (g->prev)
        g->prev->next = g->next;
    else
        h->graph_list = g->next;
    if (g->next)
        g->next->prev = g->prev;
    h->counts.graphs--;
    free(g->refs);
    free(g);
}

/* ---- executable graphs -------------------------------------------------------------------- */

static int exec_pending(const host_exec_t *x)
{
    for (size_t i = 0; i < x->n_launches; i++)
        if (x->launches[i].stream->completed < x->launches[i].seq)
            return 1;
    return 0;
}

static void exec_free(host_drv_t *h, host_exec_t *x)
{
    unref_all(h, x->refs, x->n_refs);
    if (x->prev)
        x->prev->next = x->next;
    else
        h->exec_list = x->next;
    if (x->next)
        x->next->prev = x->prev;
    h->counts.graphs--;
    free(x->refs);
    free(x->launches);
    free(x);
}

void vpmm_host_i_graph_progress(host_drv_t *h)
{
    host_exec_t *x = h->exec_list;
    while (h->zombie_execs && x) {
        host_exec_t *next = x->next;
        if (x->id == 0 && !exec_pending(x)) {
            h->zombie_execs--;
            exec_free(h, x);
        }
        x = next;
    }
    run_destructors(h);
}

/* ---- test controls ------------------------------------------------------------------------ */

static vpmm_dres_t graph_instantiate(host_view_t *v, vpmm_graph_t g, vpmm_host_exec_t *out)
{
    host_drv_t *h = v->node;
    const host_graph_t *gr = graph_get(h, g);
    if (!gr || !out)
        return vpmm_host_i_fail_call(v, call_instantiate, VPMM_DRV_INVALID, CODE_INVALID_VALUE);
    host_exec_t *x = calloc(1, sizeof *x);
    host_uobj_t **refs = gr->n_refs ? malloc(gr->n_refs * sizeof *refs) : NULL;
    uint64_t id = x && (refs || !gr->n_refs) ? vpmm_host_i_slot_put(&h->execs, x) : 0;
    if (id == 0) {
        free(x);
        free(refs);
        return vpmm_host_i_fail_call(v, call_instantiate, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    }
    if (gr->n_refs)
        memcpy(refs, gr->refs, gr->n_refs * sizeof *refs);
    for (size_t i = 0; i < gr->n_refs; i++)
        refs[i]->refs++;
    x->id = id;
    x->refs = refs;
    x->n_refs = gr->n_refs;
    x->next = h->exec_list;
    if (x->next)
        x->next->prev = x;
    h->exec_list = x;
    h->counts.graphs++;
    *out = (vpmm_host_exec_t)(uintptr_t)id;
    return VPMM_DRV_OK;
}

static vpmm_dres_t graph_launch(host_view_t *v, vpmm_host_exec_t e, vpmm_stream_t s)
{
    host_drv_t *h = v->node;
    host_exec_t *x = exec_get(h, e);
    if (!x)
        return vpmm_host_i_fail_call(v, call_launch, VPMM_DRV_INVALID, CODE_INVALID_VALUE);
    host_stream_t *st = vpmm_host_i_stream_get(v, s);
    if (!st || RESERVE(x->launches, x->launches_cap, x->n_launches + 1))
        return vpmm_host_i_fail_call(v, call_launch, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    if (st->capture)
        return vpmm_host_i_fail_call(v, call_launch, VPMM_DRV_NOT_SUPPORTED, CODE_NOT_SUPPORTED);
    /* A launch is work like any other: the legacy stream's implicit synchronisation applies. */
    if (vpmm_host_i_sync_refused(h, st))
        return vpmm_host_i_fail_call(v, call_launch, VPMM_DRV_ERROR, CODE_CAPTURE_IMPLICIT);
    if (RESERVE(st->bar, st->bar_cap, st->bar_len + vpmm_host_i_sync_room(h, st)))
        return vpmm_host_i_fail_call(v, call_launch, VPMM_DRV_ERROR, CODE_OUT_OF_MEMORY);
    vpmm_host_i_sync_apply(h, st);
    host_launch_t *l = NULL;
    for (size_t i = 0; i < x->n_launches && !l; i++)
        if (x->launches[i].stream == st)
            l = &x->launches[i];
    if (!l) {
        l = &x->launches[x->n_launches++];
        l->stream = st;
    }
    l->seq = ++st->enqueued; /* later than any earlier launch on st: one record per stream */
    return VPMM_DRV_OK;
}

static vpmm_dres_t graph_destroy(host_view_t *v, vpmm_graph_t g)
{
    host_drv_t *h = v->node;
    host_graph_t *gr = graph_get(h, g);
    if (!gr)
        return vpmm_host_i_fail_call(v, call_graph_destroy, VPMM_DRV_INVALID, CODE_INVALID_VALUE);
    if (gr->capture) /* its capture owns it until end_capture */
        return vpmm_host_i_fail_call(v, call_graph_destroy, VPMM_DRV_ERROR, CODE_ILLEGAL_STATE);
    vpmm_host_i_graph_free(h, gr);
    run_destructors(h);
    return VPMM_DRV_OK;
}

static vpmm_dres_t exec_destroy(host_view_t *v, vpmm_host_exec_t e)
{
    host_drv_t *h = v->node;
    host_exec_t *x = exec_get(h, e);
    if (!x)
        return vpmm_host_i_fail_call(v, call_exec_destroy, VPMM_DRV_INVALID, CODE_INVALID_VALUE);
    vpmm_host_i_slot_drop(&h->execs, x->id);
    x->id = 0;
    if (exec_pending(x)) {
        h->zombie_execs++; /* the progress call that completes its launches frees it */
        return VPMM_DRV_OK;
    }
    exec_free(h, x);
    run_destructors(h);
    return VPMM_DRV_OK;
}

/* The public controls: each under the node's lock (the graph_destroy entry of the table is the
 * control itself, driver_host.c). */

vpmm_dres_t vpmm_host_graph_instantiate(vpmm_driver_t *d, vpmm_graph_t g, vpmm_host_exec_t *out)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    vpmm_dres_t res = v ? graph_instantiate(v, g, out) : VPMM_DRV_INVALID;
    vpmm_host_i_unlock_view(v);
    return res;
}

vpmm_dres_t vpmm_host_graph_launch(vpmm_driver_t *d, vpmm_host_exec_t e, vpmm_stream_t s)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    vpmm_dres_t res = v ? graph_launch(v, e, s) : VPMM_DRV_INVALID;
    vpmm_host_i_unlock_view(v);
    return res;
}

vpmm_dres_t vpmm_host_graph_destroy(vpmm_driver_t *d, vpmm_graph_t g)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    vpmm_dres_t res = v ? graph_destroy(v, g) : VPMM_DRV_INVALID;
    vpmm_host_i_unlock_view(v);
    return res;
}

vpmm_dres_t vpmm_host_exec_destroy(vpmm_driver_t *d, vpmm_host_exec_t e)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    vpmm_dres_t res = v ? exec_destroy(v, e) : VPMM_DRV_INVALID;
    vpmm_host_i_unlock_view(v);
    return res;
}

size_t vpmm_host_user_objects(vpmm_driver_t *d)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    size_t n = v ? v->node->counts.user_objects : 0;
    vpmm_host_i_unlock_view(v);
    return n;
}

size_t vpmm_host_graphs(vpmm_driver_t *d)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    size_t n = v ? v->node->counts.graphs : 0;
    vpmm_host_i_unlock_view(v);
    return n;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

void vpmm_host_i_graph_fini(host_drv_t *h)
{
    while (h->graph_list) {
        host_graph_t *next = h->graph_list->next;
        free(h->graph_list->refs);
        free(h->graph_list);
        h->graph_list = next;
    }
    while (h->exec_list) {
        host_exec_t *next = h->exec_list->next;
        free(h->exec_list->refs);
        free(h->exec_list->launches);
        free(h->exec_list);
        h->exec_list = next;
    }
    for (size_t i = 0; i < h->uobjs.len; i++)
        free(h->uobjs.slots[i].obj); /* no destructor runs at close (driver_host.h) */
    while (h->dead) {                /* empty between calls (I8); freed for safety */
        host_uobj_t *next = h->dead->next_dead;
        free(h->dead);
        h->dead = next;
    }
    free(h->uobjs.slots);
    free(h->graphs.slots);
    free(h->execs.slots);
}

/* ---- invariant check (I8, I9) ------------------------------------------------------------- */

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

/* Index of p in the sorted array v[0, n), or n. */
static size_t find_ptr(host_uobj_t *const *v, size_t n, const host_uobj_t *p)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)v[mid] < (uintptr_t)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo] == p ? lo : n;
}

/* Counts in held[] the references in refs[0, n) to each live object of live[0, n_live). */
static size_t count_refs(host_uobj_t *const *live, size_t n_live, uint64_t *held,
                         host_uobj_t *const *refs, size_t n, int verbose)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = find_ptr(live, n_live, refs[i]);
        CHECK_THAT(k < n_live, "I8 a graph or exec holds a dead user object");
        if (k < n_live)
            held[k]++;
    }
    return bad;
}

size_t vpmm_host_i_graph_check(const host_drv_t *h, int verbose)
{
    size_t bad = 0;

    /* I8: the live user objects, sorted by address, against the references held to them. */
    size_t n_live = 0;
    for (size_t i = 0; i < h->uobjs.len; i++)
        n_live += h->uobjs.slots[i].obj != NULL;
    CHECK_THAT(n_live == h->counts.user_objects, "I8 %zu live user objects, counted %zu", n_live,
               h->counts.user_objects);
    CHECK_THAT(h->dead == NULL, "I8 a destructor is owed between calls");
    host_uobj_t **live = malloc((n_live + 1) * sizeof *live);
    uint64_t *held = calloc(n_live + 1, sizeof *held);
    if (live && held) {
        size_t k = 0;
        for (size_t i = 0; i < h->uobjs.len; i++)
            if (h->uobjs.slots[i].obj)
                live[k++] = h->uobjs.slots[i].obj;
        qsort(live, n_live, sizeof *live, cmp_ptr);
        for (const host_graph_t *g = h->graph_list; g; g = g->next)
            bad += count_refs(live, n_live, held, g->refs, g->n_refs, verbose);
        for (const host_exec_t *x = h->exec_list; x; x = x->next)
            bad += count_refs(live, n_live, held, x->refs, x->n_refs, verbose);
        for (size_t i = 0; i < n_live; i++) {
            const host_uobj_t *o = live[i];
            CHECK_THAT(vpmm_host_i_slot_get(&h->uobjs, o->id) == o,
                       "I8 user object %#llx does not resolve to its record",
                       (unsigned long long)o->id);
            CHECK_THAT(o->refs >= 1 && o->refs == o->caller_refs + held[i],
                       "I8 user object %#llx: %llu references, caller %llu + held %llu",
                       (unsigned long long)o->id, (unsigned long long)o->refs,
                       (unsigned long long)o->caller_refs, (unsigned long long)held[i]);
        }
    }
    free(live);
    free(held);

    /* I9: graphs. */
    size_t n_graphs = 0, n_execs = 0, n_zombies = 0, live_graph_slots = 0, live_exec_slots = 0;
    for (const host_graph_t *g = h->graph_list; g; g = g->next) {
        n_graphs++;
        CHECK_THAT(g->id != 0 && vpmm_host_i_slot_get(&h->graphs, g->id) == g,
                   "I9 graph %#llx does not resolve to its record", (unsigned long long)g->id);
        CHECK_THAT(!g->capture || (vpmm_host_i_capture_find(h, g->capture->id) == g->capture &&
                                   g->capture->graph == g),
                   "I9 graph %#llx names a capture that does not build it",
                   (unsigned long long)g->id);
    }
    for (const host_capture_t *c = h->captures; c; c = c->next)
        CHECK_THAT(c->graph && c->graph->capture == c, "I9 capture %llu has no graph of its own",
                   (unsigned long long)c->id);
    for (size_t i = 0; i < h->graphs.len; i++)
        live_graph_slots += h->graphs.slots[i].obj != NULL;
    CHECK_THAT(live_graph_slots == n_graphs, "I9 %zu graph slots, %zu graphs listed",
               live_graph_slots, n_graphs);

    /* I9: executable graphs and their launches. */
    for (const host_exec_t *x = h->exec_list; x; x = x->next) {
        n_execs++;
        if (x->id == 0) {
            n_zombies++;
            CHECK_THAT(exec_pending(x), "I9 a destroyed exec with no pending launch lives on");
        } else {
            CHECK_THAT(vpmm_host_i_slot_get(&h->execs, x->id) == x,
                       "I9 exec %#llx does not resolve to its record", (unsigned long long)x->id);
        }
        for (size_t i = 0; i < x->n_launches; i++) {
            const host_launch_t *l = &x->launches[i];
            CHECK_THAT(l->seq <= l->stream->enqueued, "I9 a launch past its stream's work");
            for (size_t j = 0; j < i; j++)
                CHECK_THAT(x->launches[j].stream != l->stream, "I9 two launch records, one stream");
        }
    }
    for (size_t i = 0; i < h->execs.len; i++)
        live_exec_slots += h->execs.slots[i].obj != NULL;
    CHECK_THAT(live_exec_slots == n_execs - n_zombies, "I9 %zu exec slots, %zu live execs",
               live_exec_slots, n_execs - n_zombies);
    CHECK_THAT(n_zombies == h->zombie_execs, "I9 %zu destroyed execs pending, counted %zu",
               n_zombies, h->zombie_execs);
    CHECK_THAT(n_graphs + n_execs == h->counts.graphs, "I9 %zu graphs + %zu execs, counted %zu",
               n_graphs, n_execs, h->counts.graphs);
    return bad;
}

const host_graph_ops_t vpmm_host_i_graph_ops = {
    .create = vpmm_host_i_graph_create,
    .free = vpmm_host_i_graph_free,
    .progress = vpmm_host_i_graph_progress,
};
