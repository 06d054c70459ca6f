/*
 * test_pattern.h — a byte pattern to write through one address and read back through another
 * (a remap, another process's mapping of the same memory): one byte per 4 KiB and the last byte,
 * a function of a seed, so a stale or wrong page shows. Header-only, for the host tests and the
 * PyTorch adapter's tests (tests/test_ipc.c, integrations/pytorch/test_torch_adapter_ipc.c).
 */
#ifndef VPMM_TEST_PATTERN_H
#define VPMM_TEST_PATTERN_H

#include <stddef.h>

/* Writes the pattern of `seed` over [p, p + n) (n > 0). */
static inline void tpattern_fill(void *p, size_t n, unsigned seed)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i += 4096)
        b[i] = (unsigned char)(seed + i / 4096);
    b[n - 1] = (unsigned char)(seed ^ 0x5a);
}

/* 1 if [p, p + n) holds the pattern of `seed`, else 0. */
static inline int tpattern_same(const void *p, size_t n, unsigned seed)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i += 4096)
        if (b[i] != (unsigned char)(seed + i / 4096))
            return 0;
    return b[n - 1] == (unsigned char)(seed ^ 0x5a);
}

#endif
