/*
 * share.h — sharing with other processes: share slots (share_table.c), exports (share.c),
 * imports (import.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_SHARE_H
#define VPMM_SHARE_H

#include "pool.h"

/* A free slot (count 0) for a newly shared allocation, the table created at the first. */
vpmm_status_t vpmm_i_share_slot_take(vpmm_pool_t *p, uint32_t *out);
/* Gives a slot back (its allocation is gone); handles naming its old use become stale. */
void vpmm_i_share_slot_give(vpmm_pool_t *p, uint32_t slot);
/* One share more (an export); the shares not over yet (another process may map the memory). */
void vpmm_i_share_add(vpmm_pool_t *p, uint32_t slot);
uint32_t vpmm_i_share_count(const vpmm_pool_t *p, uint32_t slot);
/* Ends one share of a slot's use gen, wherever the slot is mapped (never below 0, never another
 * use's): 1 if there was one. */
int vpmm_i_share_end(vpmm_share_slot_t *s, uint32_t gen);
/* Ends every share of r's use (vpmm_ipc_unshare); nothing if r was never exported. */
void vpmm_i_share_end_all(vpmm_pool_t *p, vpmm_region_t *r);
/* What the handle bytes say of the table: its descriptor, the pool's nonce, the slot's gen. */
void vpmm_i_share_table_info(const vpmm_pool_t *p, int *fd, uint64_t *nonce, uint32_t slot,
                             uint32_t *gen);
/* Slots held by allocations now (vpmm_stats_t.ipc_shared). */
uint32_t vpmm_i_share_live(const vpmm_pool_t *p);
/* Frees the table (pool destruction). */
void vpmm_i_share_table_fini(vpmm_pool_t *p);

/* vpmm_ipc_export of allocation r: the handle bytes into buf (cap bytes; *out_len: their length,
 * also when cap is too small, then VPMM_ERROR_INVALID_ARGUMENT and nothing changes). */
vpmm_status_t vpmm_i_share_export(vpmm_pool_t *p, vpmm_region_t *r, void *buf, size_t cap,
                                  size_t *out_len);
/* Closes a handle's exported descriptor, if any (the handle is being given back). */
void vpmm_i_phys_unexport(vpmm_phys_t *ph);

/* vpmm_ipc_open / vpmm_ipc_close (import.c). */
vpmm_status_t vpmm_i_import_open(vpmm_pool_t *p, const void *handle, size_t len, void **out_ptr);
vpmm_status_t vpmm_i_import_close(vpmm_pool_t *p, void *ptr);
/* Grants `device` access to every imported mapping (vpmm_i_peer_grant's last step); on failure
 * the imports granted so far are revoked again. */
vpmm_status_t vpmm_i_import_grant(vpmm_pool_t *p, int device);
/* I14 for the imported mappings; the number of pages found inaccessible (check.c). */
size_t vpmm_i_import_check(const vpmm_pool_t *p, FILE *report);
/* Opens not closed yet (a pool with any is busy); unmaps every mapping (pool destruction). */
size_t vpmm_i_import_opens(const vpmm_pool_t *p);
vpmm_status_t vpmm_i_import_fini(vpmm_pool_t *p);

#endif /* VPMM_SHARE_H */
