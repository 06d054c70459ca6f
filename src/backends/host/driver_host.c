/*
 * driver_host.c — the host emulation backend's node and views (driver_host.h): open, the views of
 * other devices, the process-wide shared node, close, the driver table every view carries,
 * vpmm_host_counts, vpmm_host_can_access, vpmm_host_check and vpmm_host_check_access.
 * driver_host_mem.c owns the memory side, driver_host_stream.c the simulated streams, events and
 * capture, driver_host_graph.c the graphs and user objects; driver_host_internal.h holds what they
 * share. Calls go one way: driver_host.c -> driver_host_mem.c, driver_host.c -> driver_host_graph.c
 * -> driver_host_stream.c, and all of them -> driver_host_base.c; the stream side reaches graphs
 * only through h->graph_ops.
 *
 * A node is the state of ndev emulated devices of one machine: one memfd, one address space, one
 * stream table. A view (host_view_t) is the vpmm_driver_t of one device of it; the node counts its
 * views and is freed when the last one closes:
 *
 *     vpmm_host_open ──> view(dev 0) ─┐
 *     vpmm_host_open_device(v, 1) ──> view(dev 1) ─┼──> node { devs[0..ndev), memfd, streams, ... }
 *     vpmm_host_open_shared(.., 1) ─> view(dev 1) ─┘     (the shared node: one per process)
 *
 * Thread-safety: every entry of the table, of every view, runs under its node's recursive mutex
 * (driver.h rule 7; the wrappers are below), and so does every control. The shared node's pointer
 * is guarded by a process mutex, taken before the node's (open_shared, and close of its views).
 * Invariants: listed as equations above struct host_drv in driver_host_internal.h, all of them
 * checked by vpmm_host_check() at the end of this file (I6, I7, I10 and I11 here; I1..I5 through
 * vpmm_host_i_mem_check, I8 and I9 through vpmm_host_i_graph_check).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memfd_create */
#endif

#include "driver_host_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_GRANULARITY    ((size_t)2 << 20)
#define DEFAULT_LIMIT          ((size_t)80 << 30)
#define DEFAULT_SHARED_DEVICES 8

/* ---- the driver table --------------------------------------------------------------------- */

/*
 * Thread safety (driver.h rule 7): the table's entries may be called from several threads at once,
 * through one view or several of one node, so each runs under the node's recursive mutex
 * (recursive: a user object's destructor may call the backend from inside a call).
 */
#define LOCKED_ENTRY(name, params, args)                                                           \
    static vpmm_dres_t locked_##name params                                                        \
    {                                                                                              \
        host_drv_t *h_ = vpmm_host_i_view(d)->node;                                                \
        pthread_mutex_lock(&h_->lock);                                                             \
        vpmm_dres_t r_ = vpmm_host_i_##name args;                                                  \
        pthread_mutex_unlock(&h_->lock);                                                           \
        return r_;                                                                                 \
    }

LOCKED_ENTRY(granularity, (vpmm_driver_t * d, size_t *o), (d, o))
LOCKED_ENTRY(va_reserve, (vpmm_driver_t * d, size_t s, size_t a, uintptr_t *o), (d, s, a, o))
LOCKED_ENTRY(va_free, (vpmm_driver_t * d, uintptr_t va, size_t s), (d, va, s))
LOCKED_ENTRY(mem_create, (vpmm_driver_t * d, size_t s, vpmm_drv_handle_t *o), (d, s, o))
LOCKED_ENTRY(mem_release, (vpmm_driver_t * d, vpmm_drv_handle_t hd), (d, hd))
LOCKED_ENTRY(mem_map, (vpmm_driver_t * d, uintptr_t va, size_t s, vpmm_drv_handle_t hd, size_t off),
             (d, va, s, hd, off))
LOCKED_ENTRY(mem_unmap, (vpmm_driver_t * d, uintptr_t va, size_t s), (d, va, s))
LOCKED_ENTRY(set_access, (vpmm_driver_t * d, uintptr_t va, size_t s, const int *p, size_t n),
             (d, va, s, p, n))
LOCKED_ENTRY(event_create, (vpmm_driver_t * d, vpmm_stream_t on, vpmm_drv_event_t *o), (d, on, o))
LOCKED_ENTRY(event_destroy, (vpmm_driver_t * d, vpmm_drv_event_t ev), (d, ev))
LOCKED_ENTRY(event_record, (vpmm_driver_t * d, vpmm_drv_event_t ev, vpmm_stream_t s), (d, ev, s))
LOCKED_ENTRY(event_query, (vpmm_driver_t * d, vpmm_drv_event_t ev), (d, ev))
LOCKED_ENTRY(stream_wait_event, (vpmm_driver_t * d, vpmm_stream_t s, vpmm_drv_event_t ev),
             (d, s, ev))
LOCKED_ENTRY(capture_info,
             (vpmm_driver_t * d, vpmm_stream_t s, vpmm_capture_status_t *st, uint64_t *id,
              vpmm_graph_t *g),
             (d, s, st, id, g))
LOCKED_ENTRY(mem_get_info, (vpmm_driver_t * d, size_t *f, size_t *t), (d, f, t))
LOCKED_ENTRY(synchronize, (vpmm_driver_t * d), (d))
LOCKED_ENTRY(begin_capture, (vpmm_driver_t * d, vpmm_stream_t s, vpmm_capture_mode_t m), (d, s, m))
LOCKED_ENTRY(end_capture, (vpmm_driver_t * d, vpmm_stream_t s, vpmm_graph_t *g), (d, s, g))
LOCKED_ENTRY(user_object_create,
             (vpmm_driver_t * d, vpmm_drv_uobj_fn fn, void *arg, vpmm_drv_uobj_t *o),
             (d, fn, arg, o))
LOCKED_ENTRY(graph_retain_user_object, (vpmm_driver_t * d, vpmm_graph_t g, vpmm_drv_uobj_t o),
             (d, g, o))
LOCKED_ENTRY(user_object_release, (vpmm_driver_t * d, vpmm_drv_uobj_t o), (d, o))
LOCKED_ENTRY(revoke_access, (vpmm_driver_t * d, uintptr_t va, size_t s, int peer), (d, va, s, peer))
LOCKED_ENTRY(get_access, (vpmm_driver_t * d, uintptr_t va, int dev, int *o), (d, va, dev, o))
LOCKED_ENTRY(stream_device, (vpmm_driver_t * d, vpmm_stream_t s, int *o), (d, s, o))
LOCKED_ENTRY(mem_export, (vpmm_driver_t * d, vpmm_drv_handle_t hd, vpmm_drv_shareable_t *o),
             (d, hd, o))
LOCKED_ENTRY(mem_import, (vpmm_driver_t * d, const vpmm_drv_shareable_t *in, vpmm_drv_handle_t *o),
             (d, in, o))

static void view_close(vpmm_driver_t *d);

/* What every view carries; open fills in the device fields. */
static const vpmm_driver_t host_table = {
    .name = vpmm_host_i_name,
    .granularity = locked_granularity,
    .va_reserve = locked_va_reserve,
    .va_free = locked_va_free,
    .mem_create = locked_mem_create,
    .mem_release = locked_mem_release,
    .mem_map = locked_mem_map,
    .mem_unmap = locked_mem_unmap,
    .set_access = locked_set_access,
    .event_create = locked_event_create,
    .event_destroy = locked_event_destroy,
    .event_record = locked_event_record,
    .event_query = locked_event_query,
    .stream_wait_event = locked_stream_wait_event,
    .capture_info = locked_capture_info,
    .mem_get_info = locked_mem_get_info,
    .synchronize = locked_synchronize,
    .begin_capture = locked_begin_capture,
    .end_capture = locked_end_capture,
    .user_object_create = locked_user_object_create,
    .graph_retain_user_object = locked_graph_retain_user_object,
    .user_object_release = locked_user_object_release,
    .graph_destroy = vpmm_host_graph_destroy, /* the control, which takes the lock itself */
    .revoke_access = locked_revoke_access,
    .get_access = locked_get_access,
    .stream_device = locked_stream_device,
    .mem_export = locked_mem_export,
    .mem_import = locked_mem_import,
    .close = view_close,
};

/* ---- nodes and views ---------------------------------------------------------------------- */

/* The options with their defaults applied (devices: default_devices when 0); -1 when invalid. */
static int resolve_options(const vpmm_host_options_t *opt, int default_devices,
                           vpmm_host_options_t *out)
{
    vpmm_host_options_t o = opt ? *opt : (vpmm_host_options_t){ 0 };
    long page = sysconf(_SC_PAGESIZE);
    if (o.granularity == 0)
        o.granularity = DEFAULT_GRANULARITY;
    if (o.memory_limit == 0)
        o.memory_limit = DEFAULT_LIMIT;
    if (o.devices == 0)
        o.devices = default_devices;
    if (page <= 0 || o.granularity % (size_t)page != 0 || o.devices < 1 ||
        o.devices > VPMM_DRV_MAX_DEVICES)
        return -1;
    if (o.devices < 64 && (o.isolated >> o.devices) != 0)
        return -1; /* isolates a device the node lacks */
    *out = o;
    return 0;
}

static void node_free(host_drv_t *h)
{
    vpmm_host_i_mem_fini(h);
    vpmm_host_i_stream_fini(h);
    vpmm_host_i_graph_fini(h); /* runs no destructor (driver_host.h) */
    free(h->devs);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

/* A node with no view yet, from resolved options. */
static vpmm_dres_t node_create(const vpmm_host_options_t *o, host_drv_t **out)
{
    host_drv_t *h = calloc(1, sizeof *h);
    host_dev_t *devs = h ? calloc((size_t)o->devices, sizeof *devs) : NULL;
    struct stat sb;
    if (!devs) {
        free(h);
        return VPMM_DRV_OUT_OF_MEMORY;
    }
    h->fd = memfd_create("vpmm-host", MFD_CLOEXEC);
    if (h->fd < 0 || fstat(h->fd, &sb) != 0) {
        if (h->fd >= 0)
            close(h->fd);
        free(devs);
        free(h);
        return VPMM_DRV_NO_DEVICE;
    }
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&h->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    h->fd_dev = sb.st_dev;
    h->fd_ino = sb.st_ino;
    h->ndev = o->devices;
    h->isolated = o->isolated;
    h->devs = devs;
    h->gran = o->granularity;
    h->limit = o->memory_limit;
    h->va_limit = o->va_limit;
    h->rng = 0x9E3779B97F4A7C15ULL;
    h->next_capture_id = 1;
    h->graph_ops = &vpmm_host_i_graph_ops;
    *out = h;
    return VPMM_DRV_OK;
}

/* A new view of device dev of h (caller holds h's lock or owns h alone); NULL when out of host
 * memory. */
static host_view_t *view_add(host_drv_t *h, int dev, int null_per_thread, int exportable)
{
    host_view_t *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->base = host_table;
    v->base.device = dev;
    v->base.device_count = h->ndev;
    v->base.peer_capable = vpmm_host_i_reach(h, dev);
    v->base.exportable = exportable;
    v->node = h;
    v->null_per_thread = null_per_thread;
    v->next = h->views;
    if (v->next)
        v->next->prev = v;
    h->views = v;
    h->n_views++;
    return v;
}

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static host_drv_t *shared_node; /* guarded by shared_mu */

/* The view's close(): the node goes with its last view. */
static void view_close(vpmm_driver_t *d)
{
    host_view_t *v = vpmm_host_i_as_view(d);
    if (!v)
        return;
    host_drv_t *h = v->node;
    int shared = h->shared; /* set at open, never changed */
    if (shared)
        pthread_mutex_lock(&shared_mu);
    pthread_mutex_lock(&h->lock);
    if (v->prev)
        v->prev->next = v->next;
    else
        h->views = v->next;
    if (v->next)
        v->next->prev = v->prev;
    int last = --h->n_views == 0;
    if (last && shared)
        shared_node = NULL; /* the next open_shared makes a new one */
    pthread_mutex_unlock(&h->lock);
    if (shared)
        pthread_mutex_unlock(&shared_mu);
    free(v);
    if (last)
        node_free(h); /* nobody else can reach it any more */
}

vpmm_dres_t vpmm_host_open(const vpmm_host_options_t *opt, vpmm_driver_t **out)
{
    vpmm_host_options_t o;
    host_drv_t *h = NULL;
    if (!out)
        return VPMM_DRV_INVALID;
    *out = NULL;
    if (resolve_options(opt, 1, &o) != 0)
        return VPMM_DRV_INVALID;
    vpmm_dres_t r = node_create(&o, &h);
    if (r != VPMM_DRV_OK)
        return r;
    host_view_t *v = view_add(h, 0, o.per_thread_default_stream != 0, !o.not_exportable);
    if (!v) {
        node_free(h);
        return VPMM_DRV_OUT_OF_MEMORY;
    }
    *out = &v->base;
    return VPMM_DRV_OK;
}

vpmm_dres_t vpmm_host_open_device(vpmm_driver_t *sibling, int device, vpmm_driver_t **out)
{
    if (!out)
        return VPMM_DRV_INVALID;
    *out = NULL;
    host_view_t *s = vpmm_host_i_lock_view(sibling);
    if (!s)
        return VPMM_DRV_INVALID;
    vpmm_dres_t r = VPMM_DRV_INVALID;
    if (device >= 0 && device < s->node->ndev) {
        host_view_t *v = view_add(s->node, device, s->null_per_thread, s->base.exportable);
        r = v ? VPMM_DRV_OK : VPMM_DRV_OUT_OF_MEMORY;
        if (v)
            *out = &v->base;
    }
    vpmm_host_i_unlock_view(s);
    return r;
}

vpmm_dres_t vpmm_host_open_shared(const vpmm_host_options_t *opt, int device, vpmm_driver_t **out)
{
    vpmm_host_options_t o;
    if (!out)
        return VPMM_DRV_INVALID;
    *out = NULL;
    if (resolve_options(opt, DEFAULT_SHARED_DEVICES, &o) != 0)
        return VPMM_DRV_INVALID;
    pthread_mutex_lock(&shared_mu);
    host_drv_t *h = shared_node;
    int created = 0;
    vpmm_dres_t r = VPMM_DRV_OK;
    if (!h) {
        r = node_create(&o, &h);
        created = r == VPMM_DRV_OK;
        if (created)
            h->shared = 1;
    } else if (o.granularity != h->gran || o.memory_limit != h->limit) {
        r = VPMM_DRV_INVALID; /* another program's idea of the machine */
    }
    if (r == VPMM_DRV_OK && (device < 0 || device >= h->ndev))
        r = VPMM_DRV_INVALID;
    if (r == VPMM_DRV_OK) {
        pthread_mutex_lock(&h->lock);
        host_view_t *v = view_add(h, device, o.per_thread_default_stream != 0, !o.not_exportable);
        pthread_mutex_unlock(&h->lock);
        if (v)
            *out = &v->base;
        else
            r = VPMM_DRV_OUT_OF_MEMORY;
    }
    if (created && r != VPMM_DRV_OK)
        node_free(h);
    else if (created)
        shared_node = h;
    pthread_mutex_unlock(&shared_mu);
    return r;
}

/* ---- inspection --------------------------------------------------------------------------- */

void vpmm_host_counts(vpmm_driver_t *d, vpmm_host_counts_t *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    host_view_t *v = vpmm_host_i_lock_view(d);
    if (!v)
        return;
    *out = v->node->counts;
    struct stat sb;
    if (fstat(v->node->fd, &sb) == 0)
        out->touched_bytes = (size_t)sb.st_blocks * 512u;
    vpmm_host_i_unlock_view(v);
}

int vpmm_host_can_access(vpmm_driver_t *d, uintptr_t va, size_t size)
{
    host_view_t *v = vpmm_host_i_lock_view(d);
    int ok = v ? vpmm_host_i_can_access(v, va, size) : 0;
    vpmm_host_i_unlock_view(v);
    return ok;
}

size_t vpmm_host_check_access(vpmm_driver_t *d, int verbose)
{
    size_t bad = 0;
    host_view_t *v = vpmm_host_i_lock_view(d);
    CHECK_THAT(v != NULL, "not a host driver");
    if (v)
        bad += vpmm_host_i_access_check(v->node, verbose, 1);
    vpmm_host_i_unlock_view(v);
    return bad;
}

/* ---- invariant check (I6, I7, I10, I11; the others through the parts' checks) ------------- */

/* I10 for device k: its legacy record, its per-thread map, its blocking streams. */
static size_t check_device_streams(const host_drv_t *h, int k, int verbose)
{
    const host_dev_t *dv = &h->devs[k];
    size_t bad = 0, n_blocking = 0;
    uint64_t next_token = vpmm_host_i_next_token();
    for (size_t i = 0; i < h->stream_cap; i++) {
        const host_stream_t *st = h->stream_tab[i];
        if (st && st->dev == k)
            n_blocking += st->thread != 0;
    }
    if (dv->legacy)
        CHECK_THAT(dv->legacy->key == HOST_STREAM_LEGACY && dv->legacy->dev == k &&
                       dv->legacy->thread == 0 && !dv->legacy->blocking && !dv->legacy->capture,
                   "I10 device %d's legacy stream is per-thread, capturing or misfiled", k);
    for (size_t i = 0; i < dv->n_ptds; i++) {
        const host_ptds_t *p = &dv->ptds[i];
        CHECK_THAT(p->token != 0 && p->token < next_token, "I10 thread token %llu never issued",
                   (unsigned long long)p->token);
        CHECK_THAT(i == 0 || dv->ptds[i - 1].token < p->token,
                   "I10 device %d's thread map out of order at %zu", k, i);
        CHECK_THAT(p->stream && p->stream->key == (vpmm_stream_t)(void *)p->stream &&
                       p->stream->thread == p->token && p->stream->dev == k,
                   "I10 thread %llu maps to a stream not its own on device %d",
                   (unsigned long long)p->token, k);
        CHECK_THAT(!p->stream || vpmm_host_i_stream_find(h, p->stream->key) == p->stream,
                   "I10 thread %llu's stream is not in the table", (unsigned long long)p->token);
    }
    CHECK_THAT(n_blocking == dv->n_ptds, "I10 device %d: %zu per-thread records, %zu in its map", k,
               n_blocking, dv->n_ptds);
    return bad;
}

/* I7 for one record (of the table or a legacy one). */
static size_t check_stream(const host_drv_t *h, const host_stream_t *st, int verbose)
{
    size_t bad = 0;
    CHECK_THAT(st->dev >= 0 && st->dev < h->ndev, "I7 stream %p on device %d", (void *)st->key,
               st->dev);
    CHECK_THAT(st->completed <= st->enqueued, "I7 stream %p completed past enqueued",
               (void *)st->key);
    CHECK_THAT(!st->busy, "I7 stream %p left busy", (void *)st->key);
    for (size_t j = st->bar_head; j < st->bar_len; j++) {
        const host_barrier_t *b = &st->bar[j];
        CHECK_THAT(b->at >= st->completed && b->at <= st->enqueued,
                   "I7 stream %p barrier %zu out of range", (void *)st->key, j);
        CHECK_THAT(j == st->bar_head || st->bar[j - 1].at <= b->at,
                   "I7 stream %p barriers out of order", (void *)st->key);
        CHECK_THAT(b->signaller && b->seq <= b->signaller->enqueued,
                   "I7 stream %p barrier %zu waits for work never enqueued", (void *)st->key, j);
    }
    CHECK_THAT(!st->capture || vpmm_host_i_capture_find(h, st->capture->id) == st->capture,
               "I7 stream %p in an unknown capture", (void *)st->key);
    return bad;
}

static size_t check_streams(const host_drv_t *h, int verbose)
{
    size_t bad = 0, n_streams = 0, live_events = 0;
    for (size_t i = 0; i < h->events.len; i++) {
        const host_event_t *ev = h->events.slots[i].obj;
        if (!ev)
            continue;
        live_events++;
        CHECK_THAT(ev->dev >= 0 && ev->dev < h->ndev, "I6 event on device %d", ev->dev);
        CHECK_THAT(!ev->stream || ev->stream->dev == ev->dev,
                   "I6 event of device %d recorded on a stream of device %d", ev->dev,
                   ev->stream->dev);
    }
    CHECK_THAT(live_events == h->counts.events, "I6 %zu live events, counted %zu", live_events,
               h->counts.events);
    for (size_t i = 0; i < h->stream_cap; i++) {
        const host_stream_t *st = h->stream_tab[i];
        if (!st)
            continue;
        n_streams++;
        CHECK_THAT(st->key != NULL && st->key != HOST_STREAM_PER_THREAD &&
                       st->key != HOST_STREAM_LEGACY,
                   "I10 a record under the unresolved handle %p", (void *)st->key);
        CHECK_THAT(st->blocking == (st->thread != 0), "I10 stream %p blocking %d, thread %llu",
                   (void *)st->key, st->blocking, (unsigned long long)st->thread);
        bad += check_stream(h, st, verbose);
    }
    CHECK_THAT(n_streams == h->n_streams, "I7 stream table holds %zu, counted %zu", n_streams,
               h->n_streams);
    for (int k = 0; k < h->ndev; k++) {
        if (h->devs[k].legacy)
            bad += check_stream(h, h->devs[k].legacy, verbose);
        bad += check_device_streams(h, k, verbose);
    }
    for (const host_capture_t *c = h->captures; c; c = c->next)
        CHECK_THAT(c->id < h->next_capture_id && c->origin && c->origin->capture == c,
                   "I7 capture %llu has lost its origin", (unsigned long long)c->id);
    return bad;
}

/* I11: the views and the devices' reach. */
static size_t check_views(const host_drv_t *h, int verbose)
{
    size_t bad = 0, n = 0;
    for (const host_view_t *v = h->views; v; v = v->next) {
        int k = v->base.device;
        n++;
        CHECK_THAT(v->node == h && (!v->next || v->next->prev == v), "I11 view %zu is misfiled", n);
        CHECK_THAT(k >= 0 && k < h->ndev && v->base.device_count == h->ndev,
                   "I11 view of device %d of %d, node has %d", k, v->base.device_count, h->ndev);
        CHECK_THAT(k < 0 || k >= h->ndev || v->base.peer_capable == vpmm_host_i_reach(h, k),
                   "I11 view of device %d reaches %#llx", k,
                   (unsigned long long)v->base.peer_capable);
        CHECK_THAT(v->base.exportable == 0 || v->base.exportable == 1,
                   "I11 view of device %d: exportable %d", k, v->base.exportable);
    }
    CHECK_THAT(n == h->n_views && n >= 1, "I11 %zu views listed, %zu counted", n, h->n_views);
    for (int j = 0; j < h->ndev; j++) {
        uint64_t rj = vpmm_host_i_reach(h, j);
        CHECK_THAT(rj >> j & 1, "I11 device %d cannot reach itself", j);
        for (int k = 0; k < h->ndev; k++)
            CHECK_THAT((rj >> k & 1) == (vpmm_host_i_reach(h, k) >> j & 1),
                       "I11 devices %d and %d reach each other one way only", j, k);
    }
    return bad;
}

size_t vpmm_host_check(vpmm_driver_t *d, int verbose)
{
    size_t bad = 0;
    host_view_t *v = vpmm_host_i_lock_view(d);
    CHECK_THAT(v != NULL, "not a host driver");
    if (!v)
        return bad;
    const host_drv_t *h = v->node;
    bad += check_views(h, verbose);
    bad += vpmm_host_i_mem_check(h, verbose);
    bad += vpmm_host_i_access_check(h, verbose, 0);
    bad += check_streams(h, verbose);
    bad += vpmm_host_i_graph_check(h, verbose);
    vpmm_host_i_unlock_view(v);
    return bad;
}
