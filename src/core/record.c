/*
 * record.c — recording a pool's allocations as a replay trace (VPMM_TRACE_FILE).
 *
 * With config.trace_file or VPMM_TRACE_FILE set, the pool writes one line per successful malloc
 * ("a <addr-hex> <size> <stream>") and per free ("f <addr-hex> <size> <stream>") in the trace
 * format of docs/TRACE_FORMAT.md, which vpmm-replay reads: a user records their own program once
 * and replays it against every allocator. Streams are numbered in order of first use (the legacy
 * stream is 0, as in PyTorch's traces); a per-thread stream of each thread gets its own number.
 * Sizes are the caller's. Graph pools' allocations are recorded like the shared pool's.
 *
 * The path may hold "%p" (the process id) and "%n" (the pool's number in the process, from 0):
 * several pools of one process (one per device) need "%n" to write separate files. The file is
 * written through a 64 KiB buffer, flushed at vpmm_pool_destroy and by the C library at exit (a
 * crash loses the buffer's tail). Lines are written under the pool lock, so the order is the
 * order in which the pool served the calls. Tests: tests/test_record.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "pool.h"

#define RECORD_BUFFER (64 * 1024)

struct vpmm_record {
    FILE *f;
    char *buf;              /* the stdio buffer */
    vpmm_stream_key_t *ids; /* ids[i] is stream number i */
    size_t nids, cap;
};

/* Expands %p and %n of fmt into out (len bytes); -1 if it does not fit or has another %. */
static int expand_path(const char *fmt, unsigned pool_no, char *out, size_t len)
{
    size_t used = 0;
    for (const char *c = fmt; *c; c++) {
        char piece[32];
        const char *add = piece;
        if (*c != '%') {
            piece[0] = *c;
            piece[1] = '\0';
        } else if (c[1] == 'p') {
            snprintf(piece, sizeof piece, "%ld", (long)getpid());
            c++;
        } else if (c[1] == 'n') {
            snprintf(piece, sizeof piece, "%u", pool_no);
            c++;
        } else if (c[1] == '%') {
            add = "%";
            c++;
        } else {
            return -1;
        }
        if (used + strlen(add) >= len)
            return -1;
        memcpy(out + used, add, strlen(add));
        used += strlen(add);
    }
    out[used] = '\0';
    return 0;
}

vpmm_status_t vpmm_i_record_open(vpmm_pool_t *p)
{
    static atomic_uint pools = 0;
    const vpmm_options_t *o = &p->opt;
    const char *knob = o->trace_file_src == VPMM_FROM_ENV ? "VPMM_TRACE_FILE" : "config.trace_file";
    const vpmm_status_t bad =
        o->trace_file_src == VPMM_FROM_ENV ? VPMM_ERROR_INVALID_ENV : VPMM_ERROR_INVALID_CONFIG;
    vpmm_record_t *r;
    char path[4096];

    if (o->trace_file == NULL)
        return VPMM_SUCCESS;
    if (expand_path(o->trace_file, atomic_fetch_add(&pools, 1), path, sizeof path) != 0) {
        vpmm_i_set_error("%s='%s': too long, or a %% other than %%p, %%n or %%%%", knob,
                         o->trace_file);
        return bad;
    }
    r = calloc(1, sizeof *r);
    if (r == NULL || (r->buf = malloc(RECORD_BUFFER)) == NULL) {
        free(r);
        vpmm_i_set_error("out of host memory for the trace recorder");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    r->f = fopen(path, "w");
    if (r->f == NULL) {
        vpmm_i_set_error("%s='%s': cannot open %s for writing: %s", knob, o->trace_file, path,
                         strerror(errno));
        free(r->buf);
        free(r);
        return bad;
    }
    setvbuf(r->f, r->buf, _IOFBF, RECORD_BUFFER);
    fprintf(r->f,
            "# vpmm trace (docs/TRACE_FORMAT.md): process %ld, pool on the %s backend, page "
            "%zu bytes\n# op addr size stream  (a=alloc f=free_requested)\n",
            (long)getpid(), p->drv->name, p->page_size);
    p->record = r;
    return VPMM_SUCCESS;
}

/* The number of stream key k in this trace (new keys get the next one; the legacy stream 0). */
static unsigned long stream_no(vpmm_record_t *r, vpmm_stream_key_t k)
{
    for (size_t i = 0; i < r->nids; i++)
        if (vpmm_i_stream_key_equal(r->ids[i], k))
            return (unsigned long)i;
    if (VPMM_GROW(r->ids, r->cap, r->nids + 1, 8) != 0)
        return (unsigned long)-1; /* the line still identifies the block; stream unknown */
    if (r->nids == 0 && k.handle != NULL) {
        /* Number 0 belongs to the legacy stream, whether or not it comes first. */
        r->ids[r->nids++] = (vpmm_stream_key_t){ NULL, 0 };
        return stream_no(r, k);
    }
    r->ids[r->nids] = k;
    return (unsigned long)r->nids++;
}

void vpmm_i_record_op(vpmm_pool_t *p, char op, uintptr_t addr, size_t size, vpmm_stream_key_t k)
{
    vpmm_record_t *r = p->record;
    fprintf(r->f, "%c %" PRIxPTR " %zu %lu\n", op, addr, size, stream_no(r, k));
}

void vpmm_i_record_close(vpmm_pool_t *p)
{
    vpmm_record_t *r = p->record;
    if (r == NULL)
        return;
    fclose(r->f); /* flushes */
    free(r->buf);
    free(r->ids);
    free(r);
    p->record = NULL;
}
