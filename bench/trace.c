/*
 * trace.c — the trace loader of trace.h: parse, validate, resolve addresses to slots.
 *
 * Gzip input is read through zlib when the build found it (VPMM_HAVE_ZLIB), else through
 * `gzip -dc`. A small open-addressing table maps a live block's address to its slot; freed slots
 * are reused last-in first-out so nslots stays the peak number of live blocks.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef VPMM_HAVE_ZLIB
#include <zlib.h>
#endif

#include "trace.h"

typedef struct reader {
#ifdef VPMM_HAVE_ZLIB
    gzFile gz;
#endif
    FILE *f;
    int piped;
} reader_t;

static int reader_open(reader_t *r, const char *path)
{
    memset(r, 0, sizeof *r);
    if (strcmp(path, "-") == 0) {
        r->f = stdin;
        return 0;
    }
#ifdef VPMM_HAVE_ZLIB
    /* zlib reads plain files too. */
    r->gz = gzopen(path, "rb");
    return r->gz ? 0 : -1;
#else
    size_t len = strlen(path);
    if (len > 3 && strcmp(path + len - 3, ".gz") == 0) {
        char cmd[4200];
        if (strchr(path, '\'') != NULL || strlen(path) > 4000)
            return -1;
        snprintf(cmd, sizeof cmd, "gzip -dc '%s'", path);
        r->f = popen(cmd, "r");
        r->piped = 1;
    } else {
        r->f = fopen(path, "r");
    }
    return r->f ? 0 : -1;
#endif
}

static char *reader_line(reader_t *r, char *buf, int len)
{
#ifdef VPMM_HAVE_ZLIB
    if (r->gz)
        return gzgets(r->gz, buf, len);
#endif
    return fgets(buf, len, r->f);
}

static int reader_close(reader_t *r)
{
#ifdef VPMM_HAVE_ZLIB
    if (r->gz)
        return gzclose(r->gz) == Z_OK ? 0 : -1;
#endif
    if (r->piped)
        return pclose(r->f) == 0 ? 0 : -1;
    if (r->f != stdin)
        fclose(r->f);
    return 0;
}

/* Address -> slot of a live block. Key 0 is never a live address in a trace (checked). */
typedef struct live_map {
    uint64_t *keys;
    uint32_t *slots;
    uint64_t *sizes;
    size_t cap, count;
} live_map_t;

static size_t lm_find(const live_map_t *m, uint64_t key)
{
    size_t mask = m->cap - 1, i = (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 20) & mask;
    while (m->keys[i] != 0 && m->keys[i] != key)
        i = (i + 1) & mask;
    return i;
}

static int lm_grow(live_map_t *m)
{
    live_map_t n = { 0 };
    n.cap = m->cap ? m->cap * 2 : 1024;
    n.keys = calloc(n.cap, sizeof *n.keys);
    n.slots = calloc(n.cap, sizeof *n.slots);
    n.sizes = calloc(n.cap, sizeof *n.sizes);
    if (!n.keys || !n.slots || !n.sizes) {
        free(n.keys);
        free(n.slots);
        free(n.sizes);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] != 0) {
            size_t j = lm_find(&n, m->keys[i]);
            n.keys[j] = m->keys[i];
            n.slots[j] = m->slots[i];
            n.sizes[j] = m->sizes[i];
        }
    }
    n.count = m->count;
    free(m->keys);
    free(m->slots);
    free(m->sizes);
    *m = n;
    return 0;
}

/* Removes the entry at index i, shifting later entries of its probe run back (no tombstones). */
static void lm_remove_at(live_map_t *m, size_t i)
{
    size_t mask = m->cap - 1, j = i;
    m->keys[i] = 0;
    for (;;) {
        size_t home;
        j = (j + 1) & mask;
        if (m->keys[j] == 0)
            break;
        home = (size_t)((m->keys[j] * 0x9E3779B97F4A7C15ULL) >> 20) & mask;
        /* Move j back to i if its home is not in (i, j] (cyclically). */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            m->keys[i] = m->keys[j];
            m->slots[i] = m->slots[j];
            m->sizes[i] = m->sizes[j];
            m->keys[j] = 0;
            i = j;
        }
    }
    m->count--;
}

typedef struct loader {
    trace_t *t;
    live_map_t live;
    uint32_t *free_slots;
    size_t nfree, free_cap, ops_cap, streams_cap;
    uint64_t live_bytes;
    const char *name;
    char *err;
    size_t errlen;
} loader_t;

__attribute__((format(printf, 3, 4))) static int fail(loader_t *l, size_t line, const char *fmt,
                                                      ...)
{
    va_list ap;
    int n = snprintf(l->err, l->errlen, "%s:%zu: ", l->name, line);
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < l->errlen)
        vsnprintf(l->err + n, l->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int push_op(loader_t *l, trace_op_t op)
{
    trace_t *t = l->t;
    if (t->nops == l->ops_cap) {
        size_t cap = l->ops_cap ? l->ops_cap * 2 : 65536;
        trace_op_t *ops = realloc(t->ops, cap * sizeof *ops);
        if (ops == NULL)
            return -1;
        t->ops = ops;
        l->ops_cap = cap;
    }
    t->ops[t->nops++] = op;
    return 0;
}

static int stream_index(loader_t *l, uint64_t id, uint32_t *out)
{
    trace_t *t = l->t;
    for (size_t i = 0; i < t->nstreams; i++) {
        if (t->stream_ids[i] == id) {
            *out = (uint32_t)i;
            return 0;
        }
    }
    if (t->nstreams >= 0x7fffffff)
        return -1; /* trace_op_t keeps 31 bits of stream index */
    if (t->nstreams == l->streams_cap) {
        size_t cap = l->streams_cap ? l->streams_cap * 2 : 8;
        uint64_t *ids = realloc(t->stream_ids, cap * sizeof *ids);
        if (ids == NULL)
            return -1;
        t->stream_ids = ids;
        l->streams_cap = cap;
    }
    t->stream_ids[t->nstreams] = id;
    *out = (uint32_t)t->nstreams++;
    return 0;
}

static int take_slot(loader_t *l, uint32_t *out)
{
    if (l->nfree > 0) {
        *out = l->free_slots[--l->nfree];
        return 0;
    }
    if (l->t->nslots >= UINT32_MAX)
        return -1;
    *out = (uint32_t)l->t->nslots++;
    return 0;
}

static int give_slot(loader_t *l, uint32_t slot)
{
    if (l->nfree == l->free_cap) {
        size_t cap = l->free_cap ? l->free_cap * 2 : 1024;
        uint32_t *s = realloc(l->free_slots, cap * sizeof *s);
        if (s == NULL)
            return -1;
        l->free_slots = s;
        l->free_cap = cap;
    }
    l->free_slots[l->nfree++] = slot;
    return 0;
}

/* One event line; returns 0, or -1 with l->err set. */
static int parse_line(loader_t *l, size_t lineno, const char *line)
{
    char kind, extra;
    unsigned long long addr, size, stream;
    trace_op_t op = { 0 };
    size_t i;
    uint32_t sidx;

    if (sscanf(line, " %c %llx %llu %llu %c", &kind, &addr, &size, &stream, &extra) != 4)
        return fail(l, lineno, "expected '<a|f|c> <addr-hex> <size> <stream>', got '%.60s'", line);
    if (kind != 'a' && kind != 'f' && kind != 'c')
        return fail(l, lineno, "unknown event '%c' (expected a, f or c)", kind);
    if (addr == 0)
        return fail(l, lineno, "address 0 is not a block");
    if (kind == 'c') {
        l->t->completions++;
        return 0;
    }
    if (stream_index(l, stream, &sidx) != 0)
        return fail(l, lineno, "too many streams (or out of memory)");
    if ((l->live.count + 1) * 4 > l->live.cap * 3 && lm_grow(&l->live) != 0)
        return fail(l, lineno, "out of memory");
    i = lm_find(&l->live, addr);
    op.stream = sidx;
    if (kind == 'a') {
        if (size == 0)
            return fail(l, lineno, "allocation of 0 bytes");
        if (l->live.keys[i] == addr)
            return fail(l, lineno, "allocation at 0x%llx, which is still allocated", addr);
        if (take_slot(l, &op.slot) != 0)
            return fail(l, lineno, "too many live blocks");
        l->live.keys[i] = addr;
        l->live.slots[i] = op.slot;
        l->live.sizes[i] = size;
        l->live.count++;
        op.kind = TRACE_ALLOC;
        op.size = size;
        l->live_bytes += size;
        if (l->live_bytes > l->t->peak_live)
            l->t->peak_live = l->live_bytes;
        l->t->allocs++;
        l->t->total_alloc_bytes += size;
    } else {
        if (l->live.keys[i] != addr)
            return fail(l, lineno, "free of 0x%llx, which is not allocated", addr);
        if (l->live.sizes[i] != size)
            return fail(l, lineno, "free of 0x%llx with size %llu, allocated with %llu", addr, size,
                        (unsigned long long)l->live.sizes[i]);
        op.kind = TRACE_FREE;
        op.slot = l->live.slots[i];
        op.size = size;
        l->live_bytes -= size;
        if (give_slot(l, op.slot) != 0)
            return fail(l, lineno, "out of memory");
        lm_remove_at(&l->live, i);
        l->t->frees++;
    }
    if (push_op(l, op) != 0)
        return fail(l, lineno, "out of memory");
    return 0;
}

int trace_load(const char *path, trace_t *out, char *err, size_t errlen)
{
    loader_t l = { 0 };
    reader_t r;
    char buf[512];
    size_t lineno = 0;
    int rc = 0;
    const char *slash = strrchr(path, '/');

    memset(out, 0, sizeof *out);
    l.t = out;
    l.name = slash ? slash + 1 : path;
    l.err = err;
    l.errlen = errlen;
    if (reader_open(&r, path) != 0) {
        snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return -1;
    }
    while (rc == 0 && reader_line(&r, buf, sizeof buf) != NULL) {
        size_t n = strlen(buf);
        lineno++;
        if (n == sizeof buf - 1 && buf[n - 1] != '\n') {
            rc = fail(&l, lineno, "line too long");
            break;
        }
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
            buf[--n] = '\0';
        if (n == 0 || buf[strspn(buf, " \t")] == '#' || buf[strspn(buf, " \t")] == '\0')
            continue;
        rc = parse_line(&l, lineno, buf);
    }
    if (reader_close(&r) != 0 && rc == 0) {
        snprintf(err, errlen, "%s: read error (corrupt or truncated compressed data?)", l.name);
        rc = -1;
    }
    if (rc == 0 && out->nops == 0) {
        snprintf(err, errlen, "%s: no allocation events", l.name);
        rc = -1;
    }
    free(l.live.keys);
    free(l.live.slots);
    free(l.live.sizes);
    free(l.free_slots);
    if (rc != 0)
        trace_free(out);
    return rc;
}

void trace_free(trace_t *t)
{
    free(t->ops);
    free(t->stream_ids);
    memset(t, 0, sizeof *t);
}
