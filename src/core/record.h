/*
 * record.h — trace recording, VPMM_TRACE_FILE (record.c).
 * The structs and their invariants are pool.h's; core.h includes every header of the core.
 */
#ifndef VPMM_RECORD_H
#define VPMM_RECORD_H

#include "pool.h"

/* Opens opt.trace_file if set (the status names the knob when it cannot be opened). */
vpmm_status_t vpmm_i_record_open(vpmm_pool_t *p);
/* Writes one trace line: op 'a' (a malloc served) or 'f' (a free), under the pool lock. */
void vpmm_i_record_op(vpmm_pool_t *p, char op, uintptr_t addr, size_t size, vpmm_stream_key_t k);
/* Writes out and closes the trace (pool destruction): VPMM_ERROR_IO (said on stderr and in
 * vpmm_last_error) when a write or the close failed, then or before. */
vpmm_status_t vpmm_i_record_close(vpmm_pool_t *p);
/* The zlib a ".gz" trace is written through, loaded at run time ("libz.so.1"; tests point it
 * elsewhere to see a system without zlib). */
extern const char *vpmm_i_zlib_name;

#endif /* VPMM_RECORD_H */
