/*
 * trace.h — allocation traces (docs/TRACE_FORMAT.md) loaded into a flat array of operations.
 *
 * Text, optionally gzip-compressed, one event per line, '#' lines are comments:
 *   a <addr-hex> <size> <stream>   allocation
 *   f <addr-hex> <size> <stream>   free requested by the program
 *   c <addr-hex> <size> <stream>   the free completed (informational)
 * Addresses only identify blocks (they are reused after a free); the loader turns them into dense
 * slot numbers, so a replay indexes arrays and never hashes inside its timed region. Every line is
 * validated (a double allocation, a free of an unknown block, a size that does not match, a
 * malformed field, a negative size or stream) and the first error names its line number; gzip
 * data cut short is reported as truncated. Not thread-safe (one loader each).
 */
#ifndef VPMM_BENCH_TRACE_H
#define VPMM_BENCH_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef enum trace_kind { TRACE_ALLOC = 0, TRACE_FREE = 1 } trace_kind_t;

typedef struct trace_op {
    uint32_t kind : 1;    /* trace_kind_t */
    uint32_t stream : 31; /* index into trace_t.stream_ids */
    uint32_t slot;        /* block number: ALLOC fills it, FREE empties it */
    uint64_t size;
} trace_op_t;

typedef struct trace {
    trace_op_t *ops;
    size_t nops;
    size_t nslots;        /* max blocks live at once (slots are reused) */
    uint64_t *stream_ids; /* the trace's stream numbers, in order of first use */
    size_t nstreams;
    uint64_t peak_live; /* max over time of the sum of live sizes */
    size_t allocs, frees, completions;
    uint64_t total_alloc_bytes;
} trace_t;

/*
 * Loads path ("-" = stdin; a name ending in .gz is decompressed). Returns 0, or -1 with a
 * one-line message ("gpt2.trace.gz:1234: free of a block that is not allocated", "t.trace:7:
 * negative size -512 ...", "gpt2.trace.gz: truncated: the compressed data ends early ...") in err.
 */
int trace_load(const char *path, trace_t *out, char *err, size_t errlen);
void trace_free(trace_t *t);

#endif /* VPMM_BENCH_TRACE_H */
