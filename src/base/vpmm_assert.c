/*
 * vpmm_assert.c — the failure path of VPMM_ASSERT (vpmm_assert.h): report and abort. Thread-safe
 * (one fprintf, then abort).
 */
#include "vpmm_assert.h"

#include <stdio.h>
#include <stdlib.h>

_Noreturn void vpmm_i_assert_fail(const char *file, int line, const char *cond)
{
    fprintf(stderr, "vpmm: %s:%d: assertion failed: %s\n", file, line, cond);
    fflush(stderr);
    abort();
}
