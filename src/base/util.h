/*
 * util.h — small helpers shared by every core file: alignment arithmetic, branch hints and the
 * error-propagation macros (keep the first error, one cleanup label per multi-step acquire).
 * Header-only, no state.
 */
#ifndef VPMM_UTIL_H
#define VPMM_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define VPMM_LIKELY(x)   __builtin_expect(!!(x), 1)
#define VPMM_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define VPMM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define VPMM_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Containing struct of an embedded member. */
#define VPMM_CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* Alignment helpers; a must be a power of two for the _P2 forms. */
static inline uintptr_t vpmm_align_down(uintptr_t x, uintptr_t a)
{
    return x - x % a;
}

static inline uintptr_t vpmm_align_up(uintptr_t x, uintptr_t a)
{
    return vpmm_align_down(x + a - 1, a);
}

static inline int vpmm_is_aligned(uintptr_t x, uintptr_t a)
{
    return x % a == 0;
}

/* x rounded up to a multiple of a, or 0 if that overflows. */
static inline size_t vpmm_round_up_checked(size_t x, size_t a)
{
    size_t r = x % a;
    if (r == 0)
        return x;
    if (x > SIZE_MAX - (a - r))
        return 0;
    return x + (a - r);
}

/* Keep the first failing status: `CHECK_GOTO(st, expr, fail)`. */
#define VPMM_CHECK(expr)                                                                           \
    do {                                                                                           \
        vpmm_status_t vpmm_check_st_ = (expr);                                                     \
        if (VPMM_UNLIKELY(vpmm_check_st_ != VPMM_SUCCESS))                                         \
            return vpmm_check_st_;                                                                 \
    } while (0)

#define VPMM_CHECK_GOTO(st, expr, label)                                                           \
    do {                                                                                           \
        (st) = (expr);                                                                             \
        if (VPMM_UNLIKELY((st) != VPMM_SUCCESS))                                                   \
            goto label;                                                                            \
    } while (0)

#endif /* VPMM_UTIL_H */
