/*
 * status.c — the API floor's entry points about statuses: vpmm_last_error (this thread's message
 * about its latest failure, kept by the core: src/core/status.c), vpmm_strerror (a status in
 * words) and vpmm_status_name (its name in vpmm.h). Thread-safe: no state of their own.
 */
#include "api.h"

const char *vpmm_last_error(void)
{
    return vpmm_i_last_error();
}

const char *vpmm_strerror(vpmm_status_t status)
{
    switch (status) {
    case VPMM_SUCCESS:
        return "success";
    case VPMM_ERROR_INVALID_ARGUMENT:
        return "invalid argument (NULL pool or output pointer)";
    case VPMM_ERROR_INVALID_SIZE:
        return "invalid size (0 bytes)";
    case VPMM_ERROR_SIZE_TOO_LARGE:
        return "size larger than a VA chunk";
    case VPMM_ERROR_OUT_OF_MEMORY:
        return "out of device memory";
    case VPMM_ERROR_HOST_OUT_OF_MEMORY:
        return "out of host memory for bookkeeping";
    case VPMM_ERROR_FOREIGN_POINTER:
        return "pointer does not belong to this pool";
    case VPMM_ERROR_DOUBLE_FREE:
        return "pointer is not allocated (double free?)";
    case VPMM_ERROR_INTERIOR_POINTER:
        return "pointer is inside an allocation, not its start";
    case VPMM_ERROR_NO_DEVICE:
        return "no CUDA driver or device";
    case VPMM_ERROR_NOT_SUPPORTED:
        return "not supported";
    case VPMM_ERROR_DRIVER:
        return "driver call failed";
    case VPMM_ERROR_INVALID_CONFIG:
        return "invalid configuration value";
    case VPMM_ERROR_INVALID_ENV:
        return "invalid VPMM_* environment variable";
    case VPMM_ERROR_STREAM_CAPTURING:
        return "stream or graph pool is being captured";
    case VPMM_ERROR_POOL_BUSY:
        return "pool still has live allocations or graph pools";
    case VPMM_ERROR_WRONG_POOL:
        return "object belongs to another pool or graph pool";
    case VPMM_ERROR_CHECKPOINT_CONFLICT:
        return "checkpoint conflicts with the graph pool's mapped memory";
    case VPMM_ERROR_NOT_CAPTURING:
        return "stream is not being captured";
    case VPMM_ERROR_IO:
        return "a file vpmm writes could not be written";
    }
    return "unknown status";
}

const char *vpmm_status_name(vpmm_status_t status)
{
    switch (status) {
    case VPMM_SUCCESS:
        return "VPMM_SUCCESS";
    case VPMM_ERROR_INVALID_ARGUMENT:
        return "VPMM_ERROR_INVALID_ARGUMENT";
    case VPMM_ERROR_INVALID_SIZE:
        return "VPMM_ERROR_INVALID_SIZE";
    case VPMM_ERROR_SIZE_TOO_LARGE:
        return "VPMM_ERROR_SIZE_TOO_LARGE";
    case VPMM_ERROR_OUT_OF_MEMORY:
        return "VPMM_ERROR_OUT_OF_MEMORY";
    case VPMM_ERROR_HOST_OUT_OF_MEMORY:
        return "VPMM_ERROR_HOST_OUT_OF_MEMORY";
    case VPMM_ERROR_FOREIGN_POINTER:
        return "VPMM_ERROR_FOREIGN_POINTER";
    case VPMM_ERROR_DOUBLE_FREE:
        return "VPMM_ERROR_DOUBLE_FREE";
    case VPMM_ERROR_INTERIOR_POINTER:
        return "VPMM_ERROR_INTERIOR_POINTER";
    case VPMM_ERROR_NO_DEVICE:
        return "VPMM_ERROR_NO_DEVICE";
    case VPMM_ERROR_NOT_SUPPORTED:
        return "VPMM_ERROR_NOT_SUPPORTED";
    case VPMM_ERROR_DRIVER:
        return "VPMM_ERROR_DRIVER";
    case VPMM_ERROR_INVALID_CONFIG:
        return "VPMM_ERROR_INVALID_CONFIG";
    case VPMM_ERROR_INVALID_ENV:
        return "VPMM_ERROR_INVALID_ENV";
    case VPMM_ERROR_STREAM_CAPTURING:
        return "VPMM_ERROR_STREAM_CAPTURING";
    case VPMM_ERROR_POOL_BUSY:
        return "VPMM_ERROR_POOL_BUSY";
    case VPMM_ERROR_WRONG_POOL:
        return "VPMM_ERROR_WRONG_POOL";
    case VPMM_ERROR_CHECKPOINT_CONFLICT:
        return "VPMM_ERROR_CHECKPOINT_CONFLICT";
    case VPMM_ERROR_NOT_CAPTURING:
        return "VPMM_ERROR_NOT_CAPTURING";
    case VPMM_ERROR_IO:
        return "VPMM_ERROR_IO";
    }
    return "VPMM_STATUS_UNKNOWN";
}
