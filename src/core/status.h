/*
 * status.h — internal error reporting: the thread-local message behind vpmm_last_error() and the
 * mapping from driver results to public statuses. Thread-safe (thread-local state only).
 */
#ifndef VPMM_STATUS_H
#define VPMM_STATUS_H

#include "driver.h"
#include "vpmm.h"

/* Sets this thread's vpmm_last_error() message (printf-style, truncated to one line). */
void vpmm_i_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* This thread's message (vpmm_last_error returns it). */
const char *vpmm_i_last_error(void);

/* The public status for a failed driver result: OOM, no device and not supported keep their
 * meaning; anything else is VPMM_ERROR_DRIVER. */
vpmm_status_t vpmm_i_status_from_dres(vpmm_dres_t r);

#endif /* VPMM_STATUS_H */
