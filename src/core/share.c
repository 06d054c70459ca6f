/*
 * share.c — exporting an allocation to another process (vpmm_ipc_export).
 *
 * Another process maps the allocation's physical handles, whole (the driver maps nothing less,
 * driver.h rule 3): the handles that hold the pages from the allocation's first byte to its last.
 * Each handle is exported once — a POSIX file descriptor kept with the handle (phys->ipc_fd)
 * until the handle is given back — so sharing the same memory again opens no new descriptor, and
 * the importer takes the descriptors it needs with pidfd_getfd. The handle bytes (ipc_wire.h)
 * list them with the allocation's place among them and its share slot (share_table.c).
 *
 * Lifetime rule: while any share of an allocation is not over, its memory is not handed out
 * again. The allocation holds its slot as a use (uses.c: an entry with no stream, seq = the
 * slot); freed with shares left, it is deferred — free, but in no free list — until the count is
 * 0 (vpmm_i_uses_done asks share_table.c); the slot goes back with the use. Its pages cannot be
 * harvested or trimmed meanwhile (only whole free pages are), so the importer's pages hold what
 * the exporter wrote, never another allocation. A graph pool's allocations are not exported: a
 * checkpoint reapply may drop them whatever other processes do.
 *
 * Under the pool lock.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ipc_wire.h"
#include "arena.h"
#include "pages.h"
#include "pool.h"
#include "share.h"
#include "uses.h"

/* The handles holding [r->addr, r->addr + r->size), in address order: how many, and the first. */
static size_t handles_of(const vpmm_pool_t *p, const vpmm_region_t *r, vpmm_phys_t **first)
{
    const size_t pg = p->page_size;
    uintptr_t at = vpmm_align_down(r->addr, pg), end = r->addr + r->size;
    size_t n = 0;
    *first = vpmm_i_phys_at(p, at);
    at = (*first)->va;
    while (at < end) {
        vpmm_phys_t *ph = vpmm_i_phys_at(p, at);
        VPMM_ASSERT(ph != NULL && ph->va == at); /* I3: live pages, each handle mapped whole */
        at += ph->size;
        n++;
    }
    return n;
}

/* Exports ph once (its descriptor stays with it until it is given back). */
static vpmm_status_t export_handle(vpmm_pool_t *p, vpmm_phys_t *ph)
{
    vpmm_drv_shareable_t sh = { -1, 0, ph->size };
    if (ph->serial != 0)
        return VPMM_SUCCESS;
    VPMM_CHECK(vpmm_i_drv_status(p, p->drv->mem_export(p->drv, ph->handle, &sh)));
    ph->ipc_fd = sh.fd;
    ph->ipc_offset = sh.offset;
    ph->serial = ++p->ipc_serial;
    return VPMM_SUCCESS;
}

/* The slot of r's shares: its use of that kind, or a new one (host memory permitting). */
static vpmm_status_t slot_of(vpmm_pool_t *p, vpmm_region_t *r, uint32_t *out)
{
    if (r->uses != NULL)
        for (size_t i = 0; i < r->uses->n; i++)
            if (r->uses->e[i].stream == NULL) {
                *out = (uint32_t)r->uses->e[i].seq;
                return VPMM_SUCCESS;
            }
    VPMM_CHECK(vpmm_i_uses_room(r));
    {
        vpmm_status_t st = vpmm_i_share_slot_take(p, out);
        if (st != VPMM_SUCCESS) {
            if (r->uses->n == 0) { /* the room was made for this use: no empty list stays (I11) */
                free(r->uses);
                r->uses = NULL;
            }
            return st;
        }
    }
    r->uses->e[r->uses->n++] = (struct vpmm_use){ NULL, *out };
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_i_share_export(vpmm_pool_t *p, vpmm_region_t *r, void *buf, size_t cap,
                                  size_t *out_len)
{
    vpmm_ipc_header_t h;
    vpmm_phys_t *first, *ph;
    size_t n, len;
    uint32_t slot;
    unsigned char *w = buf;

    if (vpmm_i_arena_of(r)->priv) {
        vpmm_i_set_error("vpmm_ipc_export: %p is a graph pool's allocation (graph pools' memory "
                         "is not shared with other processes)",
                         (void *)r->addr);
        return VPMM_ERROR_NOT_SUPPORTED;
    }
    if (!p->drv->exportable) {
        vpmm_i_set_error("vpmm_ipc_export: this pool's memory cannot be exported (%s)",
                         p->opt.ipc ? "the device does not support POSIX file descriptor handles"
                                    : "created with config.ipc = 0 / VPMM_IPC=0");
        return VPMM_ERROR_NOT_SUPPORTED;
    }
    n = handles_of(p, r, &first);
    len = sizeof h + n * sizeof(vpmm_ipc_entry_t);
    if (out_len != NULL)
        *out_len = len;
    if (cap < len || buf == NULL) {
        vpmm_i_set_error("vpmm_ipc_export: the handle takes %zu bytes, the buffer has %zu", len,
                         buf == NULL ? 0 : cap);
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    /* Everything that can fail first: a descriptor per handle (kept: the handle's own), the slot.
     * Nothing is counted before the bytes are complete. */
    ph = first;
    for (size_t i = 0; i < n; i++, ph = vpmm_i_phys_at(p, ph->va + ph->size))
        VPMM_CHECK(export_handle(p, ph));
    VPMM_CHECK(slot_of(p, r, &slot));

    memset(&h, 0, sizeof h);
    memcpy(h.magic, VPMM_IPC_MAGIC, sizeof h.magic);
    h.version = VPMM_IPC_VERSION;
    h.nphys = (uint32_t)n;
    h.pid = (int32_t)getpid();
    h.offset = r->addr - first->va;
    h.size = r->size;
    h.slot = slot;
    h.device = p->drv->device;
    vpmm_i_share_table_info(p, &h.table_fd, &h.nonce, slot, &h.gen);
    memcpy(w, &h, sizeof h);
    w += sizeof h;
    ph = first;
    for (size_t i = 0; i < n; i++, ph = vpmm_i_phys_at(p, ph->va + ph->size)) {
        vpmm_ipc_entry_t e = { ph->ipc_fd, 0, ph->serial, ph->size, ph->ipc_offset };
        memcpy(w, &e, sizeof e);
        w += sizeof e;
    }
    vpmm_i_share_add(p, slot);
    p->ipc_exports++;
    return VPMM_SUCCESS;
}

void vpmm_i_phys_unexport(vpmm_phys_t *ph)
{
    if (ph->serial != 0)
        close(ph->ipc_fd);
    ph->serial = 0;
}
