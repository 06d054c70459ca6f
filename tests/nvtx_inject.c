/*
 * nvtx_inject.c — libnvtx_inject.so, a recording NVTX v3 tool for tests (API in nvtx_inject.h).
 *
 * NVTX finds a tool through NVTX_INJECTION64_PATH and attaches it twice over, lazily:
 *   - the core API (nvtxDetail/nvtxInit.h): on the first core call of an NVTX instance, NVTX
 *     dlopens the path and calls InitializeInjectionNvtx2(getExportTable); we ask the export table
 *     for each module's function table (CORE, CORE2) and overwrite the slots we record. Slots left
 *     alone become no-ops (start/end ranges, categories, W variants, resources, sync, CUDA).
 *   - each extension module (nvtxDetail/nvtxExtInit.h), here the memory API (module 1): on the
 *     module's first call NVTX dlopens the path again and calls
 *     InitializeInjectionNvtxExtension(moduleInfo); we write our functions into the module's slot
 *     array, indexed by NVTX3EXT_CBID_* (nvToolsExtMem.h); permissions are left alone.
 * An "instance" is every executable or shared object that compiles the NVTX headers (their state
 * is hidden and weak), so both entry points may run several times; each call only fills that
 * instance's tables.
 *
 * Every recorded call appends events to an ordered log (batches: one event per element). The
 * memory calls are also applied to a model of live heaps and regions, and every broken rule (see
 * check_region and the callers of fail) counts as an error with a message, so a test can assert
 * the exact traffic and the absence of misuse. One mutex guards the log and the model; range
 * nesting is per thread and per domain, as NVTX defines it, so it lives in thread-local storage.
 * Domain and string handles point to records that live until the library is unloaded;
 * nvtx_inject_clear() empties only the log and the error count.
 */
#define NVTX_NO_IMPL /* a tool: NVTX's types and declarations, none of its state */
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "nvtx_inject.h"

/* The two symbols NVTX looks up with dlsym. */
NVTX_INJECT_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table);
NVTX_INJECT_EXPORT int InitializeInjectionNvtxExtension(nvtxExtModuleInfo_t *info);

#define MAX_DOMAINS  32
#define CHUNK_EVENTS 256 /* the log grows by chunks so that event pointers stay put */
#define MAX_CHUNKS   4096
/* Handles for heaps without an address of their own (other than virtual-address heaps):
 * never dereferenced; distinct from 0 (process-wide) and -1 (no tool). */
#define FAKE_HANDLE_BASE UINT64_C(0x7f0000000000)

typedef struct domain_rec {
    unsigned index; /* 1.., the slot in depth[]; 0 is the default domain */
    char name[NVTX_INJECT_NAME_MAX];
} domain_rec_t;

typedef struct string_rec {
    unsigned domain; /* domain index */
    char text[NVTX_INJECT_TEXT_MAX];
} string_rec_t;

typedef struct heap_rec {
    uint64_t handle, base, size; /* base/size only for NVTX_MEM_TYPE_VIRTUAL_ADDRESS */
    uint32_t usage, type;
} heap_rec_t;

typedef struct region_rec {
    uint64_t heap, addr, size;
} region_rec_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static domain_rec_t *domains[MAX_DOMAINS];
static unsigned ndomains;
static string_rec_t **strings;
static size_t nstrings, cap_strings;
static heap_rec_t *heaps;
static size_t nheaps, cap_heaps;
static region_rec_t *regions;
static size_t nregions, cap_regions;
static nvtx_inject_event_t *chunks[MAX_CHUNKS];
static size_t nevents;
static size_t nerrors;
static char last_error[256];
static unsigned core_attached, mem_attached;
static uint64_t next_fake = 1;

/* Open ranges per domain on this thread; [0] is the default domain. */
static _Thread_local int depth[MAX_DOMAINS + 1];

static const char *const kind_names[] = {
    [NVTX_INJECT_DOMAIN_CREATE] = "domain_create",
    [NVTX_INJECT_DOMAIN_DESTROY] = "domain_destroy",
    [NVTX_INJECT_STRING_REGISTER] = "string_register",
    [NVTX_INJECT_MARK] = "mark",
    [NVTX_INJECT_RANGE_PUSH] = "range_push",
    [NVTX_INJECT_RANGE_POP] = "range_pop",
    [NVTX_INJECT_HEAP_REGISTER] = "heap_register",
    [NVTX_INJECT_HEAP_UNREGISTER] = "heap_unregister",
    [NVTX_INJECT_HEAP_RESET] = "heap_reset",
    [NVTX_INJECT_REGION_REGISTER] = "region_register",
    [NVTX_INJECT_REGION_RESIZE] = "region_resize",
    [NVTX_INJECT_REGION_UNREGISTER] = "region_unregister",
    [NVTX_INJECT_REGION_NAME] = "region_name",
};

const char *nvtx_inject_kind_name(nvtx_inject_kind_t kind)
{
    if ((size_t)kind < sizeof kind_names / sizeof kind_names[0] && kind_names[kind])
        return kind_names[kind];
    return "?";
}

/* ---- helpers; all run with mu held ---------------------------------------------------------- */

static void fail(nvtx_inject_event_t *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fail(nvtx_inject_event_t *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    nerrors++;
    if (e)
        e->flags |= NVTX_INJECT_F_ERROR;
    fprintf(stderr, "nvtx_inject: %s\n", last_error);
}

static void copy_text(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Wide strings are kept as ASCII; anything else becomes '?'. */
static void copy_wide(char *dst, size_t size, const wchar_t *src)
{
    size_t i = 0;
    for (; src[i] != 0 && i + 1 < size; i++)
        dst[i] = src[i] > 0 && src[i] < 128 ? (char)src[i] : '?';
    dst[i] = '\0';
}

/* Returns the grown array, or NULL (arr untouched) when memory runs out. */
static void *grow(void *arr, size_t *cap, size_t need, size_t elem)
{
    size_t n = *cap ? *cap : 16;
    void *p;
    if (need <= *cap)
        return arr;
    while (n < need)
        n *= 2;
    p = realloc(arr, n * elem);
    if (p)
        *cap = n;
    return p;
}

static uint64_t fake_handle(void)
{
    return FAKE_HANDLE_BASE + 16 * next_fake++;
}

/* Appends a zeroed event; past the log's capacity it is written to a scratch slot and lost. */
static nvtx_inject_event_t *new_event(nvtx_inject_kind_t kind)
{
    static nvtx_inject_event_t scratch;
    size_t c = nevents / CHUNK_EVENTS;
    nvtx_inject_event_t *e = &scratch;
    if (c < MAX_CHUNKS && !chunks[c])
        chunks[c] = malloc(CHUNK_EVENTS * sizeof(nvtx_inject_event_t));
    if (c < MAX_CHUNKS && chunks[c])
        e = &chunks[c][nevents++ % CHUNK_EVENTS];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    if (e == &scratch)
        fail(NULL, "event log full or out of memory: %s dropped", nvtx_inject_kind_name(kind));
    return e;
}

static void free_log(void)
{
    for (size_t c = 0; c < MAX_CHUNKS && chunks[c]; c++) {
        free(chunks[c]);
        chunks[c] = NULL;
    }
    nevents = 0;
}

static domain_rec_t *find_domain(nvtxDomainHandle_t handle)
{
    for (unsigned i = 0; i < ndomains; i++)
        if ((void *)domains[i] == (void *)handle)
            return domains[i];
    return NULL;
}

/* Starts an event in the domain the application named; *dom gets its index (0: default). */
static nvtx_inject_event_t *begin(nvtx_inject_kind_t kind, nvtxDomainHandle_t handle, unsigned *dom)
{
    nvtx_inject_event_t *e = new_event(kind);
    domain_rec_t *d = handle ? find_domain(handle) : NULL;
    if (d)
        copy_text(e->domain, sizeof e->domain, d->name);
    if (handle && !d) {
        copy_text(e->domain, sizeof e->domain, "?");
        fail(e, "%s: unknown domain handle %p", nvtx_inject_kind_name(kind), (void *)handle);
    }
    if (dom)
        *dom = d ? d->index : 0;
    return e;
}

static void set_message(nvtx_inject_event_t *e, unsigned dom, int32_t type, nvtxMessageValue_t m)
{
    const string_rec_t *s = NULL;
    e->message_type = type;
    switch (type) {
    case NVTX_MESSAGE_UNKNOWN:
        return;
    case NVTX_MESSAGE_TYPE_ASCII:
        if (m.ascii)
            copy_text(e->text, sizeof e->text, m.ascii);
        else
            fail(e, "%s: NULL ASCII message", nvtx_inject_kind_name(e->kind));
        return;
    case NVTX_MESSAGE_TYPE_UNICODE:
        if (m.unicode)
            copy_wide(e->text, sizeof e->text, m.unicode);
        else
            fail(e, "%s: NULL Unicode message", nvtx_inject_kind_name(e->kind));
        return;
    case NVTX_MESSAGE_TYPE_REGISTERED:
        for (size_t i = 0; i < nstrings; i++)
            if ((void *)strings[i] == (void *)m.registered)
                s = strings[i];
        if (!s) {
            fail(e, "%s: unknown registered string %p", nvtx_inject_kind_name(e->kind),
                 (void *)m.registered);
            return;
        }
        copy_text(e->text, sizeof e->text, s->text);
        if (s->domain != dom)
            fail(e, "%s: string \"%s\" was registered in another domain",
                 nvtx_inject_kind_name(e->kind), s->text);
        return;
    default:
        fail(e, "%s: message type %d", nvtx_inject_kind_name(e->kind), (int)type);
    }
}

static void set_attributes(nvtx_inject_event_t *e, unsigned dom, const nvtxEventAttributes_t *a)
{
    const char *what = nvtx_inject_kind_name(e->kind);
    if (!a) {
        fail(e, "%s: NULL event attributes", what);
        return;
    }
    if (a->version != NVTX_VERSION || a->size != NVTX_EVENT_ATTRIB_STRUCT_SIZE)
        fail(e, "%s: attributes version %u size %u (want %u, %u)", what, (unsigned)a->version,
             (unsigned)a->size, (unsigned)NVTX_VERSION, (unsigned)NVTX_EVENT_ATTRIB_STRUCT_SIZE);
    e->category = a->category;
    e->color = a->color;
    e->payload_type = a->payloadType;
    if (a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64 ||
        a->payloadType == NVTX_PAYLOAD_TYPE_INT64 || a->payloadType == NVTX_PAYLOAD_TYPE_DOUBLE)
        memcpy(&e->payload, &a->payload, 8);
    else if (a->payloadType == NVTX_PAYLOAD_TYPE_INT32)
        e->payload = (uint64_t)(int64_t)a->payload.iValue;
    else if (a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT32 ||
             a->payloadType == NVTX_PAYLOAD_TYPE_FLOAT)
        e->payload = a->payload.uiValue; /* a float's bits */
    else if (a->payloadType != NVTX_PAYLOAD_UNKNOWN)
        fail(e, "%s: payload type %d", what, (int)a->payloadType);
    set_message(e, dom, a->messageType, a->message);
}

/* The A entry points carry a bare string: treat it as attributes with an ASCII message. */
static nvtxEventAttributes_t ascii_attributes(const char *message)
{
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = message;
    return a;
}

/* ---- core and core2 recorders ---------------------------------------------------------------- */

/* A mark, or a push (which opens a level on this thread). */
static int mark_or_push(nvtx_inject_kind_t kind, nvtxDomainHandle_t domain,
                        const nvtxEventAttributes_t *a)
{
    unsigned dom;
    nvtx_inject_event_t *e;
    int level;
    pthread_mutex_lock(&mu);
    e = begin(kind, domain, &dom);
    set_attributes(e, dom, a);
    level = e->level = kind == NVTX_INJECT_RANGE_PUSH ? depth[dom]++ : 0;
    pthread_mutex_unlock(&mu);
    return level;
}

static int pop(nvtxDomainHandle_t domain)
{
    unsigned dom;
    nvtx_inject_event_t *e;
    int level;
    pthread_mutex_lock(&mu);
    e = begin(NVTX_INJECT_RANGE_POP, domain, &dom);
    if (depth[dom] == 0) {
        e->level = -1;
        fail(e, "range_pop: no open range in domain \"%s\" on this thread", e->domain);
    } else {
        e->level = --depth[dom];
    }
    level = e->level;
    pthread_mutex_unlock(&mu);
    return level;
}

static void NVTX_API rec_mark_ex(const nvtxEventAttributes_t *a)
{
    mark_or_push(NVTX_INJECT_MARK, NULL, a);
}

static void NVTX_API rec_mark_a(const char *message)
{
    nvtxEventAttributes_t a = ascii_attributes(message);
    mark_or_push(NVTX_INJECT_MARK, NULL, &a);
}

static int NVTX_API rec_range_push_ex(const nvtxEventAttributes_t *a)
{
    return mark_or_push(NVTX_INJECT_RANGE_PUSH, NULL, a);
}

static int NVTX_API rec_range_push_a(const char *message)
{
    nvtxEventAttributes_t a = ascii_attributes(message);
    return mark_or_push(NVTX_INJECT_RANGE_PUSH, NULL, &a);
}

static int NVTX_API rec_range_pop(void)
{
    return pop(NULL);
}

static void NVTX_API rec_domain_mark_ex(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *a)
{
    mark_or_push(NVTX_INJECT_MARK, domain, a);
}

static int NVTX_API rec_domain_range_push_ex(nvtxDomainHandle_t domain,
                                             const nvtxEventAttributes_t *a)
{
    return mark_or_push(NVTX_INJECT_RANGE_PUSH, domain, a);
}

static int NVTX_API rec_domain_range_pop(nvtxDomainHandle_t domain)
{
    return pop(domain);
}

/* A second creation under the same name returns the same handle, as tools do. */
static nvtxDomainHandle_t NVTX_API rec_domain_create_a(const char *name)
{
    nvtx_inject_event_t *e;
    domain_rec_t *d = NULL;
    pthread_mutex_lock(&mu);
    e = new_event(NVTX_INJECT_DOMAIN_CREATE);
    if (!name) {
        fail(e, "domain_create: NULL name");
        goto out;
    }
    copy_text(e->domain, sizeof e->domain, name);
    copy_text(e->text, sizeof e->text, name);
    for (unsigned i = 0; i < ndomains && !d; i++)
        if (strcmp(domains[i]->name, e->domain) == 0)
            d = domains[i];
    if (!d && ndomains < MAX_DOMAINS && (d = calloc(1, sizeof *d))) {
        d->index = ndomains + 1;
        copy_text(d->name, sizeof d->name, name);
        domains[ndomains++] = d;
    }
    if (!d)
        fail(e, "domain_create: more than %d domains or out of memory", MAX_DOMAINS);
    e->handle = (uintptr_t)d;
out:
    pthread_mutex_unlock(&mu);
    return (nvtxDomainHandle_t)d;
}

static void NVTX_API rec_domain_destroy(nvtxDomainHandle_t domain)
{
    pthread_mutex_lock(&mu);
    begin(NVTX_INJECT_DOMAIN_DESTROY, domain, NULL)->handle = (uintptr_t)domain;
    pthread_mutex_unlock(&mu);
}

/* Registering the same string twice in a domain returns the same handle. */
static nvtxStringHandle_t NVTX_API rec_domain_register_string_a(nvtxDomainHandle_t domain,
                                                                const char *string)
{
    unsigned dom;
    nvtx_inject_event_t *e;
    string_rec_t *s = NULL;
    void *p;
    pthread_mutex_lock(&mu);
    e = begin(NVTX_INJECT_STRING_REGISTER, domain, &dom);
    if (!string) {
        fail(e, "string_register: NULL string");
        goto out;
    }
    copy_text(e->text, sizeof e->text, string);
    for (size_t i = 0; i < nstrings && !s; i++)
        if (strings[i]->domain == dom && strcmp(strings[i]->text, e->text) == 0)
            s = strings[i];
    if (!s && (p = grow(strings, &cap_strings, nstrings + 1, sizeof *strings)) &&
        (s = calloc(1, sizeof *s))) {
        strings = p;
        s->domain = dom;
        copy_text(s->text, sizeof s->text, string);
        strings[nstrings++] = s;
    }
    if (!s)
        fail(e, "string_register: out of memory");
    e->handle = (uintptr_t)s;
out:
    pthread_mutex_unlock(&mu);
    return (nvtxStringHandle_t)s;
}

/* ---- memory-extension recorders -------------------------------------------------------------- */

static heap_rec_t *find_heap(uint64_t handle)
{
    for (size_t i = 0; i < nheaps; i++)
        if (heaps[i].handle == handle)
            return &heaps[i];
    return NULL;
}

static size_t find_region(uint64_t addr)
{
    for (size_t i = 0; i < nregions; i++)
        if (regions[i].addr == addr)
            return i;
    return SIZE_MAX;
}

static bool overlaps(uint64_t a, uint64_t a_size, uint64_t b, uint64_t b_size)
{
    return a < b + b_size && b < a + a_size;
}

static size_t drop_regions(uint64_t heap)
{
    size_t dropped = 0;
    for (size_t i = 0; i < nregions;) {
        if (regions[i].heap == heap) {
            regions[i] = regions[--nregions];
            dropped++;
        } else {
            i++;
        }
    }
    return dropped;
}

/* A region is non-empty, inside its heap (virtual-address heaps), and overlaps no live region
 * other than itself (self: its index when resized, else SIZE_MAX). */
static bool check_region(nvtx_inject_event_t *e, uint64_t heap, uint64_t addr, uint64_t size,
                         size_t self)
{
    const char *what = nvtx_inject_kind_name(e->kind);
    const heap_rec_t *h = heap ? find_heap(heap) : NULL;
    if (size == 0 || addr + size < addr) {
        fail(e, "%s: bad range [%#llx, +%llu)", what, (unsigned long long)addr,
             (unsigned long long)size);
        return false;
    }
    if (h && h->type == NVTX_MEM_TYPE_VIRTUAL_ADDRESS &&
        (addr < h->base || addr + size > h->base + h->size)) {
        fail(e, "%s: [%#llx, +%llu) outside heap [%#llx, +%llu)", what, (unsigned long long)addr,
             (unsigned long long)size, (unsigned long long)h->base, (unsigned long long)h->size);
        return false;
    }
    for (size_t i = 0; i < nregions; i++) {
        if (i != self && overlaps(addr, size, regions[i].addr, regions[i].size)) {
            fail(e, "%s: [%#llx, +%llu) overlaps live region [%#llx, +%llu)", what,
                 (unsigned long long)addr, (unsigned long long)size,
                 (unsigned long long)regions[i].addr, (unsigned long long)regions[i].size);
            return false;
        }
    }
    return true;
}

/* Every batch starts with extCompatID and structSize. */
static bool check_header(nvtx_inject_event_t *e, const void *desc, uint16_t compat, uint16_t size,
                         size_t want)
{
    if (!desc) {
        fail(e, "%s: NULL descriptor", nvtx_inject_kind_name(e->kind));
        return false;
    }
    if (compat != NVTX_EXT_COMPATID_MEM || size < want) {
        fail(e, "%s: descriptor compat %#x size %u (want %#x, >= %zu)",
             nvtx_inject_kind_name(e->kind), (unsigned)compat, (unsigned)size,
             (unsigned)NVTX_EXT_COMPATID_MEM, want);
        return false;
    }
    return true;
}

/* A NULL, malformed or empty batch, or one whose elements are too small, is recorded as one
 * event with the error; returns true then. */
static bool bad_batch(nvtx_inject_kind_t kind, nvtxDomainHandle_t domain, const void *b,
                      uint16_t compat, uint16_t size, size_t want, size_t count,
                      const void *elements, size_t element_size, size_t min_element)
{
    nvtx_inject_event_t *e;
    if (b && compat == NVTX_EXT_COMPATID_MEM && size >= want && count && elements &&
        element_size >= min_element)
        return false;
    e = begin(kind, domain, NULL);
    if (check_header(e, b, compat, size, want))
        fail(e, "%s: %zu elements at %p of size %zu (want >= %zu)", nvtx_inject_kind_name(kind),
             count, elements, element_size, min_element);
    return true;
}
#define BAD_BATCH(kind, b, count, elements, element_size, min_element)                             \
    bad_batch(kind, domain, b, b ? b->extCompatID : 0, b ? b->structSize : 0, sizeof *b,           \
              b ? b->count : 0, b ? (const void *)b->elements : NULL, b ? b->element_size : 0,     \
              min_element)

/* The element of a batch, element_size bytes apart. */
#define ELEMENT(b, elements, element_size, i)                                                      \
    ((const void *)((const char *)(b)->elements + (i) * (b)->element_size))

/* The handle of a virtual-address heap is its base address (nvToolsExtMem.h says so); other
 * heaps get a made-up one. A malformed descriptor registers nothing and returns NULL. */
static nvtxMemHeapHandle_t NVTX_API rec_heap_register(nvtxDomainHandle_t domain,
                                                      nvtxMemHeapDesc_t const *desc)
{
    unsigned dom;
    nvtx_inject_event_t *e;
    heap_rec_t h = { 0 };
    void *p;
    pthread_mutex_lock(&mu);
    e = begin(NVTX_INJECT_HEAP_REGISTER, domain, &dom);
    if (!check_header(e, desc, desc ? desc->extCompatID : 0, desc ? desc->structSize : 0,
                      sizeof *desc))
        goto out;
    e->usage = h.usage = desc->usage;
    e->mem_type = h.type = desc->type;
    e->category = desc->category;
    set_message(e, dom, (int32_t)desc->messageType, desc->message);
    if (h.usage != NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR &&
        h.usage != NVTX_MEM_HEAP_USAGE_TYPE_LAYOUT)
        fail(e, "heap_register: usage %u", (unsigned)h.usage);
    if (h.type == NVTX_MEM_TYPE_VIRTUAL_ADDRESS) {
        const nvtxMemVirtualRangeDesc_t *r = desc->typeSpecificDesc;
        if (!r || desc->typeSpecificDescSize < sizeof *r) {
            fail(e, "heap_register: no virtual range (size %zu)", desc->typeSpecificDescSize);
            goto out;
        }
        e->address = h.base = (uintptr_t)r->ptr;
        e->size = h.size = r->size;
        if (h.base == 0 || h.size == 0 || h.base + h.size < h.base)
            fail(e, "heap_register: bad range [%#llx, +%llu)", (unsigned long long)h.base,
                 (unsigned long long)h.size);
        for (size_t i = 0; i < nheaps; i++)
            if (heaps[i].type == NVTX_MEM_TYPE_VIRTUAL_ADDRESS &&
                overlaps(h.base, h.size, heaps[i].base, heaps[i].size))
                fail(e, "heap_register: [%#llx, +%llu) overlaps heap %#llx",
                     (unsigned long long)h.base, (unsigned long long)h.size,
                     (unsigned long long)heaps[i].handle);
    }
    h.handle = h.base && !find_heap(h.base) ? h.base : fake_handle();
    if (!(p = grow(heaps, &cap_heaps, nheaps + 1, sizeof *heaps))) {
        fail(e, "heap_register: out of memory");
        goto out;
    }
    heaps = p;
    heaps[nheaps++] = h;
    e->heap = e->handle = h.handle;
out:
    pthread_mutex_unlock(&mu);
    return (nvtxMemHeapHandle_t)(uintptr_t)e->handle;
}

static void heap_drop(nvtx_inject_kind_t kind, nvtxDomainHandle_t domain, nvtxMemHeapHandle_t heap)
{
    nvtx_inject_event_t *e;
    heap_rec_t *h;
    pthread_mutex_lock(&mu);
    e = begin(kind, domain, NULL);
    e->heap = (uintptr_t)heap;
    h = find_heap(e->heap);
    if (heap == NVTX_MEM_HEAP_HANDLE_PROCESS_WIDE && kind == NVTX_INJECT_HEAP_RESET) {
        e->count = (uint32_t)drop_regions(0);
    } else if (!h) {
        fail(e, "%s: unknown heap %#llx", nvtx_inject_kind_name(kind), (unsigned long long)e->heap);
    } else {
        e->count = (uint32_t)drop_regions(e->heap);
        if (kind == NVTX_INJECT_HEAP_UNREGISTER)
            *h = heaps[--nheaps];
    }
    pthread_mutex_unlock(&mu);
}

static void NVTX_API rec_heap_unregister(nvtxDomainHandle_t domain, nvtxMemHeapHandle_t heap)
{
    heap_drop(NVTX_INJECT_HEAP_UNREGISTER, domain, heap);
}

static void NVTX_API rec_heap_reset(nvtxDomainHandle_t domain, nvtxMemHeapHandle_t heap)
{
    heap_drop(NVTX_INJECT_HEAP_RESET, domain, heap);
}

/* Region handles given back are the regions' addresses, so handle and pointer references agree. */
static void NVTX_API rec_regions_register(nvtxDomainHandle_t domain,
                                          nvtxMemRegionsRegisterBatch_t const *b)
{
    nvtx_inject_event_t *e;
    uint64_t heap;
    bool heap_ok;
    pthread_mutex_lock(&mu);
    if (BAD_BATCH(NVTX_INJECT_REGION_REGISTER, b, regionCount, regionDescElements,
                  regionDescElementSize, sizeof(nvtxMemVirtualRangeDesc_t)))
        goto out;
    heap = (uintptr_t)b->heap;
    heap_ok = heap == 0 || find_heap(heap);
    for (size_t i = 0; i < b->regionCount; i++) {
        const nvtxMemVirtualRangeDesc_t *r;
        void *p;
        e = begin(NVTX_INJECT_REGION_REGISTER, domain, NULL);
        e->heap = heap;
        e->mem_type = b->regionType;
        e->index = (uint32_t)i;
        e->count = (uint32_t)b->regionCount;
        if (!heap_ok)
            fail(e, "region_register: unknown heap %#llx", (unsigned long long)heap);
        if (b->regionType != NVTX_MEM_TYPE_VIRTUAL_ADDRESS) {
            fail(e, "region_register: region type %u is not modelled", (unsigned)b->regionType);
            continue;
        }
        r = ELEMENT(b, regionDescElements, regionDescElementSize, i);
        e->address = (uintptr_t)r->ptr;
        e->size = r->size;
        if (b->regionHandleElementsOut)
            b->regionHandleElementsOut[i] = (nvtxMemRegionHandle_t)(uintptr_t)e->address;
        if (!heap_ok || !check_region(e, heap, e->address, e->size, SIZE_MAX))
            continue;
        if (!(p = grow(regions, &cap_regions, nregions + 1, sizeof *regions))) {
            fail(e, "region_register: out of memory");
            continue;
        }
        regions = p;
        regions[nregions++] = (region_rec_t){ heap, e->address, e->size };
    }
out:
    pthread_mutex_unlock(&mu);
}

static void NVTX_API rec_regions_resize(nvtxDomainHandle_t domain,
                                        nvtxMemRegionsResizeBatch_t const *b)
{
    nvtx_inject_event_t *e;
    pthread_mutex_lock(&mu);
    if (BAD_BATCH(NVTX_INJECT_REGION_RESIZE, b, regionDescCount, regionDescElements,
                  regionDescElementSize, sizeof(nvtxMemVirtualRangeDesc_t)))
        goto out;
    for (size_t i = 0; i < b->regionDescCount; i++) {
        const nvtxMemVirtualRangeDesc_t *r;
        size_t k;
        e = begin(NVTX_INJECT_REGION_RESIZE, domain, NULL);
        e->mem_type = b->regionType;
        e->index = (uint32_t)i;
        e->count = (uint32_t)b->regionDescCount;
        if (b->regionType != NVTX_MEM_TYPE_VIRTUAL_ADDRESS) {
            fail(e, "region_resize: region type %u is not modelled", (unsigned)b->regionType);
            continue;
        }
        r = ELEMENT(b, regionDescElements, regionDescElementSize, i);
        e->address = (uintptr_t)r->ptr;
        e->size = r->size;
        k = find_region(e->address);
        if (k == SIZE_MAX) {
            fail(e, "region_resize: %#llx is not a live region", (unsigned long long)e->address);
            continue;
        }
        e->heap = regions[k].heap;
        if (check_region(e, regions[k].heap, e->address, e->size, k))
            regions[k].size = e->size;
    }
out:
    pthread_mutex_unlock(&mu);
}

static uint64_t ref_address(uint32_t ref_type, const nvtxMemRegionRef_t *ref)
{
    return ref_type == NVTX_MEM_REGION_REF_TYPE_HANDLE ? (uintptr_t)ref->handle
                                                       : (uintptr_t)ref->pointer;
}

static void NVTX_API rec_regions_unregister(nvtxDomainHandle_t domain,
                                            nvtxMemRegionsUnregisterBatch_t const *b)
{
    nvtx_inject_event_t *e;
    pthread_mutex_lock(&mu);
    if (BAD_BATCH(NVTX_INJECT_REGION_UNREGISTER, b, refCount, refElements, refElementSize,
                  sizeof(nvtxMemRegionRef_t)))
        goto out;
    for (size_t i = 0; i < b->refCount; i++) {
        const nvtxMemRegionRef_t *ref;
        size_t k;
        e = begin(NVTX_INJECT_REGION_UNREGISTER, domain, NULL);
        e->mem_type = b->refType;
        e->index = (uint32_t)i;
        e->count = (uint32_t)b->refCount;
        if (b->refType != NVTX_MEM_REGION_REF_TYPE_POINTER &&
            b->refType != NVTX_MEM_REGION_REF_TYPE_HANDLE) {
            fail(e, "region_unregister: reference type %u", (unsigned)b->refType);
            continue;
        }
        ref = ELEMENT(b, refElements, refElementSize, i);
        e->address = ref_address(b->refType, ref);
        k = find_region(e->address);
        if (k == SIZE_MAX) {
            fail(e, "region_unregister: %#llx is not a live region",
                 (unsigned long long)e->address);
            continue;
        }
        e->heap = regions[k].heap;
        e->size = regions[k].size;
        regions[k] = regions[--nregions];
    }
out:
    pthread_mutex_unlock(&mu);
}

static void NVTX_API rec_regions_name(nvtxDomainHandle_t domain, nvtxMemRegionsNameBatch_t const *b)
{
    unsigned dom;
    nvtx_inject_event_t *e;
    pthread_mutex_lock(&mu);
    if (BAD_BATCH(NVTX_INJECT_REGION_NAME, b, regionCount, regionElements, regionElementSize,
                  sizeof(nvtxMemRegionNameDesc_t)))
        goto out;
    for (size_t i = 0; i < b->regionCount; i++) {
        const nvtxMemRegionNameDesc_t *n;
        size_t k;
        e = begin(NVTX_INJECT_REGION_NAME, domain, &dom);
        e->index = (uint32_t)i;
        e->count = (uint32_t)b->regionCount;
        n = ELEMENT(b, regionElements, regionElementSize, i);
        e->mem_type = n->regionRefType;
        e->category = n->category;
        e->address = ref_address(n->regionRefType, &n->region);
        set_message(e, dom, (int32_t)n->nameType, n->name);
        k = find_region(e->address);
        if (k == SIZE_MAX)
            fail(e, "region_name: %#llx is not a live region", (unsigned long long)e->address);
        else
            e->heap = regions[k].heap;
    }
out:
    pthread_mutex_unlock(&mu);
}

/* ---- attaching ------------------------------------------------------------------------------- */

typedef struct core_slot {
    unsigned id; /* NVTX_CBID_CORE_* / NVTX_CBID_CORE2_* */
    NvtxFunctionPointer fn;
} core_slot_t;

/* nvtxInitialize (CORE2_Initialize) is left alone: the memory extension calls it while it
 * initialises, and it is not an event. */
static const core_slot_t core_slots[] = {
    { NVTX_CBID_CORE_MarkEx, (NvtxFunctionPointer)rec_mark_ex },
    { NVTX_CBID_CORE_MarkA, (NvtxFunctionPointer)rec_mark_a },
    { NVTX_CBID_CORE_RangePushEx, (NvtxFunctionPointer)rec_range_push_ex },
    { NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)rec_range_push_a },
    { NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)rec_range_pop },
};

static const core_slot_t core2_slots[] = {
    { NVTX_CBID_CORE2_DomainMarkEx, (NvtxFunctionPointer)rec_domain_mark_ex },
    { NVTX_CBID_CORE2_DomainRangePushEx, (NvtxFunctionPointer)rec_domain_range_push_ex },
    { NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)rec_domain_range_pop },
    { NVTX_CBID_CORE2_DomainRegisterStringA, (NvtxFunctionPointer)rec_domain_register_string_a },
    { NVTX_CBID_CORE2_DomainCreateA, (NvtxFunctionPointer)rec_domain_create_a },
    { NVTX_CBID_CORE2_DomainDestroy, (NvtxFunctionPointer)rec_domain_destroy },
};

/* The module table is an array of pointers to the instance's function-pointer variables, entry 0
 * unused; out_size counts the entries without the trailing NULL. */
static bool attach_module(const NvtxExportTableCallbacks *cb, NvtxCallbackModule module,
                          const core_slot_t *slots, size_t n)
{
    NvtxFunctionTable table = NULL;
    unsigned size = 0;
    if (!cb->GetModuleFunctionTable(module, &table, &size) || !table)
        return false;
    for (size_t i = 0; i < n; i++)
        if (slots[i].id < size && table[slots[i].id])
            *table[slots[i].id] = slots[i].fn;
    return true;
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table)
{
    const NvtxExportTableCallbacks *cb;
    const NvtxExportTableVersionInfo *version;
    if (!get_export_table)
        return 0;
    cb = get_export_table(NVTX_ETID_CALLBACKS);
    if (!cb || cb->struct_size < sizeof *cb || !cb->GetModuleFunctionTable)
        return 0;
    version = get_export_table(NVTX_ETID_VERSIONINFO);
    if (version && version->struct_size >= sizeof *version && version->SetInjectionNvtxVersion)
        version->SetInjectionNvtxVersion(NVTX_VERSION);
    if (!attach_module(cb, NVTX_CB_MODULE_CORE, core_slots,
                       sizeof core_slots / sizeof core_slots[0]) ||
        !attach_module(cb, NVTX_CB_MODULE_CORE2, core2_slots,
                       sizeof core2_slots / sizeof core2_slots[0]))
        return 0;
    pthread_mutex_lock(&mu);
    core_attached++;
    pthread_mutex_unlock(&mu);
    return 1;
}

/* The memory module has one segment (id 1) of NVTX3EXT_CBID_*-indexed slots; slots we leave
 * NVTX_EXTENSION_FRESH (0) are disabled by NVTX after we return. Other extensions (payload,
 * counters, ...) are refused: returning 0 disables that module only. */
int InitializeInjectionNvtxExtension(nvtxExtModuleInfo_t *info)
{
    const struct {
        unsigned id;
        intptr_t fn;
    } mem_slots[] = {
        { NVTX3EXT_CBID_nvtxMemHeapRegister, (intptr_t)rec_heap_register },
        { NVTX3EXT_CBID_nvtxMemHeapUnregister, (intptr_t)rec_heap_unregister },
        { NVTX3EXT_CBID_nvtxMemHeapReset, (intptr_t)rec_heap_reset },
        { NVTX3EXT_CBID_nvtxMemRegionsRegister, (intptr_t)rec_regions_register },
        { NVTX3EXT_CBID_nvtxMemRegionsResize, (intptr_t)rec_regions_resize },
        { NVTX3EXT_CBID_nvtxMemRegionsUnregister, (intptr_t)rec_regions_unregister },
        { NVTX3EXT_CBID_nvtxMemRegionsName, (intptr_t)rec_regions_name },
    };
    bool attached = false;
    if (!info || info->structSize < sizeof *info || info->moduleId != NVTX_EXT_MODULEID_MEM ||
        info->compatId != NVTX_EXT_COMPATID_MEM)
        return 0;
    for (size_t s = 0; s < info->segmentsCount; s++) {
        nvtxExtModuleSegment_t *seg = &info->segments[s];
        if (seg->segmentId != 1 || !seg->functionSlots)
            continue;
        for (size_t i = 0; i < sizeof mem_slots / sizeof mem_slots[0]; i++)
            if (mem_slots[i].id < seg->slotCount)
                seg->functionSlots[mem_slots[i].id] = mem_slots[i].fn;
        attached = true;
    }
    if (!attached)
        return 0;
    pthread_mutex_lock(&mu);
    mem_attached++;
    pthread_mutex_unlock(&mu);
    return 1;
}

/* ---- query API ------------------------------------------------------------------------------- */

/* The plain counters, read under the lock. */
#define LOCKED_READ(type, fn, value)                                                               \
    type fn(void)                                                                                  \
    {                                                                                              \
        type v;                                                                                    \
        pthread_mutex_lock(&mu);                                                                   \
        v = (value);                                                                               \
        pthread_mutex_unlock(&mu);                                                                 \
        return v;                                                                                  \
    }
LOCKED_READ(size_t, nvtx_inject_count, nevents)
LOCKED_READ(size_t, nvtx_inject_errors, nerrors)
LOCKED_READ(size_t, nvtx_inject_live_heaps, nheaps)
LOCKED_READ(unsigned, nvtx_inject_core_attached, core_attached)
LOCKED_READ(unsigned, nvtx_inject_mem_attached, mem_attached)

const nvtx_inject_event_t *nvtx_inject_event(size_t i)
{
    const nvtx_inject_event_t *e = NULL;
    pthread_mutex_lock(&mu);
    if (i < nevents)
        e = &chunks[i / CHUNK_EVENTS][i % CHUNK_EVENTS];
    pthread_mutex_unlock(&mu);
    return e;
}

void nvtx_inject_clear(void)
{
    pthread_mutex_lock(&mu);
    free_log();
    nerrors = 0;
    last_error[0] = '\0';
    pthread_mutex_unlock(&mu);
}

void nvtx_inject_last_error(char *buf, size_t size)
{
    if (!buf || !size)
        return;
    pthread_mutex_lock(&mu);
    copy_text(buf, size, last_error);
    pthread_mutex_unlock(&mu);
}

size_t nvtx_inject_live_regions(uint64_t heap)
{
    size_t n = 0;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nregions; i++)
        n += heap == NVTX_INJECT_ALL_HEAPS || regions[i].heap == heap;
    pthread_mutex_unlock(&mu);
    return n;
}

void nvtx_inject_dump(FILE *out)
{
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nevents; i++) {
        const nvtx_inject_event_t *e = &chunks[i / CHUNK_EVENTS][i % CHUNK_EVENTS];
        fprintf(out,
                "%4zu %-17s %s[%s] \"%s\" payload %d:%llu level %d heap %#llx addr %#llx "
                "size %llu usage %u type %u %u/%u handle %#llx\n",
                i, nvtx_inject_kind_name(e->kind), e->flags & NVTX_INJECT_F_ERROR ? "ERROR " : "",
                e->domain, e->text, (int)e->payload_type, (unsigned long long)e->payload,
                (int)e->level, (unsigned long long)e->heap, (unsigned long long)e->address,
                (unsigned long long)e->size, (unsigned)e->usage, (unsigned)e->mem_type,
                (unsigned)e->index, (unsigned)e->count, (unsigned long long)e->handle);
    }
    pthread_mutex_unlock(&mu);
}

/* At unload (process exit: NVTX never closes a tool that attached). Anything recorded after this
 * finds empty tables: unknown handles are reported, nothing is dereferenced. */
__attribute__((destructor)) static void unload(void)
{
    pthread_mutex_lock(&mu);
    free_log();
    for (unsigned i = 0; i < ndomains; i++)
        free(domains[i]);
    ndomains = 0;
    for (size_t i = 0; i < nstrings; i++)
        free(strings[i]);
    free(strings);
    strings = NULL;
    nstrings = cap_strings = 0;
    free(heaps);
    heaps = NULL;
    nheaps = cap_heaps = 0;
    free(regions);
    regions = NULL;
    nregions = cap_regions = 0;
    pthread_mutex_unlock(&mu);
}
