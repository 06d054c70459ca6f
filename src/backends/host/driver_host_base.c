/*
 * driver_host_base.c — the host backend's building blocks, shared by every other part
 * (driver_host.c, _mem.c, _graph.c, _stream.c) and calling none of them: the generation-checked
 * slot table (handles, events, graphs, execs, user objects), the view test and lock bracket, and
 * the failure recorders (driver.h rule 1: a view's last_code, last_call). Arrays grow through
 * RESERVE (driver_host_internal.h, on ds/array.h).
 * Thread-safety: the callers hold the node's mutex (lock_view takes it). No invariants of its own
 * (the slot tables' are I-equations in driver_host_internal.h, checked by vpmm_host_check).
 */
#include "driver_host_internal.h"

#include "util.h"

/* ---- small containers --------------------------------------------------------------------- */

uint64_t vpmm_host_i_slot_put(slot_table_t *t, void *obj)
{
    uint32_t i;
    if (t->free_head) {
        i = t->free_head - 1;
        t->free_head = t->slots[i].next_free;
    } else {
        if (t->len >= UINT32_MAX - 1 || RESERVE(t->slots, t->cap, t->len + 1))
            return 0;
        i = (uint32_t)t->len++;
        t->slots[i].gen = 1;
    }
    t->slots[i].obj = obj;
    t->slots[i].next_free = 0;
    return ((uint64_t)t->slots[i].gen << 32) | (uint64_t)(i + 1);
}

void *vpmm_host_i_slot_get(const slot_table_t *t, uint64_t id)
{
    uint64_t i = id & UINT32_MAX;
    if (i == 0 || i > t->len)
        return NULL;
    const slot_t *s = &t->slots[i - 1];
    return s->gen == (uint32_t)(id >> 32) ? s->obj : NULL;
}

/* id must resolve (vpmm_host_i_slot_get != NULL). */
void vpmm_host_i_slot_drop(slot_table_t *t, uint64_t id)
{
    uint32_t i = (uint32_t)(id & UINT32_MAX) - 1;
    slot_t *s = &t->slots[i];
    s->obj = NULL;
    s->gen = s->gen == UINT32_MAX ? 1 : s->gen + 1;
    s->next_free = t->free_head;
    t->free_head = i + 1;
}

const char vpmm_host_i_name[] = "host";

/* The view behind d, or NULL when d is not a host backend (a wrapper, NULL, ...): only a host
 * view carries this very name pointer (a wrapper names itself "fault(host)"). */
host_view_t *vpmm_host_i_as_view(vpmm_driver_t *d)
{
    return d && d->name == vpmm_host_i_name ? (host_view_t *)d : NULL;
}

host_view_t *vpmm_host_i_lock_view(vpmm_driver_t *d)
{
    host_view_t *v = vpmm_host_i_as_view(d);
    if (v)
        pthread_mutex_lock(&v->node->lock);
    return v;
}

void vpmm_host_i_unlock_view(host_view_t *v)
{
    if (v)
        pthread_mutex_unlock(&v->node->lock);
}

vpmm_dres_t vpmm_host_i_fail_call(host_view_t *v, const char *call, vpmm_dres_t res, int code)
{
    v->base.last_code = code;
    v->base.last_call = call;
    return res;
}

vpmm_dres_t vpmm_host_i_fail(host_view_t *v, vpmm_drv_entry_t entry, vpmm_dres_t res, int code)
{
    return vpmm_host_i_fail_call(v, vpmm_drv_entry_name(entry), res, code);
}

vpmm_dres_t vpmm_host_i_fail_invalid(host_view_t *v, vpmm_drv_entry_t entry)
{
    return vpmm_host_i_fail(v, entry, VPMM_DRV_INVALID, CODE_INVALID_VALUE);
}
