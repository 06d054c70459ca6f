/*
 * peer.h — other devices' access to the pool's mappings (peer.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_PEER_H
#define VPMM_PEER_H

#include "pool.h"

/* Grants `device` (not yet granted, not the pool's own) read-write access to every mapping of the
 * pool and records it in p->peers, so that every later set_access names it; transactional. */
vpmm_status_t vpmm_i_peer_grant(vpmm_pool_t *p, int device);
/* Whether device may use the pool's memory: the pool's own device, or a granted one. */
int vpmm_i_peer_granted(const vpmm_pool_t *p, int device);
/* p->peers as a mask (bit k: device k), for the statistics. */
uint64_t vpmm_i_peer_mask(const vpmm_pool_t *p);

#endif /* VPMM_PEER_H */
