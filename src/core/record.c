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
 * several pools of one process (one per device) need "%n" to write separate files. A name ending
 * in ".gz" is written gzip-compressed, through zlib loaded at run time (libz.so.1, as libcuda is:
 * the library has no link-time dependency on it); without zlib such a name is refused at pool
 * creation. Lines go through a 64 KiB buffer, written out when full, at vpmm_pool_destroy, and
 * at the process's exit for pools never destroyed (an atexit handler: a gzip file must be closed
 * to be readable; a crash loses the buffer's tail). Lines are written under the pool lock, so the
 * order is the order in which the pool served the calls.
 *
 * No write error passes silently (a full disk, /dev/full): the first one is printed on stderr
 * with the path, the recording stops there (the file keeps what was written before), and
 * vpmm_pool_destroy returns VPMM_ERROR_IO with the same words in vpmm_last_error() — the pool is
 * destroyed all the same. A failure at the final write or close is reported the same way.
 * Tests: tests/test_record.c.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "pool.h"
#include "record.h"

#define RECORD_BUFFER (64 * 1024)

/* The zlib calls a gzip trace needs (zlib.h's gzopen, gzwrite, gzclose; a gzFile is a pointer). */
typedef struct zlib_api {
    void *(*gzopen)(const char *path, const char *mode);
    int (*gzwrite)(void *file, const void *buf, unsigned len);
    int (*gzclose)(void *file);
} zlib_api_t;

/* The library's name: tests point it elsewhere to see a system without zlib. */
const char *vpmm_i_zlib_name = "libz.so.1";

struct vpmm_record {
    int fd;       /* a plain trace, or -1 */
    void *gz;     /* a gzip trace (zlib's gzFile), or NULL */
    zlib_api_t z; /* for gz */
    void *zlib;   /* its dlopen handle */
    char *buf;    /* lines not yet written */
    size_t used;
    int failed; /* errno of the first failed write (-1: zlib's own error), else 0 */
    char path[4096];
    vpmm_stream_key_t *ids; /* ids[i] is stream number i */
    size_t nids, cap;
    vpmm_record_t *next_open; /* the recorders still open, for the exit handler */
};

/* The recorders not closed yet: closed at exit when their pool was never destroyed. */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static vpmm_record_t *open_list;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

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

/* Writes out the buffer. On the first failure: the error kept, a line on stderr, nothing more
 * written. */
static void write_out(vpmm_record_t *r)
{
    size_t done = 0;
    if (r->failed != 0) {
        r->used = 0;
        return;
    }
    while (done < r->used) {
        ssize_t n;
        if (r->gz != NULL) {
            n = r->z.gzwrite(r->gz, r->buf + done, (unsigned)(r->used - done));
            if (n <= 0) {
                r->failed = errno != 0 ? errno : -1;
                break;
            }
        } else {
            n = write(r->fd, r->buf + done, r->used - done);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                r->failed = n < 0 ? errno : EIO;
                break;
            }
        }
        done += (size_t)n;
    }
    r->used = 0;
    if (r->failed != 0)
        fprintf(stderr, "vpmm: writing the trace file %s failed: %s; the trace stops here\n",
                r->path, r->failed > 0 ? strerror(r->failed) : "zlib could not write");
}

/* Writes out, closes and frees r; 0, or the errno of its first failure (-1: zlib's). */
static int finish(vpmm_record_t *r)
{
    int failed;
    write_out(r);
    errno = 0;
    if (r->gz != NULL) {
        if (r->z.gzclose(r->gz) != 0 && r->failed == 0)
            r->failed = errno != 0 ? errno : -1;
    } else if (close(r->fd) != 0 && r->failed == 0) {
        r->failed = errno;
    }
    if (r->zlib != NULL)
        dlclose(r->zlib);
    failed = r->failed;
    free(r->buf);
    free(r->ids);
    free(r);
    return failed;
}

static void unlist(vpmm_record_t *r)
{
    pthread_mutex_lock(&open_lock);
    for (vpmm_record_t **q = &open_list; *q; q = &(*q)->next_open)
        if (*q == r) {
            *q = r->next_open;
            break;
        }
    pthread_mutex_unlock(&open_lock);
}

/* At exit: the traces of pools never destroyed are written out and closed (a gzip file is only
 * readable once closed). A pool still working in another thread at exit may lose its last
 * lines. */
static void close_at_exit(void)
{
    pthread_mutex_lock(&open_lock);
    while (open_list != NULL) {
        vpmm_record_t *r = open_list;
        char path[sizeof r->path];
        int failed;
        open_list = r->next_open;
        memcpy(path, r->path, sizeof path);
        failed = finish(r);
        if (failed != 0)
            fprintf(stderr, "vpmm: the trace file %s is incomplete: %s\n", path,
                    failed > 0 ? strerror(failed) : "zlib could not write it");
    }
    pthread_mutex_unlock(&open_lock);
}

static void register_exit(void)
{
    (void)atexit(close_at_exit);
}

static int ends_with(const char *s, const char *tail)
{
    const size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

/* Opens r->path: a gzip stream for a ".gz" name (zlib loaded now), else a plain file. 0, or -1
 * after vpmm_i_set_error (naming `knob` and its value `what`). */
static int open_file(vpmm_record_t *r, const char *knob, const char *what)
{
    if (ends_with(r->path, ".gz")) {
        r->zlib = dlopen(vpmm_i_zlib_name, RTLD_NOW | RTLD_LOCAL);
        if (r->zlib == NULL) {
            vpmm_i_set_error("%s='%s': a .gz trace needs zlib: install zlib, or name the file "
                             "without .gz (%s)",
                             knob, what, dlerror());
            return -1;
        }
        *(void **)&r->z.gzopen = dlsym(r->zlib, "gzopen");
        *(void **)&r->z.gzwrite = dlsym(r->zlib, "gzwrite");
        *(void **)&r->z.gzclose = dlsym(r->zlib, "gzclose");
        if (r->z.gzopen == NULL || r->z.gzwrite == NULL || r->z.gzclose == NULL) {
            vpmm_i_set_error("%s='%s': %s lacks gzopen, gzwrite or gzclose", knob, what,
                             vpmm_i_zlib_name);
            dlclose(r->zlib);
            return -1;
        }
        errno = 0;
        r->gz = r->z.gzopen(r->path, "wb6");
        if (r->gz == NULL) {
            vpmm_i_set_error("%s='%s': cannot open %s for writing: %s", knob, what, r->path,
                             errno != 0 ? strerror(errno) : "zlib refused");
            dlclose(r->zlib);
            return -1;
        }
        return 0;
    }
    r->fd = open(r->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (r->fd < 0) {
        vpmm_i_set_error("%s='%s': cannot open %s for writing: %s", knob, what, r->path,
                         strerror(errno));
        return -1;
    }
    return 0;
}

/* Appends one line to the buffer (written out when it could not take another). */
__attribute__((format(printf, 2, 3))) static void put_line(vpmm_record_t *r, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (r->failed != 0)
        return;
    if (RECORD_BUFFER - r->used < 256)
        write_out(r);
    va_start(ap, fmt);
    n = vsnprintf(r->buf + r->used, RECORD_BUFFER - r->used, fmt, ap);
    va_end(ap);
    if (n > 0)
        r->used += VPMM_MIN((size_t)n, RECORD_BUFFER - r->used - 1);
}

vpmm_status_t vpmm_i_record_open(vpmm_pool_t *p)
{
    static atomic_uint pools = 0;
    const vpmm_options_t *o = &p->opt;
    const char *knob = o->trace_file_src == VPMM_FROM_ENV ? "VPMM_TRACE_FILE" : "config.trace_file";
    const vpmm_status_t bad =
        o->trace_file_src == VPMM_FROM_ENV ? VPMM_ERROR_INVALID_ENV : VPMM_ERROR_INVALID_CONFIG;
    vpmm_record_t *r;

    if (o->trace_file == NULL)
        return VPMM_SUCCESS;
    r = calloc(1, sizeof *r);
    if (r == NULL || (r->buf = malloc(RECORD_BUFFER)) == NULL) {
        free(r);
        vpmm_i_set_error("out of host memory for the trace recorder");
        return VPMM_ERROR_HOST_OUT_OF_MEMORY;
    }
    r->fd = -1;
    if (expand_path(o->trace_file, atomic_fetch_add(&pools, 1), r->path, sizeof r->path) != 0) {
        vpmm_i_set_error("%s='%s': too long, or a %% other than %%p, %%n or %%%%", knob,
                         o->trace_file);
        free(r->buf);
        free(r);
        return bad;
    }
    if (open_file(r, knob, o->trace_file) != 0) {
        free(r->buf);
        free(r);
        return bad;
    }
    put_line(r,
             "# vpmm trace (docs/TRACE_FORMAT.md): process %ld, pool on the %s backend, page "
             "%zu bytes\n# op addr size stream  (a=alloc f=free_requested)\n",
             (long)getpid(), p->drv->name, p->page_size);
    (void)pthread_once(&exit_once, register_exit);
    pthread_mutex_lock(&open_lock);
    r->next_open = open_list;
    open_list = r;
    pthread_mutex_unlock(&open_lock);
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
    put_line(r, "%c %" PRIxPTR " %zu %lu\n", op, addr, size, stream_no(r, k));
}

vpmm_status_t vpmm_i_record_close(vpmm_pool_t *p)
{
    vpmm_record_t *r = p->record;
    char path[sizeof r->path];
    int failed;
    if (r == NULL)
        return VPMM_SUCCESS;
    p->record = NULL;
    unlist(r);
    memcpy(path, r->path, sizeof path);
    failed = finish(r);
    if (failed == 0)
        return VPMM_SUCCESS;
    vpmm_i_set_error("the trace file %s is incomplete: %s", path,
                     failed > 0 ? strerror(failed) : "zlib could not write it");
    fprintf(stderr, "vpmm: %s\n", vpmm_i_last_error());
    return VPMM_ERROR_IO;
}
