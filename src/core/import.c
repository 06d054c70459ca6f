/*
 * import.c — another process's memory mapped here (vpmm_ipc_open, vpmm_ipc_close).
 *
 * A handle (ipc_wire.h) names the exporter's physical handles by their descriptor numbers in the
 * exporting process. vpmm_ipc_open takes each descriptor with pidfd_getfd(2), turns it into a
 * handle of its own (mem_import; the descriptor is closed at once: the handle holds the memory),
 * maps the handles side by side in a reservation of its own, outside the pool's arenas, and
 * gives the pool's device and its peers access. The mapping is cached by what it maps — the
 * exporter (pid, nonce) and its handles' serials — so the same pages opened again, through the
 * same allocation or another one on them, map nothing new. Each allocation opened through a
 * mapping keeps the page of the exporter's share table its slot is on (share_table.c): the
 * vpmm_ipc_close that ends an open ends one share there.
 *
 *   exporter: table ─slot─┐                    importer: import { va, handles[],
 *             phys fds ───┼── pidfd_getfd ──>            uses: { offset, slot page, opens } }
 *
 * The last close of a mapping waits for the device (the importer's kernels may still use it, as
 * PyTorch's native allocator waits before it unmaps an IPC mapping), then unmaps and releases.
 * Every step of an open is undone if a later one fails: nothing stays mapped, taken or open.
 * Descriptors: none is kept (a pidfd per open, closed before it returns), so opening the same
 * handle 10,000 times leaves the descriptor count where it was.
 *
 * Under the pool lock. I14 for the imports is checked here, at check.c's request.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "array.h"
#include "ipc_wire.h"
#include "pool.h"
#include "share.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* the same number on every architecture since Linux 5.3 */
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* One allocation opened through a mapping. */
typedef struct import_use {
    uint64_t offset;          /* from the mapping's start */
    uint32_t slot, gen;       /* its share in the exporter's table */
    vpmm_share_slot_t *count; /* inside page */
    void *page;
    size_t opens; /* vpmm_ipc_open calls not closed yet */
} import_use_t;

struct vpmm_import {
    vpmm_import_t *next;
    int32_t pid;
    uint64_t nonce;
    uint32_t nphys;
    uint64_t *serials;
    size_t *sizes;
    vpmm_drv_handle_t *handles;
    uintptr_t va;
    size_t size;
    uint32_t unmapped; /* a teardown that stopped at a failed unmap resumes here */
    import_use_t *uses;
    size_t nuses, cap;
};

/* A parsed, checked handle. */
typedef struct parsed {
    vpmm_ipc_header_t h;
    const unsigned char *entries;
    size_t total; /* Σ handle sizes */
} parsed_t;

static vpmm_status_t bad_handle(const char *why)
{
    vpmm_i_set_error("vpmm_ipc_open: not a vpmm IPC handle (%s)", why);
    return VPMM_ERROR_INVALID_ARGUMENT;
}

static vpmm_ipc_entry_t entry_at(const parsed_t *x, uint32_t i)
{
    vpmm_ipc_entry_t e;
    memcpy(&e, x->entries + (size_t)i * sizeof e, sizeof e);
    return e;
}

static vpmm_status_t parse(const vpmm_pool_t *p, const void *handle, size_t len, parsed_t *x)
{
    if (handle == NULL || len < sizeof x->h)
        return bad_handle(handle == NULL ? "NULL" : "too short");
    memcpy(&x->h, handle, sizeof x->h);
    if (memcmp(x->h.magic, VPMM_IPC_MAGIC, sizeof x->h.magic) != 0)
        return bad_handle("wrong magic");
    if (x->h.version != VPMM_IPC_VERSION)
        return bad_handle("another version of vpmm wrote it");
    if (x->h.nphys == 0 || x->h.nphys > (len - sizeof x->h) / sizeof(vpmm_ipc_entry_t) ||
        len != sizeof x->h + (size_t)x->h.nphys * sizeof(vpmm_ipc_entry_t))
        return bad_handle("its length does not match its handle count");
    if (x->h.pid <= 0 || x->h.table_fd < 0 || x->h.size == 0)
        return bad_handle("a field is out of range");
    x->entries = (const unsigned char *)handle + sizeof x->h;
    x->total = 0;
    for (uint32_t i = 0; i < x->h.nphys; i++) {
        vpmm_ipc_entry_t e = entry_at(x, i);
        if (e.fd < 0 || e.serial == 0 || e.size == 0 || e.size % p->granularity != 0 ||
            e.size > SIZE_MAX - x->total)
            return bad_handle("a physical handle entry is out of range");
        x->total += e.size;
    }
    if (x->h.offset >= x->total || x->h.size > x->total - x->h.offset)
        return bad_handle("the allocation lies outside its handles");
    return VPMM_SUCCESS;
}

/* The mapping of exactly these pages, or NULL. */
static vpmm_import_t *find(const vpmm_pool_t *p, const parsed_t *x)
{
    for (vpmm_import_t *m = p->imports; m; m = m->next) {
        uint32_t i;
        if (m->pid != x->h.pid || m->nonce != x->h.nonce || m->nphys != x->h.nphys)
            continue;
        for (i = 0; i < m->nphys && m->serials[i] == entry_at(x, i).serial; i++)
            ;
        if (i == m->nphys)
            return m;
    }
    return NULL;
}

/* ---- descriptors of another process ------------------------------------------------------- */

static vpmm_status_t pidfd_open_of(int32_t pid, int *out)
{
    long fd = syscall(SYS_pidfd_open, (pid_t)pid, 0u);
    if (fd >= 0) {
        *out = (int)fd;
        return VPMM_SUCCESS;
    }
    if (errno == ESRCH) {
        vpmm_i_set_error("vpmm_ipc_open: the exporting process %d has exited", (int)pid);
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    if (errno == EMFILE || errno == ENFILE) {
        vpmm_i_set_error("vpmm_ipc_open: out of file descriptors (pidfd_open: %s)",
                         strerror(errno));
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    vpmm_i_set_error("vpmm_ipc_open: pidfd_open(%d) failed: %s (CUDA IPC of vpmm memory needs "
                     "Linux 5.6 or later, and a system that lets this process use pidfd_open)",
                     (int)pid, strerror(errno));
    return VPMM_ERROR_NOT_SUPPORTED;
}

/* Descriptor `fd` of the process behind pidfd, as a descriptor of this one. */
static vpmm_status_t take_fd(int pidfd, int32_t pid, int fd, int *out)
{
    long r = syscall(SYS_pidfd_getfd, pidfd, fd, 0u);
    if (r >= 0) {
        *out = (int)r;
        return VPMM_SUCCESS;
    }
    switch (errno) {
    case EPERM:
    case EACCES:
        vpmm_i_set_error(
            "vpmm_ipc_open: the system refused to pass descriptor %d of process %d to this one "
            "(pidfd_getfd: %s). Taking another process's descriptors needs the right to trace it "
            "(same user, and no Yama ptrace_scope or container seccomp profile forbidding it: "
            "run with CAP_SYS_PTRACE, or docker --cap-add=SYS_PTRACE)",
            fd, (int)pid, strerror(errno));
        return VPMM_ERROR_NOT_SUPPORTED;
    case EBADF:
        vpmm_i_set_error("vpmm_ipc_open: descriptor %d is not open in process %d: the handle is "
                         "stale (its memory was given back) or was not exported there",
                         fd, (int)pid);
        return VPMM_ERROR_INVALID_ARGUMENT;
    case ESRCH:
        vpmm_i_set_error("vpmm_ipc_open: the exporting process %d has exited", (int)pid);
        return VPMM_ERROR_INVALID_ARGUMENT;
    case EMFILE:
    case ENFILE:
        vpmm_i_set_error("vpmm_ipc_open: out of file descriptors (pidfd_getfd: %s)",
                         strerror(errno));
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    default:
        vpmm_i_set_error("vpmm_ipc_open: pidfd_getfd of descriptor %d of process %d failed: %s", fd,
                         (int)pid, strerror(errno));
        return VPMM_ERROR_NOT_SUPPORTED;
    }
}

/* ---- one use: the share slot's page ------------------------------------------------------- */

static void use_unmap(import_use_t *u)
{
    munmap(u->page, (size_t)sysconf(_SC_PAGESIZE));
}

/* Maps the page of the exporter's table that holds the slot and checks that the share is current
 * (the slot's gen is the handle's, and a share is counted). */
static vpmm_status_t use_map(int pidfd, const parsed_t *x, import_use_t *u)
{
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    const size_t at = (size_t)x->h.slot * sizeof(vpmm_share_slot_t);
    int fd = -1;
    void *m;
    VPMM_CHECK(take_fd(pidfd, x->h.pid, x->h.table_fd, &fd));
    m = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)(at - at % pg));
    close(fd);
    if (m == MAP_FAILED) {
        vpmm_i_set_error("vpmm_ipc_open: the handle's share slot %u is not in the exporter's "
                         "table (mmap: %s)",
                         x->h.slot, strerror(errno));
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    u->page = m;
    u->count = (vpmm_share_slot_t *)((char *)m + at % pg);
    u->offset = x->h.offset;
    u->slot = x->h.slot;
    u->gen = x->h.gen;
    u->opens = 0;
    {
        uint64_t w = atomic_load_explicit(&u->count->word, memory_order_acquire);
        if (VPMM_SHARE_GEN(w) == x->h.gen && VPMM_SHARE_COUNT(w) > 0)
            return VPMM_SUCCESS;
        use_unmap(u);
        vpmm_i_set_error("vpmm_ipc_open: the handle is stale: its share is over (each export "
                         "is opened once; the exporter may have reused the memory)");
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
}

static import_use_t *use_find(vpmm_import_t *m, uint64_t offset, uint32_t slot, uint32_t gen)
{
    for (size_t i = 0; i < m->nuses; i++)
        if (m->uses[i].offset == offset && m->uses[i].slot == slot && m->uses[i].gen == gen)
            return &m->uses[i];
    return NULL;
}

/* ---- one mapping ------------------------------------------------------------------------- */

static void import_free(vpmm_import_t *m)
{
    free(m->serials);
    free(m->sizes);
    free(m->handles);
    free(m->uses);
    free(m);
}

/* Each undo call gets a second try: a transient failure must not leak (as pool.c's teardown). */
#define TWICE(call) ((call) == VPMM_DRV_OK || (call) == VPMM_DRV_OK)

/*
 * Unmaps m's mapped handles [m->unmapped, nmapped), releases [0, nhandles), frees the VA if
 * reserved. An unmap that fails twice stops it (the memory is still mapped: nothing after it may
 * go) with m->unmapped where to resume; a release or VA free that fails twice is reported and
 * dropped, as the pool's own teardown does.
 */
static vpmm_status_t import_teardown(vpmm_pool_t *p, vpmm_import_t *m, uint32_t nmapped,
                                     uint32_t nhandles, int reserved)
{
    vpmm_driver_t *d = p->drv;
    vpmm_status_t first = VPMM_SUCCESS;
    uintptr_t at = m->va;
    for (uint32_t i = 0; i < m->unmapped; i++)
        at += m->sizes[i];
    for (; m->unmapped < nmapped; at += m->sizes[m->unmapped], m->unmapped++)
        if (!TWICE(d->mem_unmap(d, at, m->sizes[m->unmapped])))
            return vpmm_i_drv_status(p, VPMM_DRV_ERROR);
    for (uint32_t i = 0; i < nhandles; i++)
        if (!TWICE(d->mem_release(d, m->handles[i])) && first == VPMM_SUCCESS)
            first = vpmm_i_drv_status(p, VPMM_DRV_ERROR);
    if (reserved && !TWICE(d->va_free(d, m->va, m->size)) && first == VPMM_SUCCESS)
        first = vpmm_i_drv_status(p, VPMM_DRV_ERROR);
    return first;
}

/* Takes, imports and maps the handles x names into a new mapping *out (not linked). */
static vpmm_status_t import_map(vpmm_pool_t *p, int pidfd, const parsed_t *x, vpmm_import_t **out)
{
    vpmm_driver_t *d = p->drv;
    vpmm_import_t *m = calloc(1, sizeof *m);
    uint32_t n = x->h.nphys, taken = 0, mapped = 0;
    vpmm_status_t st;
    int reserved = 0;
    uintptr_t at;

    if (m == NULL || (m->serials = malloc(n * sizeof *m->serials)) == NULL ||
        (m->sizes = malloc(n * sizeof *m->sizes)) == NULL ||
        (m->handles = malloc(n * sizeof *m->handles)) == NULL) {
        if (m != NULL)
            import_free(m);
        vpmm_i_set_error("vpmm_ipc_open: out of host memory");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    m->pid = x->h.pid;
    m->nonce = x->h.nonce;
    m->nphys = n;
    m->size = x->total;
    for (taken = 0; taken < n; taken++) {
        vpmm_ipc_entry_t e = entry_at(x, taken);
        vpmm_drv_shareable_t sh = { -1, e.offset, e.size };
        m->serials[taken] = e.serial;
        m->sizes[taken] = e.size;
        st = take_fd(pidfd, x->h.pid, e.fd, &sh.fd);
        if (st != VPMM_SUCCESS)
            goto undo;
        st = vpmm_i_drv_status(p, d->mem_import(d, &sh, &m->handles[taken]));
        close(sh.fd); /* the imported handle holds the memory now (driver.h rule 10) */
        if (st != VPMM_SUCCESS)
            goto undo;
    }
    st = vpmm_i_drv_status(p, d->va_reserve(d, m->size, p->granularity, &m->va));
    if (st != VPMM_SUCCESS)
        goto undo;
    reserved = 1;
    for (at = m->va; mapped < n; at += m->sizes[mapped], mapped++) {
        st = vpmm_i_drv_status(p, d->mem_map(d, at, m->sizes[mapped], m->handles[mapped], 0));
        if (st != VPMM_SUCCESS)
            goto undo;
    }
    st = vpmm_i_drv_status(p, d->set_access(d, m->va, m->size, p->peers, p->npeers));
    if (st != VPMM_SUCCESS)
        goto undo;
    *out = m;
    return VPMM_SUCCESS;
undo:
    (void)import_teardown(p, m, mapped, taken, reserved);
    import_free(m);
    return st;
}

vpmm_status_t vpmm_i_import_open(vpmm_pool_t *p, const void *handle, size_t len, void **out_ptr)
{
    parsed_t x;
    vpmm_import_t *m;
    import_use_t *u, use;
    vpmm_status_t st = VPMM_SUCCESS;
    int pidfd = -1, fresh = 0;

    VPMM_CHECK(parse(p, handle, len, &x));
    if (x.h.device < 0 || x.h.device >= p->drv->device_count ||
        !((p->drv->peer_capable >> x.h.device) & 1)) {
        vpmm_i_set_error("vpmm_ipc_open: the handle's memory is on device %d, which this pool's "
                         "device %d cannot reach (no peer access between them)",
                         (int)x.h.device, p->drv->device);
        return VPMM_ERROR_NOT_SUPPORTED;
    }
    m = find(p, &x);
    u = m ? use_find(m, x.h.offset, x.h.slot, x.h.gen) : NULL;
    if (u != NULL) { /* this allocation is open here already: one more open of it */
        u->opens++;
        *out_ptr = (void *)(m->va + u->offset);
        return VPMM_SUCCESS;
    }
    VPMM_CHECK(pidfd_open_of(x.h.pid, &pidfd));
    /* The share first: a stale handle is refused before any of its descriptor numbers is taken
     * (once the exporter gave its pages back, they may name anything). */
    st = use_map(pidfd, &x, &use);
    if (st != VPMM_SUCCESS)
        goto out;
    if (m == NULL) {
        st = import_map(p, pidfd, &x, &m);
        if (st != VPMM_SUCCESS) {
            use_unmap(&use);
            goto out;
        }
        fresh = 1;
    }
    if (VPMM_GROW(m->uses, m->cap, m->nuses + 1, 2) != 0) {
        vpmm_i_set_error("vpmm_ipc_open: out of host memory");
        st = VPMM_ERROR_HOST_OUT_OF_MEMORY;
        use_unmap(&use);
        goto undo;
    }
    u = &m->uses[m->nuses++];
    *u = use;
    u->opens = 1;
    if (fresh) {
        m->next = p->imports;
        p->imports = m;
        p->nimports++;
        p->imported_bytes += m->size;
        p->import_handles += m->nphys;
    }
    *out_ptr = (void *)(m->va + u->offset);
    goto out;
undo:
    if (fresh) {
        (void)import_teardown(p, m, m->nphys, m->nphys, 1);
        import_free(m);
    }
out:
    close(pidfd);
    return st;
}

/* The mapping holding an open of ptr, and that open's use; NULL if none. */
static vpmm_import_t *find_open(vpmm_pool_t *p, uintptr_t ptr, import_use_t **use,
                                vpmm_import_t ***link)
{
    for (vpmm_import_t **l = &p->imports; *l; l = &(*l)->next) {
        vpmm_import_t *m = *l;
        if (ptr < m->va || ptr - m->va >= m->size)
            continue;
        for (size_t i = 0; i < m->nuses; i++)
            if (m->va + m->uses[i].offset == ptr) {
                *use = &m->uses[i];
                *link = l;
                return m;
            }
    }
    return NULL;
}

vpmm_status_t vpmm_i_import_close(vpmm_pool_t *p, void *ptr)
{
    import_use_t *u;
    vpmm_import_t **link;
    vpmm_import_t *m = find_open(p, (uintptr_t)ptr, &u, &link);
    if (m == NULL) {
        vpmm_i_set_error("vpmm_ipc_close: %p is not a pointer vpmm_ipc_open returned here", ptr);
        return VPMM_ERROR_FOREIGN_POINTER;
    }
    if (u->opens == 1 && m->nuses == 1) /* the mapping's last open: the GPU must be done */
        VPMM_CHECK(vpmm_i_drv_status(p, p->drv->synchronize(p->drv)));
    (void)vpmm_i_share_end(u->count, u->gen);
    if (--u->opens > 0)
        return VPMM_SUCCESS;
    use_unmap(u);
    *u = m->uses[--m->nuses];
    if (m->nuses > 0)
        return VPMM_SUCCESS;
    {
        vpmm_status_t st = import_teardown(p, m, m->nphys, m->nphys, 1);
        if (st != VPMM_SUCCESS && m->unmapped < m->nphys)
            return st; /* still mapped: kept, with no open, for the pool's destruction to retry */
        *link = m->next;
        p->nimports--;
        p->imported_bytes -= m->size;
        p->import_handles -= m->nphys;
        import_free(m);
        return st;
    }
}

vpmm_status_t vpmm_i_import_grant(vpmm_pool_t *p, int device)
{
    vpmm_driver_t *d = p->drv;
    int one[1] = { device };
    for (vpmm_import_t *m = p->imports; m; m = m->next) {
        vpmm_status_t st = vpmm_i_drv_status(p, d->set_access(d, m->va, m->size, one, 1));
        if (st != VPMM_SUCCESS) {
            for (vpmm_import_t *u = p->imports; u != m; u = u->next)
                (void)d->revoke_access(d, u->va, u->size, device);
            return st;
        }
    }
    return VPMM_SUCCESS;
}

size_t vpmm_i_import_check(const vpmm_pool_t *p, FILE *report)
{
    vpmm_driver_t *d = p->drv;
    size_t bad = 0;
    for (const vpmm_import_t *m = p->imports; m; m = m->next) {
        uintptr_t at = m->va;
        for (uint32_t i = 0; i < m->nphys; at += m->sizes[i], i++)
            for (size_t k = 0; k <= p->npeers; k++) {
                int dev = k == 0 ? d->device : p->peers[k - 1], rw = 0;
                if (d->get_access(d, at, dev, &rw) == VPMM_DRV_OK && rw)
                    continue;
                bad++;
                if (report != NULL)
                    fprintf(report,
                            "vpmm check: I14: imported mapping 0x%" PRIxPTR
                            " is not accessible to device %d\n",
                            at, dev);
            }
    }
    return bad;
}

vpmm_status_t vpmm_i_import_fini(vpmm_pool_t *p)
{
    vpmm_status_t first = VPMM_SUCCESS;
    while (p->imports != NULL) {
        vpmm_import_t *m = p->imports;
        vpmm_status_t st = import_teardown(p, m, m->nphys, m->nphys, 1);
        if (st != VPMM_SUCCESS && m->unmapped < m->nphys)
            return st; /* still mapped: the pool stays, a later destroy retries */
        first = first == VPMM_SUCCESS ? st : first;
        for (size_t i = 0; i < m->nuses; i++)
            use_unmap(&m->uses[i]);
        p->imports = m->next;
        p->nimports--;
        p->imported_bytes -= m->size;
        p->import_handles -= m->nphys;
        import_free(m);
    }
    return first;
}

size_t vpmm_i_import_opens(const vpmm_pool_t *p)
{
    size_t n = 0;
    for (const vpmm_import_t *m = p->imports; m; m = m->next)
        for (size_t i = 0; i < m->nuses; i++)
            n += m->uses[i].opens;
    return n;
}
