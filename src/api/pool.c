/*
 * pool.c — the API floor's entry points for a pool's life: vpmm_config_init, vpmm_pool_create,
 * vpmm_pool_destroy, vpmm_stream_release, vpmm_trim, vpmm_set_max_bytes and
 * vpmm_pool_set_segment_hook. Each checks the caller's arguments and calls the core's half
 * (src/core/entry.h), which takes the pool lock.
 *
 * Creation resolves the options, opens the backend the options name (the backend factory: the
 * only file above the backends that knows them) and hands the driver to the core
 * (vpmm_i_pool_create_on), with the build's graph hooks (vpmm_i_graph_hooks(): graph/'s when it
 * is built in, VPMM_WITH_GRAPHS; this floor never names graph/); with driver_stats on, it wraps
 * that driver in the counting decorator (backends/count/) first, so that other pools call their
 * backend directly, at no cost. Stateless; thread-safe as the calls it makes.
 */
#include <stdio.h>

#include "api.h"
#include "driver_count.h"
#include "driver_cuda.h"
#include "driver_host.h"

/*
 * The CUDA backend found nothing to run on. Never a silent switch to host memory: say why, and
 * how to ask for the emulation.
 */
static void set_no_device_error(int device)
{
    char why[96];
    vpmm_driver_cuda_load_error(why, sizeof why);
    if (why[0] == '\0')
        snprintf(why, sizeof why, "device %d absent: the driver sees %d", device,
                 vpmm_driver_cuda_device_count());
    vpmm_i_set_error("no CUDA device or driver found (%s); VPMM_BACKEND=host (or config.backend = "
                     "VPMM_BACKEND_HOST) selects the host emulation",
                     why);
}

/*
 * The host backend: a pool whose config.device is set gets that device of the process-wide shared
 * node (several pools, one emulated machine: streams, VA and peers shared, as on CUDA); the
 * default (-1) a node of its own, one device, as every single-pool program and test expects.
 * config.ipc = 0 makes the view non-exportable, as the CUDA backend's handles would be.
 */
static vpmm_status_t open_host(const vpmm_options_t *opt, vpmm_driver_t **out)
{
    vpmm_host_options_t host = { .memory_limit = opt->host_memory,
                                 .per_thread_default_stream = opt->per_thread_default,
                                 .not_exportable = !opt->ipc };
    vpmm_dres_t r = opt->device >= 0 ? vpmm_host_open_shared(&host, opt->device, out)
                                     : vpmm_host_open(&host, out);
    if (r == VPMM_DRV_INVALID && opt->device >= 0)
        vpmm_i_set_error("the host backend's shared node refused device %d: not one of its "
                         "devices (8 unless opened otherwise), or host_memory differs from that of "
                         "the pools already open",
                         opt->device);
    else if (r != VPMM_DRV_OK)
        vpmm_i_set_error("the host backend could not start (error %d)", (int)r);
    return vpmm_i_status_from_dres(r);
}

static vpmm_status_t open_driver(const vpmm_options_t *opt, vpmm_driver_t **out)
{
    vpmm_dres_t r;

    if (opt->backend == VPMM_BACKEND_HOST)
        return open_host(opt, out);
    r = vpmm_driver_cuda_open(opt->device, opt->ipc ? VPMM_DRV_OPEN_EXPORTABLE : 0, out);
    if (r == VPMM_DRV_NO_DEVICE)
        set_no_device_error(opt->device);
    else if (r == VPMM_DRV_NOT_SUPPORTED)
        vpmm_i_set_error("the CUDA device does not support virtual memory management");
    else if (r != VPMM_DRV_OK)
        vpmm_i_set_error("the CUDA backend could not start (error %d)", (int)r);
    return vpmm_i_status_from_dres(r);
}

/*
 * With driver_stats on, puts the counting decorator over *drv (which it then owns when owns_drv;
 * the pool always owns the wrapper). On failure *drv is closed when owned, as pool creation would.
 */
static vpmm_status_t maybe_count(const vpmm_options_t *opt, vpmm_driver_t **drv, int *owns_drv)
{
    vpmm_driver_t *w;
    vpmm_dres_t r;
    if (!opt->driver_stats)
        return VPMM_SUCCESS;
    r = vpmm_count_wrap(*drv, *owns_drv, &w);
    if (r != VPMM_DRV_OK) {
        if (*owns_drv)
            (*drv)->close(*drv);
        vpmm_i_set_error("out of host memory for the driver statistics");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    *drv = w;
    *owns_drv = 1;
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_pool_create(const vpmm_config_t *config, vpmm_pool_t **out_pool)
{
    vpmm_options_t opt;
    vpmm_driver_t *drv;
    int owns = 1;
    if (out_pool == NULL)
        return vpmm_a_null("vpmm_pool_create", "out_pool");
    *out_pool = NULL;
    VPMM_CHECK(vpmm_i_options_resolve(config, &opt));
    VPMM_CHECK(open_driver(&opt, &drv));
    VPMM_CHECK(maybe_count(&opt, &drv, &owns));
    return vpmm_i_pool_create_on(&opt, drv, owns, vpmm_i_graph_hooks(), out_pool);
}

vpmm_status_t vpmm_a_pool_create_on(const vpmm_options_t *opt, vpmm_driver_t *drv, int owns_drv,
                                    vpmm_pool_t **out)
{
    VPMM_CHECK(maybe_count(opt, &drv, &owns_drv));
    return vpmm_i_pool_create_on(opt, drv, owns_drv, vpmm_i_graph_hooks(), out);
}

vpmm_status_t vpmm_config_init(vpmm_config_t *config)
{
    if (config == NULL)
        return vpmm_a_null("vpmm_config_init", "config");
    vpmm_i_config_defaults(config);
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_config_init_per_thread(vpmm_config_t *config)
{
    VPMM_CHECK(vpmm_config_init(config));
    config->default_stream = VPMM_DEFAULT_STREAM_PER_THREAD;
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_pool_destroy(vpmm_pool_t *pool)
{
    if (pool == NULL)
        return vpmm_a_null("vpmm_pool_destroy", "pool");
    return vpmm_i_pool_destroy(pool);
}

vpmm_status_t vpmm_stream_release(vpmm_pool_t *pool, vpmm_stream_t stream)
{
    if (pool == NULL)
        return vpmm_a_null("vpmm_stream_release", "pool");
    return vpmm_i_stream_release(pool, stream);
}

vpmm_status_t vpmm_trim(vpmm_pool_t *pool, size_t target_bytes, size_t *out_released)
{
    if (pool == NULL)
        return vpmm_a_null("vpmm_trim", "pool");
    return vpmm_i_trim(pool, target_bytes, out_released);
}

vpmm_status_t vpmm_set_max_bytes(vpmm_pool_t *pool, size_t max_bytes)
{
    if (pool == NULL)
        return vpmm_a_null("vpmm_set_max_bytes", "pool");
    if (max_bytes != 0 && max_bytes < pool->page_size) { /* page_size: set at creation */
        char a[32];
        vpmm_i_set_error("vpmm_set_max_bytes: %zu bytes is less than one page (%s); 0 lifts the "
                         "cap",
                         max_bytes, vpmm_i_format_bytes(pool->page_size, a, sizeof a));
        return VPMM_ERROR_INVALID_ARGUMENT;
    }
    vpmm_i_set_max_bytes(pool, max_bytes);
    return VPMM_SUCCESS;
}

vpmm_status_t vpmm_pool_set_segment_hook(vpmm_pool_t *pool, vpmm_segment_hook_t hook, void *user)
{
    if (pool == NULL)
        return vpmm_a_null("vpmm_pool_set_segment_hook", "pool");
    vpmm_i_set_segment_hook(pool, hook, user);
    return VPMM_SUCCESS;
}
