/*
 * test_assert.c — vpmm_assert.h: a failed VPMM_ASSERT prints "vpmm: file:line: assertion failed:
 * cond" on stderr and aborts (checked in a child process); the levels decide which macros
 * evaluate their condition (this file is compiled at level 1: VPMM_ASSERT on, VPMM_ASSERT_SLOW
 * off, its condition not evaluated).
 */
#undef VPMM_ASSERT_LEVEL
#define VPMM_ASSERT_LEVEL 1

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "vpmm_assert.h"

static int evaluated;

static int touch(int v)
{
    evaluated++;
    return v;
}

static void test_levels(void **state)
{
    (void)state;
    evaluated = 0;
    VPMM_ASSERT(touch(1));
    assert_int_equal(evaluated, 1);
    VPMM_ASSERT_SLOW(touch(0)); /* level 1: not evaluated, so no abort */
    assert_int_equal(evaluated, 1);
}

static void test_failure_aborts_with_location(void **state)
{
    int fds[2], status;
    char buf[256] = { 0 };
    ssize_t n, got = 0;
    pid_t pid;
    (void)state;
    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        signal(SIGABRT, SIG_DFL);
        VPMM_ASSERT(touch(2) == 3);
        _exit(0); /* not reached */
    }
    close(fds[1]);
    while ((n = read(fds[0], buf + got, sizeof buf - 1 - (size_t)got)) > 0)
        got += n;
    close(fds[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
    assert_non_null(strstr(buf, "vpmm: "));
    assert_non_null(strstr(buf, "test_assert.c:"));
    assert_non_null(strstr(buf, "assertion failed: touch(2) == 3"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_failure_aborts_with_location),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
