/*
 * test_status.c — tests of src/core/status.c: vpmm_strerror and vpmm_status_name for every status
 * (present, distinct, and a fallback for unknown values), the driver-result mapping
 * vpmm_i_status_from_dres, and vpmm_last_error(): per thread, replaced by each new failure, left
 * alone by successes, and always NUL-terminated however long the message.
 *
 * Failures are provoked through cheap public calls that need no pool (vpmm_config_init(NULL),
 * vpmm_malloc(NULL, ...), vpmm_pool_destroy(NULL)), so nothing here touches a driver.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>

#include "driver.h"
#include "status.h"
#include "vpmm.h"

#define N_STATUS 20 /* VPMM_SUCCESS .. VPMM_ERROR_IO */

/* The names are part of the API (they are logged), so each is checked exactly. */
static const char *const status_names[N_STATUS] = {
    "VPMM_SUCCESS",
    "VPMM_ERROR_INVALID_ARGUMENT",
    "VPMM_ERROR_INVALID_SIZE",
    "VPMM_ERROR_SIZE_TOO_LARGE",
    "VPMM_ERROR_OUT_OF_MEMORY",
    "VPMM_ERROR_HOST_OUT_OF_MEMORY",
    "VPMM_ERROR_FOREIGN_POINTER",
    "VPMM_ERROR_DOUBLE_FREE",
    "VPMM_ERROR_INTERIOR_POINTER",
    "VPMM_ERROR_NO_DEVICE",
    "VPMM_ERROR_NOT_SUPPORTED",
    "VPMM_ERROR_DRIVER",
    "VPMM_ERROR_INVALID_CONFIG",
    "VPMM_ERROR_INVALID_ENV",
    "VPMM_ERROR_STREAM_CAPTURING",
    "VPMM_ERROR_POOL_BUSY",
    "VPMM_ERROR_WRONG_POOL",
    "VPMM_ERROR_CHECKPOINT_CONFLICT",
    "VPMM_ERROR_NOT_CAPTURING",
    "VPMM_ERROR_IO",
};

/* The enum's values are stable: pin them, since the tables above and below index by them. */
_Static_assert(VPMM_SUCCESS == 0, "status values are stable");
_Static_assert(VPMM_ERROR_NO_DEVICE == 9, "status values are stable");
_Static_assert(VPMM_ERROR_IO == N_STATUS - 1, "N_STATUS covers every status");

static void test_status_names(void **state)
{
    (void)state;
    for (int i = 0; i < N_STATUS; i++)
        assert_string_equal(vpmm_status_name((vpmm_status_t)i), status_names[i]);
}

static void test_strerror_every_status(void **state)
{
    (void)state;
    for (int i = 0; i < N_STATUS; i++) {
        const char *s = vpmm_strerror((vpmm_status_t)i);
        assert_non_null(s);
        if (s[0] == '\0')
            fail_msg("vpmm_strerror(%d) is empty", i);
        assert_null(strchr(s, '\n'));
        /* A description, not the constant's name. */
        assert_null(strstr(s, "VPMM_ERROR_"));
    }
    assert_string_equal(vpmm_strerror(VPMM_SUCCESS), "success");
    assert_string_equal(vpmm_strerror(VPMM_ERROR_OUT_OF_MEMORY), "out of device memory");
}

static void test_all_distinct(void **state)
{
    (void)state;
    for (int i = 0; i < N_STATUS; i++) {
        for (int j = i + 1; j < N_STATUS; j++) {
            if (strcmp(vpmm_strerror((vpmm_status_t)i), vpmm_strerror((vpmm_status_t)j)) == 0)
                fail_msg("statuses %d and %d share the description \"%s\"", i, j,
                         vpmm_strerror((vpmm_status_t)i));
            if (strcmp(vpmm_status_name((vpmm_status_t)i), vpmm_status_name((vpmm_status_t)j)) == 0)
                fail_msg("statuses %d and %d share the name \"%s\"", i, j,
                         vpmm_status_name((vpmm_status_t)i));
        }
    }
}

static void test_unknown_status(void **state)
{
    static const int unknown[] = { N_STATUS, 999, -1, INT32_MAX };
    (void)state;
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        vpmm_status_t st = (vpmm_status_t)unknown[i];
        assert_string_equal(vpmm_strerror(st), "unknown status");
        assert_string_equal(vpmm_status_name(st), "VPMM_STATUS_UNKNOWN");
    }
}

static void test_status_from_dres(void **state)
{
    static const struct {
        vpmm_dres_t r;
        vpmm_status_t want;
    } map[] = {
        { VPMM_DRV_OK, VPMM_SUCCESS },
        { VPMM_DRV_NOT_READY, VPMM_ERROR_DRIVER },
        { VPMM_DRV_OUT_OF_MEMORY, VPMM_ERROR_OUT_OF_MEMORY },
        { VPMM_DRV_NO_DEVICE, VPMM_ERROR_NO_DEVICE },
        { VPMM_DRV_NOT_SUPPORTED, VPMM_ERROR_NOT_SUPPORTED },
        { VPMM_DRV_INVALID, VPMM_ERROR_DRIVER },
        { VPMM_DRV_ERROR, VPMM_ERROR_DRIVER },
    };
    (void)state;
    assert_int_equal(sizeof map / sizeof map[0], VPMM_DRV_ERROR + 1); /* every driver result */
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        vpmm_status_t got = vpmm_i_status_from_dres(map[i].r);
        if (got != map[i].want)
            fail_msg("status_from_dres(%d) = %s, want %s", (int)map[i].r, vpmm_status_name(got),
                     vpmm_status_name(map[i].want));
    }
    /* A result this file does not know is still a failure, never success. */
    assert_int_equal(vpmm_i_status_from_dres((vpmm_dres_t)99), VPMM_ERROR_DRIVER);
}

/* ---- vpmm_last_error ----------------------------------------------------------------------- */

typedef struct thread_result {
    char initial[256];    /* the thread's message before it failed anything */
    char after_fail[256]; /* after its own failing call */
    vpmm_status_t status; /* of that call */
    void *ptr_after;      /* vpmm_malloc's out pointer, which must be set to NULL */
    const char *msg_addr; /* where this thread's message lives */
} thread_result_t;

static void *failing_thread(void *arg)
{
    thread_result_t *r = arg;
    void *p = &p;
    snprintf(r->initial, sizeof r->initial, "%s", vpmm_last_error());
    r->status = vpmm_malloc(NULL, 1, NULL, &p);
    r->ptr_after = p;
    snprintf(r->after_fail, sizeof r->after_fail, "%s", vpmm_last_error());
    r->msg_addr = vpmm_last_error();
    return NULL;
}

static void test_last_error_is_thread_local(void **state)
{
    thread_result_t r;
    pthread_t t;
    char mine[256];
    (void)state;
    assert_int_equal(vpmm_config_init(NULL), VPMM_ERROR_INVALID_ARGUMENT);
    snprintf(mine, sizeof mine, "%s", vpmm_last_error());
    assert_non_null(strstr(mine, "vpmm_config_init"));

    memset(&r, 0, sizeof r);
    assert_int_equal(pthread_create(&t, NULL, failing_thread, &r), 0);
    assert_int_equal(pthread_join(t, NULL), 0);

    /* The new thread started with no message of its own, then got its own failure... */
    assert_string_equal(r.initial, "");
    assert_int_equal(r.status, VPMM_ERROR_INVALID_ARGUMENT);
    assert_null(r.ptr_after);
    assert_non_null(strstr(r.after_fail, "vpmm_malloc"));
    assert_non_null(strstr(r.after_fail, "pool"));
    assert_ptr_not_equal(r.msg_addr, vpmm_last_error());
    /* ...and the main thread's message is unchanged. */
    assert_string_equal(vpmm_last_error(), mine);
}

#define N_THREADS 8
#define N_ROUNDS  2000

/* Threads failing concurrently each read back exactly their own message. */
static void *racing_thread(void *arg)
{
    const char *expect = arg;
    long bad = 0;
    for (int i = 0; i < N_ROUNDS; i++) {
        if (expect[0] == 'c')
            (void)vpmm_config_init(NULL);
        else if (expect[0] == 'm')
            (void)vpmm_malloc(NULL, 1, NULL, NULL);
        else
            (void)vpmm_pool_destroy(NULL);
        if (strstr(vpmm_last_error(), expect) == NULL)
            bad++;
    }
    return (void *)bad;
}

static void test_last_error_concurrent(void **state)
{
    static const char *const expect[] = { "config", "malloc", "destroy" };
    pthread_t t[N_THREADS];
    (void)state;
    for (int i = 0; i < N_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, racing_thread, (void *)expect[i % 3]), 0);
    for (int i = 0; i < N_THREADS; i++) {
        void *bad;
        assert_int_equal(pthread_join(t[i], &bad), 0);
        assert_int_equal((long)bad, 0);
    }
}

static void test_last_error_replaced_by_latest_failure(void **state)
{
    void *p = &p;
    vpmm_config_t c;
    (void)state;
    assert_int_equal(vpmm_malloc(NULL, 1, NULL, &p), VPMM_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vpmm_last_error(), "vpmm_malloc"));
    assert_int_equal(vpmm_config_init(NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vpmm_last_error(), "vpmm_config_init"));
    assert_null(strstr(vpmm_last_error(), "vpmm_malloc"));
    assert_int_equal(vpmm_pool_destroy(NULL), VPMM_ERROR_INVALID_ARGUMENT);
    assert_string_equal(vpmm_last_error(), "vpmm_pool_destroy: pool is NULL");

    /* A success leaves the latest failure in place (like errno and dlerror). */
    assert_int_equal(vpmm_config_init(&c), VPMM_SUCCESS);
    assert_string_equal(vpmm_last_error(), "vpmm_pool_destroy: pool is NULL");
}

static void test_set_error_formats_and_truncates(void **state)
{
    char big[1024];
    (void)state;
    vpmm_i_set_error("%s=%d", "x", 42);
    assert_string_equal(vpmm_last_error(), "x=42");

    /* Longer than the buffer: truncated, NUL-terminated, and the prefix is kept. */
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    vpmm_i_set_error("VPMM_PAGE_SIZE='%s'", big);
    size_t len = strlen(vpmm_last_error());
    assert_true(len > 0 && len < sizeof big);
    assert_int_equal(strncmp(vpmm_last_error(), "VPMM_PAGE_SIZE='aaa", 19), 0);

    vpmm_i_set_error("%s", "");
    assert_string_equal(vpmm_last_error(), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_strerror_every_status),
        cmocka_unit_test(test_all_distinct),
        cmocka_unit_test(test_unknown_status),
        cmocka_unit_test(test_status_from_dres),
        cmocka_unit_test(test_last_error_is_thread_local),
        cmocka_unit_test(test_last_error_concurrent),
        cmocka_unit_test(test_last_error_replaced_by_latest_failure),
        cmocka_unit_test(test_set_error_formats_and_truncates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
