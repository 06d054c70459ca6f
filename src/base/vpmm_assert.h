/*
 * vpmm_assert.h — internal assertions with levels, for every layer (it is in base/, the bottom).
 *
 * For invariants of vpmm's own bookkeeping only: a failure means a bug in vpmm. Never for user
 * input (a status and vpmm_last_error() answer that) nor for driver errors (a status too, the
 * pool stays usable): the library never aborts for those.
 *
 *   VPMM_ASSERT(cond)       level >= 1: O(1) checks off the malloc/free hot path
 *   VPMM_ASSERT_SLOW(cond)  level >= 2: O(n) checks, and checks on the hot path
 *
 * VPMM_ASSERT_LEVEL comes from CMake (option VPMM_ASSERT_LEVEL, AUTO: 2 in sanitizer, fuzzer and
 * Debug builds, 1 in builds with the tests, 0 in a library-only build such as the installed
 * package); without it, 0 under NDEBUG and 1 otherwise. A failed assertion prints
 * "vpmm: file:line: assertion failed: cond" on stderr and aborts. At level 0 the condition is not
 * evaluated (but still compiled, so it cannot rot).
 */
#ifndef VPMM_ASSERT_H
#define VPMM_ASSERT_H

#ifndef VPMM_ASSERT_LEVEL
#ifdef NDEBUG
#define VPMM_ASSERT_LEVEL 0
#else
#define VPMM_ASSERT_LEVEL 1
#endif
#endif

/* Prints where and what, then abort(). */
_Noreturn void vpmm_i_assert_fail(const char *file, int line, const char *cond);

#define VPMM_ASSERT_IMPL(cond)                                                                     \
    (__builtin_expect(!!(cond), 1) ? (void)0 : vpmm_i_assert_fail(__FILE__, __LINE__, #cond))
#define VPMM_ASSERT_NONE(cond) ((void)sizeof(!(cond)))

#if VPMM_ASSERT_LEVEL >= 1
#define VPMM_ASSERT(cond) VPMM_ASSERT_IMPL(cond)
#else
#define VPMM_ASSERT(cond) VPMM_ASSERT_NONE(cond)
#endif

#if VPMM_ASSERT_LEVEL >= 2
#define VPMM_ASSERT_SLOW(cond) VPMM_ASSERT_IMPL(cond)
#else
#define VPMM_ASSERT_SLOW(cond) VPMM_ASSERT_NONE(cond)
#endif

#endif /* VPMM_ASSERT_H */
