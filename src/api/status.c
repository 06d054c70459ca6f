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

/* Every status and its text, written once: the two switches below are made from it, so the
 * compiler (-Wswitch) still names a status of vpmm.h that this list lacks. */
#define VPMM_STATUSES(X)                                                                           \
    X(VPMM_SUCCESS, "success")                                                                     \
    X(VPMM_ERROR_INVALID_ARGUMENT, "invalid argument (NULL pool or output pointer)")               \
    X(VPMM_ERROR_INVALID_SIZE, "invalid size (0 bytes)")                                           \
    X(VPMM_ERROR_SIZE_TOO_LARGE, "size larger than a VA chunk")                                    \
    X(VPMM_ERROR_OUT_OF_MEMORY, "out of device memory")                                            \
    X(VPMM_ERROR_HOST_OUT_OF_MEMORY, "out of host memory for bookkeeping")                         \
    X(VPMM_ERROR_FOREIGN_POINTER, "pointer does not belong to this pool")                          \
    X(VPMM_ERROR_DOUBLE_FREE, "pointer is not allocated (double free?)")                           \
    X(VPMM_ERROR_INTERIOR_POINTER, "pointer is inside an allocation, not its start")               \
    X(VPMM_ERROR_NO_DEVICE, "no CUDA driver or device")                                            \
    X(VPMM_ERROR_NOT_SUPPORTED, "not supported")                                                   \
    X(VPMM_ERROR_DRIVER, "driver call failed")                                                     \
    X(VPMM_ERROR_INVALID_CONFIG, "invalid configuration value")                                    \
    X(VPMM_ERROR_INVALID_ENV, "invalid VPMM_* environment variable")                               \
    X(VPMM_ERROR_STREAM_CAPTURING, "stream or graph pool is being captured")                       \
    X(VPMM_ERROR_POOL_BUSY, "pool still has live allocations or graph pools")                      \
    X(VPMM_ERROR_WRONG_POOL, "object belongs to another pool or graph pool")                       \
    X(VPMM_ERROR_CHECKPOINT_CONFLICT, "checkpoint conflicts with the graph pool's mapped memory")  \
    X(VPMM_ERROR_NOT_CAPTURING, "stream is not being captured")                                    \
    X(VPMM_ERROR_IO, "a file vpmm writes could not be written")

const char *vpmm_strerror(vpmm_status_t status)
{
    switch (status) {
#define TEXT(name, text)                                                                           \
    case name:                                                                                     \
        return text;
        VPMM_STATUSES(TEXT)
#undef TEXT
    }
    return "unknown status";
}

const char *vpmm_status_name(vpmm_status_t status)
{
    switch (status) {
#define NAME(name, text)                                                                           \
    case name:                                                                                     \
        return #name;
        VPMM_STATUSES(NAME)
#undef NAME
    }
    return "VPMM_STATUS_UNKNOWN";
}
