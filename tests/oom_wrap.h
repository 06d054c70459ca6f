/*
 * oom_wrap.h — host allocations refused on demand, for the tests that sweep host-memory failures
 * (tests/test_host_oom.c, integrations/pytorch/test_torch_adapter_oom.c). Such a test is linked
 * with --wrap=malloc,--wrap=calloc,--wrap=realloc and compiles oom_wrap.c in: every allocation of
 * the objects it links (vpmm, the host backend, the PyTorch adapter) then goes through wrappers
 * that count the calls made while armed and refuse the n-th; disarmed, they only pass through
 * (cmocka's and the checks' own allocations). One thread at a time: the state is plain globals.
 */
#ifndef VPMM_TEST_OOM_WRAP_H
#define VPMM_TEST_OOM_WRAP_H

#include "vpmm.h"

/* Nonzero while allocations are counted (and the chosen one refused). */
extern int oom_armed;

/* Disarms and starts a run: the fail_at-th allocation made while armed (1-based) is refused. */
void oom_start(unsigned long fail_at);
/* Allocations refused since oom_start (0: the run made fewer than fail_at). */
unsigned long oom_refused(void);

/* The status of call, made armed: OOM_ARMED(vpmm_malloc(...)). */
#define OOM_ARMED(call) (oom_armed = 1, oom_disarm(call))
static inline vpmm_status_t oom_disarm(vpmm_status_t st)
{
    oom_armed = 0;
    return st;
}

#endif /* VPMM_TEST_OOM_WRAP_H */
