/*
 * torch_adapter.c — vpmm as PyTorch's CUDAAllocator, the C half (contracts in torch_adapter.h).
 *
 * Statistics (vta_stats_t, PyTorch's DeviceStats). Kept here for what passes through this file,
 * read from vpmm for what only the pool knows. The pool type of a block is the pool it lives in,
 * as PyTorch's: every block of vpmm lives in its pages, of one size, so all are "large" (the
 * small-pool arrays hold only pools with their own allocator), and a snapshot's segments add up
 * to these figures type by type (PyTorch's _check_memory_stat_consistency):
 *   allocation, allocated_bytes, requested_bytes   each malloc / free: the count, the size vpmm
 *                                                  hands out (rounded to VPMM_ALIGNMENT), the
 *                                                  size asked for
 *   active, active_bytes                           the same (a block freed while another stream
 *                                                  uses it is vpmm's deferred free: not counted)
 *   reserved_bytes                                 vpmm's mapped bytes (all "large": vpmm has one
 *                                                  page size); allocated / freed: pages created /
 *                                                  released since the last accumulated reset
 *   segment                                        vpmm's physical handles
 *   inactive_split, inactive_split_bytes           vpmm's free regions and free bytes, at the call
 *   num_ooms                                       out-of-memory failures of vta_malloc
 *   num_device_alloc / num_device_free             handles created / released
 *   num_alloc_retries                              out-of-memory failures retried after PyTorch's
 *                                                  free-memory callbacks freed something
 *   num_sync_all_streams                           emptyCache's device synchronisations
 *                                                  (vta_note_sync_all), as the native
 *                                                  allocator counts its waits on every
 *                                                  pending block's events there
 *   max_split_size                                 -1 (PyTorch's "unset"); oversize_*: 0
 * A MemPool with its own allocator (vta_pool_incref_external): its allocations come from that
 * allocator (the C++ layer calls it), never from vpmm; each counts as an allocation and as a
 * segment of its own (reserved, num_device_alloc/free), and shows as a one-block segment of its
 * pool in snapshots — the native allocator's view of memory it got from a pool's allocator.
 * Peaks: the ones kept here follow each change; the pool's come from vpmm (peak_mapped_bytes) or
 * from the highest value seen by vta_get_stats.
 *
 * Mempool ids. PyTorch never reuses an id, so an entry lives from its first reference to its last
 * and is then forgotten; its graph pool's handle goes with it (vpmm returns the pages once the
 * graphs are gone; allocations still live become shared ones, valid as before).
 *
 * Snapshots and segment events are torch_adapter_segments.c's.
 *
 * Several devices. PyTorch names a device with each call, but not always the one whose pool holds
 * the pointer: a tensor is freed while another device is current, recordStream names a stream of
 * another device. So frees and recordStream go by the pointer (vta_owner asks each pool, the
 * DataPtr's device first), and each pool works whatever device is current (vpmm's rule). Peer
 * access is vpmm's to give: memory mapped with cuMemMap is reachable from another device only
 * through cuMemSetAccess on its own pool (vta_grant_peer), cudaDeviceEnablePeerAccess covers
 * cudaMalloc memory alone.
 *
 * CUDA IPC (shareIpcHandle, getIpcDevPtr, the shares a free ends) is torch_adapter_ipc.c's.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torch_adapter.h"

/* ---- small helpers ------------------------------------------------------------------------- */

int vta_i_grow(void *arr_ptr, size_t *cap, size_t need, size_t elem, size_t first)
{
    size_t n = *cap ? *cap : (first ? first : 1);
    void *old, *p;
    if (need <= *cap)
        return 0;
    if (elem == 0 || n > SIZE_MAX / elem)
        return -1;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem)
            return -1;
        n *= 2;
    }
    memcpy(&old, arr_ptr, sizeof old);
    p = realloc(old, n * elem);
    if (p == NULL)
        return -1;
    memcpy(arr_ptr, &p, sizeof p);
    *cap = n;
    return 0;
}

static int id_eq(vta_pool_id_t a, vta_pool_id_t b)
{
    return a.first == b.first && a.second == b.second;
}

static int id_default(vta_pool_id_t a)
{
    return a.first == 0 && a.second == 0;
}

static void stat_increase(vta_stat_t *s, int64_t n)
{
    s->current += n;
    s->allocated += n;
    if (s->current > s->peak)
        s->peak = s->current;
}

static void stat_decrease(vta_stat_t *s, int64_t n)
{
    s->current -= n;
    s->freed += n;
}

/* A stat whose current value vpmm gives: the peak follows what was seen. */
static void stat_observe(vta_stat_t *s, int64_t current)
{
    s->current = current;
    if (current > s->peak)
        s->peak = current;
}

static size_t rounded(size_t size)
{
    return (size + VPMM_ALIGNMENT - 1) / VPMM_ALIGNMENT * VPMM_ALIGNMENT;
}

/* Counts one allocation of `size` bytes asked, `handed` handed out, coming (sign +1) or going
 * (-1), in the pool type `type`. Under d->lock. */
static void count_block(vta_device_t *d, size_t size, size_t handed, int sign, int type)
{
    const int types[2] = { VTA_ALL, type };
    vta_stats_t *s = &d->stats;
    for (int i = 0; i < 2; i++) {
        void (*f)(vta_stat_t *, int64_t) = sign > 0 ? stat_increase : stat_decrease;
        f(&s->allocation[types[i]], 1);
        f(&s->active[types[i]], 1);
        f(&s->allocated_bytes[types[i]], (int64_t)handed);
        f(&s->active_bytes[types[i]], (int64_t)handed);
        f(&s->requested_bytes[types[i]], (int64_t)size);
    }
}

/* vpmm's own allocation of `size` (asked): VPMM_ALIGNMENT-rounded, in the large pool (see
 * "Statistics"). Under d->lock. */
static void count_alloc(vta_device_t *d, size_t size, int sign)
{
    count_block(d, size, rounded(size), sign, VTA_LARGE);
}

static vta_pool_entry_t *entry_of(vta_device_t *d, vta_pool_id_t id)
{
    for (size_t i = 0; i < d->npools; i++)
        if (id_eq(d->pools[i].id, id))
            return &d->pools[i];
    return NULL;
}

static unsigned gp_id(const vpmm_graph_pool_t *gp)
{
    vpmm_graph_pool_stats_t s;
    return vpmm_graph_pool_stats(gp, &s) == VPMM_SUCCESS ? s.id : 0;
}

/* ---- device -------------------------------------------------------------------------------- */

int vta_device_init(vta_device_t *d, vpmm_pool_t *pool, int device)
{
    vpmm_stats_t s;
    memset(d, 0, sizeof *d);
    if (pthread_mutex_init(&d->lock, NULL) != 0)
        return -1;
    if (pthread_mutex_init(&d->seg_lock, NULL) != 0) {
        pthread_mutex_destroy(&d->lock);
        return -1;
    }
    d->pool = pool;
    d->device = device;
    d->fraction = 1.0;
    d->stats.max_split_size = -1;
    if (vpmm_get_stats(pool, &s) == VPMM_SUCCESS) {
        d->base_created = s.pages_created;
        d->base_released = s.pages_released;
        d->page_size = s.page_size;
    }
    return 0;
}

void vta_device_fini(vta_device_t *d)
{
    if (d->sink != NULL) /* the pool outlives this state: its last events reach no one */
        (void)vpmm_pool_set_segment_hook(d->pool, NULL, NULL);
    for (size_t i = 0; i < d->npools; i++)
        if (d->pools[i].gp != NULL)
            (void)vpmm_graph_pool_release(d->pools[i].gp);
    free(d->exported);
    free(d->names);
    pthread_mutex_destroy(&d->seg_lock);
    free(d->pools);
    free(d->ext);
    pthread_mutex_destroy(&d->lock);
    memset(d, 0, sizeof *d);
}

/* ---- allocation ---------------------------------------------------------------------------- */

vpmm_status_t vta_malloc(vta_device_t *d, size_t size, vpmm_stream_t stream, vta_pool_id_t id,
                         void **out)
{
    vpmm_graph_pool_t *gp = NULL;
    vpmm_status_t st;

    *out = NULL;
    if (!id_default(id)) {
        pthread_mutex_lock(&d->lock);
        gp = vta_pool_graph_pool(d, id);
        pthread_mutex_unlock(&d->lock);
        if (gp == NULL)
            return VPMM_ERROR_INVALID_ARGUMENT;
    }
    /* Not under d->lock: a growth may take a while, and other threads allocate meanwhile. */
    st = gp ? vpmm_graph_pool_malloc(gp, size, stream, out)
            : vpmm_malloc(d->pool, size, stream, out);
    pthread_mutex_lock(&d->lock);
    if (st == VPMM_SUCCESS)
        count_alloc(d, size, +1);
    else if (vta_is_oom(st))
        d->stats.num_ooms++;
    pthread_mutex_unlock(&d->lock);
    return st;
}

vpmm_status_t vta_free(vta_device_t *d, void *ptr)
{
    vpmm_region_info_t info;
    vpmm_status_t st;
    if (ptr == NULL)
        return VPMM_SUCCESS;
    st = vpmm_pointer_info(d->pool, ptr, &info);
    return st == VPMM_SUCCESS ? vta_free_known(d, ptr, &info) : st;
}

vpmm_status_t vta_free_known(vta_device_t *d, void *ptr, const vpmm_region_info_t *info)
{
    vpmm_status_t st;
    if (info->state != VPMM_REGION_ALLOCATED || info->addr != (uintptr_t)ptr)
        return vpmm_free(d->pool, ptr); /* vpmm's status and message for a bad pointer */
    /* An allocation this device exported: PyTorch frees it only once every consumer has released
     * it, so the shares no close ended (sends a consumer's cache absorbed) end now, and the
     * memory is reused at once (torch_adapter_ipc.c). Never exported: one relaxed load. */
    if (__atomic_load_n(&d->nexported, __ATOMIC_RELAXED) != 0 && vta_i_exported_forget(d, ptr))
        (void)vpmm_ipc_unshare(d->pool, ptr); /* the allocation is live: it cannot fail */
    st = vpmm_free(d->pool, ptr);
    if (st == VPMM_SUCCESS) {
        pthread_mutex_lock(&d->lock);
        count_alloc(d, info->requested, -1);
        pthread_mutex_unlock(&d->lock);
    }
    return st;
}

vpmm_status_t vta_record_stream(vta_device_t *d, void *ptr, vpmm_stream_t stream)
{
    vpmm_status_t st = vpmm_record_stream(d->pool, ptr, stream);
    return st == VPMM_ERROR_FOREIGN_POINTER ? VPMM_SUCCESS : st; /* another allocator's */
}

void vta_oom_retried(vta_device_t *d)
{
    pthread_mutex_lock(&d->lock);
    if (d->stats.num_ooms > 0)
        d->stats.num_ooms--;
    d->stats.num_alloc_retries++;
    pthread_mutex_unlock(&d->lock);
}

int vta_is_oom(vpmm_status_t st)
{
    return st == VPMM_ERROR_OUT_OF_MEMORY || st == VPMM_ERROR_SIZE_TOO_LARGE;
}

const char *vta_format_size(uint64_t bytes, char *buf, size_t len)
{
    if (bytes <= 1024)
        snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
    else if (bytes <= ((uint64_t)1 << 20))
        snprintf(buf, len, "%.2f KiB", (double)bytes / 1024.0);
    else if (bytes <= ((uint64_t)1 << 30))
        snprintf(buf, len, "%.2f MiB", (double)bytes / 1048576.0);
    else
        snprintf(buf, len, "%.2f GiB", (double)bytes / 1073741824.0);
    return buf;
}

/* Appends to buf (len bytes, *n used so far), printf-style; stops at the end of buf. */
static void put(char *buf, size_t len, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t len, size_t *n, const char *fmt, ...)
{
    va_list ap;
    int w;
    if (*n >= len)
        return;
    va_start(ap, fmt);
    w = vsnprintf(buf + *n, len - *n, fmt, ap);
    va_end(ap);
    if (w > 0)
        *n = *n + (size_t)w < len ? *n + (size_t)w : len;
}

const char *vta_oom_message(vta_device_t *d, size_t size, vpmm_status_t st, size_t device_total,
                            size_t device_free, char *buf, size_t len)
{
    char why[1536] = "", a[32], b[32];
    double fraction;
    size_t n = 0;
    /* The failing call's own explanation first: the calls below may replace it. */
    snprintf(why, sizeof why, "%s", vpmm_last_error());
    if (st == VPMM_ERROR_OUT_OF_MEMORY) {
        char report[sizeof why] = "";
        (void)vpmm_pool_oom_report(d->pool, report, sizeof report);
        if (report[0] != '\0')
            memcpy(why, report, sizeof why);
    }
    pthread_mutex_lock(&d->lock);
    fraction = d->fraction;
    pthread_mutex_unlock(&d->lock);
    if (len == 0)
        return buf;
    buf[0] = '\0';
    put(buf, len, &n, "CUDA out of memory. Tried to allocate %s (%zu bytes) on device %d.",
        vta_format_size(size, a, sizeof a), size, d->device);
    if (device_total > 0)
        put(buf, len, &n, " GPU %d has a total capacity of %s of which %s is free.", d->device,
            vta_format_size(device_total, a, sizeof a), vta_format_size(device_free, b, sizeof b));
    if (fraction < 1.0)
        put(buf, len, &n,
            " This process may use %.4g of device %d's memory "
            "(torch.cuda.set_per_process_memory_fraction).",
            fraction, d->device);
    if (st == VPMM_ERROR_SIZE_TOO_LARGE)
        put(buf, len, &n,
            " vpmm: the request is larger than the address range vpmm reserves at once (%s); "
            "if the device could hold it, raise VPMM_VA_SIZE.",
            why);
    else
        put(buf, len, &n, " vpmm: %s", why);
    return buf;
}

/* ---- several devices ------------------------------------------------------------------------ */

static vta_device_t *table_at(vta_device_t *const *devs, size_t i)
{
    return __atomic_load_n(&devs[i], __ATOMIC_ACQUIRE);
}

static int holds(vta_device_t *d, const void *ptr, vpmm_region_info_t *info)
{
    return d != NULL && d->pool != NULL && vpmm_pointer_info(d->pool, ptr, info) == VPMM_SUCCESS;
}

int vta_owner(vta_device_t *const *devs, size_t n, const void *ptr, int hint,
              vpmm_region_info_t *info)
{
    vpmm_region_info_t tmp;
    if (info == NULL)
        info = &tmp;
    if (devs == NULL || ptr == NULL)
        return -1;
    if (hint >= 0 && (size_t)hint < n && holds(table_at(devs, (size_t)hint), ptr, info))
        return hint;
    for (size_t i = 0; i < n; i++)
        if ((int)i != hint && holds(table_at(devs, i), ptr, info))
            return (int)i;
    return -1;
}

vpmm_status_t vta_free_any(vta_device_t *const *devs, size_t n, void *ptr, int *owner,
                           vpmm_region_info_t *info)
{
    vpmm_region_info_t tmp;
    int o;
    if (info == NULL)
        info = &tmp;
    if (owner != NULL)
        *owner = -1;
    if (ptr == NULL)
        return VPMM_SUCCESS;
    o = vta_owner(devs, n, ptr, -1, info);
    if (owner != NULL)
        *owner = o;
    return o < 0 ? VPMM_ERROR_FOREIGN_POINTER
                 : vta_free_known(table_at(devs, (size_t)o), ptr, info);
}

vpmm_status_t vta_record_stream_any(vta_device_t *const *devs, size_t n, void *ptr, int hint,
                                    vpmm_stream_t stream, int *owner)
{
    vpmm_region_info_t info;
    int o = vta_owner(devs, n, ptr, hint, &info);
    if (owner != NULL)
        *owner = o;
    if (o < 0)
        return VPMM_SUCCESS; /* another allocator's: nothing to order (as the native allocator) */
    return vpmm_record_stream(table_at(devs, (size_t)o)->pool, ptr, stream);
}

vpmm_status_t vta_grant_peer(vta_device_t *d, int peer)
{
    int own = -1;
    vpmm_status_t st = vpmm_pool_device(d->pool, &own);
    if (st == VPMM_SUCCESS)
        st = vpmm_pool_grant_access(d->pool, peer);
    if (st == VPMM_SUCCESS && peer != own && peer >= 0 && peer < 64) {
        pthread_mutex_lock(&d->lock);
        d->peers |= (uint64_t)1 << peer;
        pthread_mutex_unlock(&d->lock);
    }
    return st;
}

vpmm_status_t vta_set_memory_fraction(vta_device_t *d, double fraction, size_t device_total)
{
    size_t cap = 0;
    vpmm_status_t st;
    if (!(fraction >= 0.0 && fraction <= 1.0) || (fraction < 1.0 && device_total == 0))
        return VPMM_ERROR_INVALID_ARGUMENT;
    if (fraction < 1.0) {
        cap = (size_t)(fraction * (double)device_total);
        if (cap < d->page_size)
            cap = d->page_size; /* vpmm's cap 0 means none: the smallest cap is one page */
    }
    st = vpmm_set_max_bytes(d->pool, cap);
    if (st == VPMM_SUCCESS) {
        pthread_mutex_lock(&d->lock);
        d->fraction = fraction;
        pthread_mutex_unlock(&d->lock);
    }
    return st;
}

double vta_memory_fraction(vta_device_t *d)
{
    double f;
    pthread_mutex_lock(&d->lock);
    f = d->fraction;
    pthread_mutex_unlock(&d->lock);
    return f;
}

/* ---- mempool ids ---------------------------------------------------------------------------- */

/* One more reference to id: a vpmm graph pool, or (external) a pool of its own allocator. */
static vpmm_status_t pool_incref(vta_device_t *d, vta_pool_id_t id, int external)
{
    vta_pool_entry_t *e;
    vpmm_status_t st = VPMM_SUCCESS;
    if (id_default(id))
        return VPMM_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&d->lock);
    e = entry_of(d, id);
    if (e != NULL) {
        /* beginAllocateToPool references an existing pool of either kind; a pool with its own
         * allocator is never made from an id that already is a graph pool. */
        if (external && e->gp != NULL)
            st = VPMM_ERROR_INVALID_ARGUMENT;
        else
            e->use_count++;
    } else if (d->npools == d->cap &&
               (e = realloc(d->pools, (d->cap ? d->cap * 2 : 8) * sizeof *e)) == NULL) {
        st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
    } else {
        vpmm_graph_pool_t *gp;
        if (d->npools == d->cap) {
            d->pools = e;
            d->cap = d->cap ? d->cap * 2 : 8;
        }
        gp = NULL;
        if (!external) {
            /* Its name, for the segment events (room first: nothing to undo after creation). */
            vta_i_names_prune(d);
            st = vta_i_names_reserve(d);
            if (st == VPMM_SUCCESS)
                st = vpmm_graph_pool_create(d->pool, &gp);
            if (st == VPMM_SUCCESS)
                vta_i_names_add(d, gp, id);
        }
        if (st == VPMM_SUCCESS)
            d->pools[d->npools++] = (vta_pool_entry_t){ id, gp, 1 };
    }
    pthread_mutex_unlock(&d->lock);
    return st;
}

vpmm_status_t vta_pool_incref(vta_device_t *d, vta_pool_id_t id)
{
    return pool_incref(d, id, 0);
}

vpmm_status_t vta_pool_incref_external(vta_device_t *d, vta_pool_id_t id)
{
    return pool_incref(d, id, 1);
}

int vta_pool_is_external(vta_device_t *d, vta_pool_id_t id)
{
    vta_pool_entry_t *e;
    int yes;
    pthread_mutex_lock(&d->lock);
    e = entry_of(d, id);
    yes = e != NULL && e->gp == NULL;
    pthread_mutex_unlock(&d->lock);
    return yes;
}

/* Counts an allocation of a pool with its own allocator coming (+1) or going (-1): as an
 * allocation, and as a segment of its own (reserved memory), the native allocator's view of a
 * pool whose every segment came from that allocator. Under d->lock. */
static void count_external(vta_device_t *d, size_t size, int sign)
{
    const int types[2] = { VTA_ALL, VTA_EXTERNAL_TYPE(size) };
    count_block(d, size, size, sign, types[1]); /* the block is what its allocator gave */
    for (int i = 0; i < 2; i++) {
        void (*f)(vta_stat_t *, int64_t) = sign > 0 ? stat_increase : stat_decrease;
        f(&d->ext_reserved[types[i]], (int64_t)size);
        f(&d->ext_segment[types[i]], 1);
    }
    if (sign > 0)
        d->ext_allocs++;
    else
        d->ext_frees++;
}

vpmm_status_t vta_external_add(vta_device_t *d, vta_pool_id_t id, void *ptr, size_t size,
                               vpmm_stream_t stream)
{
    vta_pool_entry_t *e;
    vpmm_status_t st = VPMM_SUCCESS;
    pthread_mutex_lock(&d->lock);
    e = entry_of(d, id);
    if (e == NULL || e->gp != NULL || ptr == NULL) {
        st = VPMM_ERROR_INVALID_ARGUMENT;
    } else if (VTA_GROW(d->ext, d->ext_cap, d->next + 1, 16) != 0) {
        st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    if (st == VPMM_SUCCESS) {
        d->ext[d->next++] = (vta_external_t){ ptr, size, stream, id };
        count_external(d, size, +1);
    }
    pthread_mutex_unlock(&d->lock);
    return st;
}

int vta_external_remove(vta_device_t *d, void *ptr, size_t *size)
{
    int found = 0;
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->next && !found; i++) {
        if (d->ext[i].ptr == ptr) {
            *size = d->ext[i].size;
            count_external(d, d->ext[i].size, -1);
            d->ext[i] = d->ext[--d->next];
            found = 1;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return found;
}

vpmm_status_t vta_pool_decref(vta_device_t *d, vta_pool_id_t id)
{
    vta_pool_entry_t *e;
    vpmm_graph_pool_t *gp = NULL;
    pthread_mutex_lock(&d->lock);
    e = entry_of(d, id);
    if (e == NULL) {
        pthread_mutex_unlock(&d->lock);
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    if (--e->use_count == 0) {
        gp = e->gp;
        *e = d->pools[--d->npools];
    }
    pthread_mutex_unlock(&d->lock);
    if (gp != NULL) {
        /* Named until its segments are gone: the release may hand them to the shared pool now,
         * or later, once its graphs are gone (the events name the id either way). */
        const unsigned g = gp_id(gp);
        vpmm_status_t st = vpmm_graph_pool_release(gp);
        vta_i_names_release(d, g);
        return st;
    }
    return VPMM_SUCCESS;
}

int64_t vta_pool_use_count(vta_device_t *d, vta_pool_id_t id)
{
    vta_pool_entry_t *e;
    int64_t n;
    pthread_mutex_lock(&d->lock);
    e = entry_of(d, id);
    n = e ? e->use_count : 0;
    pthread_mutex_unlock(&d->lock);
    return n;
}

/* Under d->lock. */
vpmm_graph_pool_t *vta_pool_graph_pool(vta_device_t *d, vta_pool_id_t id)
{
    vta_pool_entry_t *e = entry_of(d, id);
    return e ? e->gp : NULL;
}

/* Under d->lock. */
vta_pool_id_t vta_pool_of_graph_pool(vta_device_t *d, unsigned gp)
{
    for (size_t i = 0; gp != 0 && i < d->npools; i++)
        if (gp_id(d->pools[i].gp) == gp)
            return d->pools[i].id;
    return (vta_pool_id_t){ 0, 0 };
}

/* ---- live allocations of a graph pool (a walk) ----------------------------------------------- */

typedef struct live_walk {
    unsigned gp;
    uintptr_t *addr;
    size_t *requested;
    size_t n, cap;
    int oom;
} live_walk_t;

static int live_visit(const vpmm_region_info_t *r, void *user)
{
    live_walk_t *w = user;
    if (r->state != VPMM_REGION_ALLOCATED || r->pool != w->gp)
        return 0;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        uintptr_t *a = realloc(w->addr, cap * sizeof *a);
        size_t *q = a ? realloc(w->requested, cap * sizeof *q) : NULL;
        if (a != NULL)
            w->addr = a;
        if (q == NULL) {
            w->oom = 1;
            return 1;
        }
        w->requested = q;
        w->cap = cap;
    }
    w->addr[w->n] = r->addr;
    w->requested[w->n++] = r->requested;
    return 0;
}

static vpmm_status_t live_of(vta_device_t *d, unsigned gp, live_walk_t *w)
{
    vpmm_status_t st;
    memset(w, 0, sizeof *w);
    w->gp = gp;
    st = vpmm_pool_walk(d->pool, live_visit, w);
    if (st != VPMM_SUCCESS || w->oom) {
        free(w->addr);
        free(w->requested);
        memset(w, 0, sizeof *w);
        return st != VPMM_SUCCESS ? st : VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    return VPMM_SUCCESS;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

int vta_pool_live_matches(vta_device_t *d, vta_pool_id_t id, void *const *ptrs, size_t n)
{
    live_walk_t w;
    uintptr_t *want;
    int same;
    pthread_mutex_lock(&d->lock);
    if (vta_pool_graph_pool(d, id) == NULL) {
        pthread_mutex_unlock(&d->lock);
        return -1;
    }
    if (live_of(d, gp_id(vta_pool_graph_pool(d, id)), &w) != VPMM_SUCCESS) {
        pthread_mutex_unlock(&d->lock);
        return 0;
    }
    pthread_mutex_unlock(&d->lock);
    want = malloc((n ? n : 1) * sizeof *want);
    same = want != NULL && w.n == n;
    if (same) {
        for (size_t i = 0; i < n; i++)
            want[i] = (uintptr_t)ptrs[i];
        qsort(want, n, sizeof *want, cmp_ptr);
        qsort(w.addr, w.n, sizeof *w.addr, cmp_ptr);
        same = memcmp(want, w.addr, n * sizeof *want) == 0;
    }
    free(want);
    free(w.addr);
    free(w.requested);
    return same;
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

vpmm_status_t vta_checkpoint_take(vta_device_t *d, vta_pool_id_t id, vpmm_checkpoint_t **out)
{
    vpmm_graph_pool_t *gp;
    vpmm_status_t st;
    *out = NULL;
    pthread_mutex_lock(&d->lock);
    gp = vta_pool_graph_pool(d, id);
    st = gp ? vpmm_checkpoint_take(gp, out) : VPMM_ERROR_INVALID_ARGUMENT;
    pthread_mutex_unlock(&d->lock);
    return st;
}

vpmm_status_t vta_checkpoint_apply(vta_device_t *d, const vpmm_checkpoint_t *ck, void ***freed,
                                   size_t *n_freed, void ***allocd, size_t *n_allocd)
{
    vpmm_checkpoint_info_t info;
    vpmm_checkpoint_alloc_t *ca = NULL;
    vpmm_graph_pool_t *gp = NULL;
    live_walk_t w = { 0 };
    void **f = NULL, **a = NULL;
    size_t na = 0;
    vpmm_status_t st;

    *freed = *allocd = NULL;
    *n_freed = *n_allocd = 0;
    st = vpmm_checkpoint_info(ck, &info);
    if (st != VPMM_SUCCESS)
        return st;
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->npools && gp == NULL; i++)
        if (gp_id(d->pools[i].gp) == info.graph_pool)
            gp = d->pools[i].gp;
    st = gp ? live_of(d, info.graph_pool, &w) : VPMM_ERROR_INVALID_ARGUMENT;
    if (st == VPMM_SUCCESS) {
        na = vpmm_checkpoint_allocs(ck, NULL, 0);
        ca = malloc((na ? na : 1) * sizeof *ca);
        f = malloc((w.n ? w.n : 1) * sizeof *f);
        a = malloc((na ? na : 1) * sizeof *a);
        if (ca == NULL || f == NULL || a == NULL)
            st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    if (st == VPMM_SUCCESS)
        st = vpmm_checkpoint_reapply(gp, ck, NULL, 0);
    if (st == VPMM_SUCCESS) {
        vpmm_checkpoint_allocs(ck, ca, na);
        for (size_t i = 0; i < w.n; i++) {
            f[i] = (void *)w.addr[i];
            count_alloc(d, w.requested[i], -1);
        }
        for (size_t i = 0; i < na; i++) {
            a[i] = ca[i].ptr;
            count_alloc(d, ca[i].size, +1);
        }
        *freed = f;
        *n_freed = w.n;
        *allocd = a;
        *n_allocd = na;
        f = a = NULL;
    }
    pthread_mutex_unlock(&d->lock);
    free(ca);
    free(f);
    free(a);
    free(w.addr);
    free(w.requested);
    return st;
}

/* ---- statistics, cache ----------------------------------------------------------------------- */

typedef struct free_walk {
    int64_t n[VTA_NTYPES], bytes[VTA_NTYPES];
} free_walk_t;

static int free_visit(const vpmm_region_info_t *r, void *user)
{
    free_walk_t *w = user;
    if (r->state == VPMM_REGION_FREE) {
        w->n[VTA_ALL]++;
        w->n[VTA_LARGE]++; /* in vpmm's pages: large, as the blocks around it */
        w->bytes[VTA_ALL] += (int64_t)r->size;
        w->bytes[VTA_LARGE] += (int64_t)r->size;
    }
    return 0;
}

void vta_get_stats(vta_device_t *d, vta_stats_t *out)
{
    vpmm_stats_t s;
    free_walk_t fw;
    memset(&fw, 0, sizeof fw);
    if (vpmm_get_stats(d->pool, &s) != VPMM_SUCCESS)
        memset(&s, 0, sizeof s);
    (void)vpmm_pool_walk(d->pool, free_visit, &fw);
    pthread_mutex_lock(&d->lock);
    for (int t = 0; t < VTA_NTYPES; t++) {
        /* vpmm's pages count as large (one page size); pools with their own allocator add
         * theirs (ext_*). A peak is the larger of what was seen and vpmm's own peak. */
        const int pages = t != VTA_SMALL;
        const vta_stat_t *x = &d->ext_reserved[t];
        vta_stat_t *r = &d->stats.reserved_bytes[t];
        int64_t own_peak = pages ? (int64_t)s.peak_mapped_bytes : 0;
        stat_observe(r, (pages ? (int64_t)s.mapped_bytes : 0) + x->current);
        if (own_peak > r->peak)
            r->peak = own_peak;
        r->allocated = (pages ? (int64_t)((s.pages_created - d->base_created) * s.page_size) : 0) +
                       x->allocated;
        r->freed =
            (pages ? (int64_t)((s.pages_released - d->base_released) * s.page_size) : 0) + x->freed;
        stat_observe(&d->stats.segment[t],
                     (pages ? (int64_t)s.handles : 0) + d->ext_segment[t].current);
        stat_observe(&d->stats.inactive_split[t], fw.n[t]);
        stat_observe(&d->stats.inactive_split_bytes[t], fw.bytes[t]);
    }
    d->stats.num_device_alloc = (int64_t)s.handles_created + d->ext_allocs;
    d->stats.num_device_free = (int64_t)(s.handles_created - s.handles) + d->ext_frees;
    *out = d->stats;
    pthread_mutex_unlock(&d->lock);
}

/* Every per-pool-type array of s (each VTA_NTYPES long), for the resets. */
enum { STAT_ARRAYS = 9 };
static void stat_arrays(vta_stats_t *s, vta_stat_t *out[STAT_ARRAYS])
{
    vta_stat_t *all[STAT_ARRAYS] = { s->allocation,      s->segment,
                                     s->active,          s->inactive_split,
                                     s->allocated_bytes, s->reserved_bytes,
                                     s->active_bytes,    s->inactive_split_bytes,
                                     s->requested_bytes };
    memcpy(out, all, sizeof all);
}

void vta_reset_peak(vta_device_t *d)
{
    vta_stat_t *arrays[STAT_ARRAYS];
    stat_arrays(&d->stats, arrays);
    (void)vpmm_reset_peak_stats(d->pool);
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < STAT_ARRAYS; i++)
        for (int t = 0; t < VTA_NTYPES; t++)
            arrays[i][t].peak = arrays[i][t].current;
    for (int t = 0; t < VTA_NTYPES; t++) {
        d->ext_reserved[t].peak = d->ext_reserved[t].current;
        d->ext_segment[t].peak = d->ext_segment[t].current;
    }
    pthread_mutex_unlock(&d->lock);
}

void vta_reset_accumulated(vta_device_t *d)
{
    vta_stat_t *arrays[STAT_ARRAYS];
    vpmm_stats_t s;
    int have = vpmm_get_stats(d->pool, &s) == VPMM_SUCCESS;
    stat_arrays(&d->stats, arrays);
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < STAT_ARRAYS; i++)
        for (int t = 0; t < VTA_NTYPES; t++)
            arrays[i][t].allocated = arrays[i][t].freed = 0;
    for (int t = 0; t < VTA_NTYPES; t++) {
        d->ext_reserved[t].allocated = d->ext_reserved[t].freed = 0;
        d->ext_segment[t].allocated = d->ext_segment[t].freed = 0;
    }
    d->stats.num_alloc_retries = d->stats.num_ooms = 0;
    d->stats.num_sync_all_streams = 0;
    if (have) {
        d->base_created = s.pages_created;
        d->base_released = s.pages_released;
    }
    pthread_mutex_unlock(&d->lock);
}

void vta_note_sync_all(vta_device_t *d)
{
    pthread_mutex_lock(&d->lock);
    d->stats.num_sync_all_streams++;
    pthread_mutex_unlock(&d->lock);
}

size_t vta_empty_cache(vta_device_t *d)
{
    size_t released = 0;
    (void)vpmm_trim(d->pool, 0, &released);
    return released;
}

size_t vta_largest_free(vta_device_t *d)
{
    vpmm_stats_t s;
    return vpmm_get_stats(d->pool, &s) == VPMM_SUCCESS ? s.largest_free_bytes : 0;
}
