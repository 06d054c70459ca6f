/*
 * oom_wrap.c — the malloc, calloc and realloc wrappers of oom_wrap.h: --wrap=NAME sends every
 * reference to NAME to __wrap_NAME, and __real_NAME to the C library's.
 */
#include <stddef.h>

#include "oom_wrap.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);

int oom_armed;
static unsigned long fail_at, calls, refused;

void oom_start(unsigned long n)
{
    oom_armed = 0;
    fail_at = n;
    calls = refused = 0;
}

unsigned long oom_refused(void)
{
    return refused;
}

static int refuse(void)
{
    if (!oom_armed || ++calls != fail_at)
        return 0;
    refused++;
    return 1;
}

void *__wrap_malloc(size_t n)
{
    return refuse() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return refuse() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    return refuse() ? NULL : __real_realloc(p, n);
}
