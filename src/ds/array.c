/*
 * array.c — vpmm_i_grow, the doubling growth of plain C arrays (array.h).
 *
 * Thread safety: none; the caller holds the lock of the array's owner. The realloc hook is a
 * process-wide test knob. Checked by tests/test_array.c.
 */
#include "array.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static vpmm_grow_realloc_fn realloc_fn = realloc;

void vpmm_i_grow_set_realloc_hook(vpmm_grow_realloc_fn fn)
{
    realloc_fn = fn != NULL ? fn : realloc;
}

int vpmm_i_grow(void *arr_ptr, size_t *cap, size_t need, size_t elem, size_t first)
{
    size_t n;
    void *old, *p;

    if (need <= *cap)
        return 0;
    n = *cap ? *cap : (first ? first : 1);
    if (elem == 0 || n > SIZE_MAX / elem)
        return -1;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem)
            return -1;
        n *= 2;
    }
    memcpy(&old, arr_ptr, sizeof old);
    p = realloc_fn(old, n * elem);
    if (p == NULL)
        return -1;
    memcpy(arr_ptr, &p, sizeof p);
    *cap = n;
    return 0;
}
