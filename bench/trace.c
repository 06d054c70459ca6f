/*
 * trace.c — the trace loader of trace.h: parse, validate, resolve addresses to slots.
 *
 * Gzip input is read through zlib when the build found it (VPMM_HAVE_ZLIB), else through
 * `gzip -dc`; so is standard input ("-"), gzip or plain. A directory is refused as one. Compressed
 * data that ends early (a copy cut short, a download interrupted) is reported as truncated, also
 * when the cut falls inside a line: the reader's verdict is asked before a line's parse error is
 * reported, since a cut line is no error of the trace's. Fields are parsed by hand, not by scanf,
 * which would take "-512" as 2^64 - 512. A small open-addressing table maps a live block's address
 * to its slot; freed slots are reused last-in first-out so nslots stays the peak number of live
 * blocks.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    int gz_name; /* the name ends in .gz: the content must be gzip data */
} reader_t;

static int ends_with_gz(const char *path)
{
    size_t len = strlen(path);
    return len > 3 && strcmp(path + len - 3, ".gz") == 0;
}

/* Opens path ("-": standard input, gzip or plain). 0, or -1 with errno set (EISDIR for a
 * directory, whose reading would otherwise fail as "corrupt compressed data"). */
static int reader_open(reader_t *r, const char *path)
{
    struct stat st;
    memset(r, 0, sizeof *r);
    if (strcmp(path, "-") == 0) {
#ifdef VPMM_HAVE_ZLIB
        /* zlib tells gzip data from plain text by its first bytes, on a pipe too. */
        int fd = dup(STDIN_FILENO);
        if (fd < 0 || (r->gz = gzdopen(fd, "rb")) == NULL) {
            if (fd >= 0)
                close(fd);
            return -1;
        }
        return 0;
#else
        /* gzip -dcf passes plain data through and decompresses gzip data. */
        r->f = popen("gzip -dcf", "r");
        r->piped = 1;
        return r->f ? 0 : -1;
#endif
    }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        return -1;
    }
    r->gz_name = ends_with_gz(path);
#ifdef VPMM_HAVE_ZLIB
    /* zlib reads plain files too. */
    r->gz = gzopen(path, "rb");
    return r->gz ? 0 : -1;
#else
    if (r->gz_name) {
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

/*
 * Whether the data was as written: 0, or -1 with the reason in why (the compressed data ends
 * early, is corrupt, or a .gz file holds no gzip data). Compressed data is first read to its end
 * (after a parse error, the rest of it), since zlib and `gzip -dc` (by its exit status) can only
 * tell once they got there; a pipe is closed here. Nothing may be read after this.
 */
static int reader_verdict(reader_t *r, char *why, size_t len)
{
#ifdef VPMM_HAVE_ZLIB
    if (r->gz) {
        char drain[4096];
        int errnum = Z_OK;
        const char *msg, *colon;
        /* After a parse error: the rest too (a corrupt stream may decompress to garbage lines
         * before zlib finds out). */
        while (!gzdirect(r->gz) && gzread(r->gz, drain, sizeof drain) > 0)
            ;
        msg = gzerror(r->gz, &errnum);
        colon = strrchr(msg, ':');
        if (colon != NULL && colon[1] == ' ')
            msg = colon + 2; /* zlib's message starts with the path */
        if (errnum == Z_BUF_ERROR)
            snprintf(why, len, "truncated: the compressed data ends early (%s)", msg);
        else if (errnum != Z_OK)
            snprintf(why, len, "corrupt compressed data (%s)",
                     errnum == Z_ERRNO ? strerror(errno) : msg);
        else if (r->gz_name && gzdirect(r->gz))
            snprintf(why, len, "not gzip data, though the name ends in .gz");
        else
            return 0;
        return -1;
    }
#endif
    if (r->piped) {
        char drain[4096];
        int status;
        while (fread(drain, 1, sizeof drain, r->f) > 0)
            ;
        status = pclose(r->f);
        r->f = NULL;
        r->piped = 0;
        if (status != 0) {
            snprintf(why, len,
                     "truncated or corrupt compressed data (gzip -dc failed: see its message "
                     "above)");
            return -1;
        }
        return 0;
    }
    if (r->f != NULL && ferror(r->f)) {
        snprintf(why, len, "read error (%s)", strerror(errno));
        return -1;
    }
    return 0;
}

static int reader_close(reader_t *r)
{
#ifdef VPMM_HAVE_ZLIB
    if (r->gz)
        return gzclose(r->gz) == Z_OK ? 0 : -1;
#endif
    if (r->piped)
        return pclose(r->f) == 0 ? 0 : -1;
    if (r->f != NULL && r->f != stdin)
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

/* The next blank-separated field of *p: its start (NULL at the end of the line), its length. */
static const char *next_field(const char **p, size_t *len)
{
    const char *s = *p + strspn(*p, " \t");
    *len = strcspn(s, " \t");
    *p = s + *len;
    return *len ? s : NULL;
}

/* How much of a bad field a message shows. */
static int shown(size_t len)
{
    return len < 30 ? (int)len : 30;
}

enum { FIELD_OK = 0, FIELD_MALFORMED = -1, FIELD_NEGATIVE = -2, FIELD_TOO_LARGE = -3 };

/* A field as an unsigned number: decimal, or hex (base 16, "0x" allowed). */
static int field_u64(const char *s, size_t len, int base, unsigned long long *out)
{
    char buf[40], *end;
    if (len >= sizeof buf)
        return FIELD_MALFORMED;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (buf[0] == '-')
        return FIELD_NEGATIVE;
    if (base == 16 ? !isxdigit((unsigned char)buf[0]) : !isdigit((unsigned char)buf[0]))
        return FIELD_MALFORMED;
    errno = 0;
    *out = strtoull(buf, &end, base);
    if (*end != '\0')
        return FIELD_MALFORMED;
    return errno == ERANGE ? FIELD_TOO_LARGE : FIELD_OK;
}

/* One event line; returns 0, or -1 with l->err set. */
static int parse_line(loader_t *l, size_t lineno, const char *line)
{
    const char *p = line, *f[5];
    size_t n[5];
    char kind;
    unsigned long long addr = 0, size = 0, stream = 0;
    trace_op_t op = { 0 };
    size_t i;
    uint32_t sidx;
    int rs, rt;

    for (i = 0; i < 5; i++)
        f[i] = next_field(&p, &n[i]);
    if (f[3] == NULL || f[4] != NULL || n[0] != 1 || field_u64(f[1], n[1], 16, &addr) != FIELD_OK)
        return fail(l, lineno, "expected '<a|f|c> <addr-hex> <size> <stream>', got '%.60s'", line);
    rs = field_u64(f[2], n[2], 10, &size);
    rt = field_u64(f[3], n[3], 10, &stream);
    if (rs == FIELD_NEGATIVE)
        return fail(l, lineno, "negative size %.*s (a size is a number of bytes, at least 1)",
                    shown(n[2]), f[2]);
    if (rt == FIELD_NEGATIVE)
        return fail(l, lineno, "negative stream %.*s (streams are numbered from 0)", shown(n[3]),
                    f[3]);
    if (rs == FIELD_TOO_LARGE || rt == FIELD_TOO_LARGE)
        return fail(
            l, lineno, "%s %.*s does not fit in 64 bits", rs == FIELD_TOO_LARGE ? "size" : "stream",
            shown(rs == FIELD_TOO_LARGE ? n[2] : n[3]), rs == FIELD_TOO_LARGE ? f[2] : f[3]);
    if (rs != FIELD_OK || rt != FIELD_OK)
        return fail(l, lineno, "expected '<a|f|c> <addr-hex> <size> <stream>', got '%.60s'", line);
    kind = f[0][0];
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
    char buf[512], why[200];
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
    /* Asked after a parse error too: when the data was cut short, its last line may be cut as
     * well, and whatever it said is no error of the trace's. */
    if (reader_verdict(&r, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: %s; %zu lines read", l.name, why, lineno);
        rc = -1;
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
