/*
 * status.c — the per-thread "last error" message, and driver results as public statuses.
 *
 * vpmm_last_error() (src/api/status.c, with the statuses' names and descriptions) explains the
 * latest failure of a vpmm call in the calling thread in one line (which environment variable was
 * malformed, which driver call failed with which code). The message lives in thread-local storage,
 * so this file is thread-safe without locks. Internal code sets it with vpmm_i_set_error() at the
 * point of failure; successful calls leave it alone (like dlerror and errno), so it always
 * describes the latest *failure*.
 */
#include <stdarg.h>
#include <stdio.h>

#include "status.h"

static _Thread_local char last_error[256];

void vpmm_i_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    /* One line, always: user text (an environment value) may hold control characters. */
    for (char *c = last_error; *c; c++)
        if ((unsigned char)*c < 0x20)
            *c = '?';
}

const char *vpmm_i_last_error(void)
{
    return last_error;
}

vpmm_status_t vpmm_i_status_from_dres(vpmm_dres_t r)
{
    switch (r) {
    case VPMM_DRV_OK:
        return VPMM_SUCCESS;
    case VPMM_DRV_OUT_OF_MEMORY:
        return VPMM_ERROR_OUT_OF_MEMORY;
    case VPMM_DRV_NO_DEVICE:
        return VPMM_ERROR_NO_DEVICE;
    case VPMM_DRV_NOT_SUPPORTED:
        return VPMM_ERROR_NOT_SUPPORTED;
    case VPMM_DRV_NOT_READY:
    case VPMM_DRV_INVALID:
    case VPMM_DRV_ERROR:
        return VPMM_ERROR_DRIVER;
    }
    return VPMM_ERROR_DRIVER;
}
