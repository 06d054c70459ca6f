/*
 * array.h — growing a plain C array (pointer + count + capacity kept by the caller) by doubling.
 *
 * One helper for every growable array of the library: the core's tables (stream sides, plan runs,
 * candidates, idle events, region slabs, trace stream ids), checkpoints and the host backend's
 * slot tables. The caller keeps its own count; the helper only makes room. On failure (out of
 * host memory, or a size that would overflow) nothing changes: the array, its contents and its
 * capacity are as before, so a caller's failure path stays transactional.
 *
 * Thread safety: none of its own; the array belongs to whoever holds its owner's lock. The
 * realloc hook is a process-wide test knob. No invariants beyond cap >= need on success
 * (tests/test_array.c).
 */
#ifndef VPMM_ARRAY_H
#define VPMM_ARRAY_H

#include <stddef.h>

/*
 * Makes room for `need` elements of `elem` bytes in the array whose address is stored at
 * `arr_ptr` (a pointer to the caller's T * variable; NULL arrays are fine) and whose capacity is
 * *cap. When need > *cap the capacity becomes *cap (or `first` when *cap is 0) doubled until it is
 * at least need. Returns 0, or -1 with *arr_ptr and *cap untouched (out of host memory, or
 * need * elem would overflow). The pointer moves through memcpy, so one function serves every
 * element type without aliasing tricks; VPMM_GROW below is the typed way to call it.
 */
int vpmm_i_grow(void *arr_ptr, size_t *cap, size_t need, size_t elem, size_t first);

/* vpmm_i_grow for an array lvalue `arr` of any T * type and its size_t capacity lvalue `cap`. */
#define VPMM_GROW(arr, cap, need, first) vpmm_i_grow(&(arr), &(cap), (need), sizeof *(arr), (first))

/* Test hook: the realloc-compatible function vpmm_i_grow uses (NULL restores realloc).
 * Process-wide; for single-threaded tests only. */
typedef void *(*vpmm_grow_realloc_fn)(void *old, size_t bytes);
void vpmm_i_grow_set_realloc_hook(vpmm_grow_realloc_fn fn);

#endif
