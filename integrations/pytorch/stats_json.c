/*
 * stats_json.c — vpmm_stats_t as one JSON object (stats_json.h). A bounded writer that keeps
 * counting what does not fit, so the caller learns the size it needs, as with snprintf.
 */
#include "stats_json.h"

#include <stdarg.h>
#include <stdio.h>

typedef struct jbuf {
    char *buf;
    size_t cap;
    size_t len; /* what the whole text needs, without the NUL */
} jbuf_t;

static void jput(jbuf_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void jput(jbuf_t *j, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(j->len < j->cap ? j->buf + j->len : NULL, j->len < j->cap ? j->cap - j->len : 0,
                  fmt, ap);
    va_end(ap);
    if (n > 0)
        j->len += (size_t)n;
}

/* The field names are vpmm_stats_t's, so a new field is one line here. */
size_t vpmm_stats_json(const vpmm_stats_t *s, int device, const char *backend, const char *extra,
                       char *buf, size_t cap)
{
    jbuf_t j = { buf, buf != NULL ? cap : 0, 0 };

    if (j.cap > 0)
        j.buf[0] = '\0';
    jput(&j, "{\"device\":%d,\"backend\":\"%s\"", device, backend != NULL ? backend : "");
#define JZ(f) jput(&j, ",\"" #f "\":%zu", s->f)
#define JU(f) jput(&j, ",\"" #f "\":%llu", (unsigned long long)s->f)
    JZ(live_bytes);
    JZ(allocated_bytes);
    JZ(peak_live_bytes);
    JZ(mapped_bytes);
    JZ(peak_mapped_bytes);
    JZ(free_bytes);
    JZ(hole_bytes);
    JZ(zombie_bytes);
    JZ(reserved_va_bytes);
    JZ(page_size);
    JU(live_allocs);
    JU(mallocs);
    JU(frees);
    JU(defrags);
    JU(pages_remapped);
    JU(pages_created);
    JU(handles_created);
    JU(handles);
    JU(pages_released);
    JU(grows);
    JU(ooms);
    JU(cross_stream_waits);
    JU(va_chunks);
    JU(streams);
    JU(graph_pools);
    JZ(private_mapped_bytes);
    JZ(private_live_bytes);
    JZ(largest_free_bytes);
    jput(&j, ",\"utilization\":%.6f,\"fragmentation\":%.6f", s->utilization, s->fragmentation);
    JZ(max_bytes);
    jput(&j, ",\"worker\":%d", s->worker);
    JU(worker_unmaps);
    JU(worker_cpu_ns);
    JZ(small_bytes);
    JU(class_fallbacks);
    /* Several devices and processes: the pool's own device, the devices given access to it (the
     * mask as vpmm keeps it, and as a list), CUDA IPC. */
    jput(&j, ",\"pool_device\":%d", s->device);
    JU(peers);
    jput(&j, ",\"peer_devices\":[");
    for (int k = 0, first = 1; k < 64; k++)
        if ((s->peers >> k) & 1) {
            jput(&j, first ? "%d" : ",%d", k);
            first = 0;
        }
    jput(&j, "]");
    JU(peer_grants);
    JU(ipc_shared);
    JU(ipc_exports);
    JU(ipc_imports);
    JZ(ipc_imported_bytes);
#undef JZ
#undef JU
    if (extra != NULL && extra[0] != '\0')
        jput(&j, ",%s", extra);
    jput(&j, "}");
    return j.len;
}
