/*
 * consumer.c — a tiny program built against the *installed* vpmm (tests/package/run.sh builds it
 * with find_package and with pkg-config, against libvpmm.so and libvpmm.a): it includes only
 * <vpmm.h>, makes a pool on the host emulation backend, allocates, frees, destroys, and prints
 * the library's version (vpmm_version(), which must equal the header's VPMM_VERSION_*). Exit
 * status 0 on success, 1 on any failure.
 */
#include <stdio.h>
#include <string.h>

#include <vpmm.h>

static int fail(const char *what, vpmm_status_t st)
{
    fprintf(stderr, "consumer: %s: %s (%s)\n", what, vpmm_status_name(st), vpmm_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    vpmm_config_t cfg;
    vpmm_status_t st = vpmm_config_init(&cfg);
    if (st != VPMM_SUCCESS)
        return fail("vpmm_config_init", st);
    cfg.backend = VPMM_BACKEND_HOST; /* no GPU needed */
    cfg.ignore_env = 1;              /* whatever VPMM_* the caller has set */

    vpmm_pool_t *pool;
    st = vpmm_pool_create(&cfg, &pool);
    if (st != VPMM_SUCCESS)
        return fail("vpmm_pool_create", st);

    void *p = NULL;
    st = vpmm_malloc(pool, 1 << 20, NULL, &p);
    if (st != VPMM_SUCCESS)
        return fail("vpmm_malloc", st);
    memset(p, 0xab, 1 << 20); /* host backend: the memory is the CPU's */

    vpmm_stats_t stats;
    st = vpmm_get_stats(pool, &stats);
    if (st != VPMM_SUCCESS)
        return fail("vpmm_get_stats", st);
    if (stats.live_allocs != 1 || stats.live_bytes != 1 << 20) {
        fprintf(stderr, "consumer: stats say %llu live allocations, %zu bytes\n",
                (unsigned long long)stats.live_allocs, stats.live_bytes);
        return 1;
    }
    if ((st = vpmm_free(pool, p)) != VPMM_SUCCESS)
        return fail("vpmm_free", st);
    char backend[16]; /* the name, copied: the header does not say it outlives the pool */
    snprintf(backend, sizeof backend, "%s", vpmm_pool_backend_name(pool));
    if ((st = vpmm_pool_destroy(pool)) != VPMM_SUCCESS)
        return fail("vpmm_pool_destroy", st);

    /* The library it runs against must be the header's version. */
    char header[32];
    snprintf(header, sizeof header, "%d.%d.%d", VPMM_VERSION_MAJOR, VPMM_VERSION_MINOR,
             VPMM_VERSION_PATCH);
    if (strcmp(vpmm_version(), header) != 0) {
        fprintf(stderr, "consumer: vpmm_version() is %s, vpmm.h %s\n", vpmm_version(), header);
        return 1;
    }
    printf("%s: vpmm %s, %s backend, malloc/free/destroy ok\n", argc > 0 ? argv[0] : "consumer",
           vpmm_version(), backend);
    return 0;
}
