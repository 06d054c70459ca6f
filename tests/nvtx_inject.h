/*
 * nvtx_inject.h — the query API of libnvtx_inject.so, a recording NVTX v3 tool for tests.
 *
 * NVTX loads the library itself when NVTX_INJECTION64_PATH names it (set the variable before the
 * process's first NVTX call). From then on every NVTX call that reaches the tool is appended to an
 * ordered event log, and the memory calls are also replayed against a model of live heaps and
 * regions; a broken rule (region outside its heap, overlap, unregister of a region that is not
 * live, pop without push, unknown handle, malformed descriptor) is counted as an error.
 *
 * Recorded: nvtxDomainCreateA/Destroy, nvtxDomainRegisterStringA, nvtxDomainMarkEx,
 * nvtxDomainRangePushEx/Pop (and nvtxMarkEx/A, nvtxRangePushEx/A, nvtxRangePop in the default
 * domain), nvtxMemHeapRegister/Unregister/Reset and nvtxMemRegionsRegister/Resize/Unregister/Name.
 * Every other NVTX call is a no-op while this tool is attached.
 *
 * A test must not link the library: it would then be a second copy, not the one NVTX loaded. It
 * binds to NVTX's copy with nvtx_inject_bind() (dlopen with RTLD_NOLOAD, then dlsym), which
 * therefore fails until NVTX has loaded the library. Event pointers stay valid until
 * nvtx_inject_clear(); the API is thread-safe.
 */
#ifndef VPMM_NVTX_INJECT_H
#define VPMM_NVTX_INJECT_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define NVTX_INJECT_NAME_MAX 64  /* domain names are cut to 63 characters */
#define NVTX_INJECT_TEXT_MAX 128 /* messages and strings are cut to 127 characters */

/* nvtx_inject_live_regions(NVTX_INJECT_ALL_HEAPS) counts the regions of every heap. */
#define NVTX_INJECT_ALL_HEAPS UINT64_MAX

/* The event broke a rule; nvtx_inject_last_error() says which. */
#define NVTX_INJECT_F_ERROR 0x1u

typedef enum nvtx_inject_kind {
    NVTX_INJECT_DOMAIN_CREATE = 1, /* text: the name; handle: the domain handle returned */
    NVTX_INJECT_DOMAIN_DESTROY,
    NVTX_INJECT_STRING_REGISTER,   /* text: the string; handle: the string handle returned */
    NVTX_INJECT_MARK,              /* message, payload, category, color */
    NVTX_INJECT_RANGE_PUSH,        /* as MARK; level: the nesting level returned (0 = outermost) */
    NVTX_INJECT_RANGE_POP,         /* level: the level of the range ended, -1 if none was open */
    NVTX_INJECT_HEAP_REGISTER,     /* usage, mem_type, address/size (virtual-address heaps), text:
                                      the heap's name; heap = handle: the heap handle returned */
    NVTX_INJECT_HEAP_UNREGISTER,   /* heap; count: live regions it dropped */
    NVTX_INJECT_HEAP_RESET,        /* heap; count: live regions it dropped */
    NVTX_INJECT_REGION_REGISTER,   /* one event per element: heap, mem_type, address, size,
                                      index/count: place in the batch */
    NVTX_INJECT_REGION_RESIZE,     /* one per element: address, size (the new size) */
    NVTX_INJECT_REGION_UNREGISTER, /* one per element: mem_type (the reference type), address;
                                      heap and size of the region it removed */
    NVTX_INJECT_REGION_NAME,       /* one per element: address, text: the name */
} nvtx_inject_kind_t;

typedef struct nvtx_inject_event {
    nvtx_inject_kind_t kind;
    uint32_t flags;                    /* NVTX_INJECT_F_* */
    char domain[NVTX_INJECT_NAME_MAX]; /* the domain's name, "" for the default domain */
    char text[NVTX_INJECT_TEXT_MAX];   /* message, string or name (see the kinds) */
    int32_t message_type;              /* nvtxMessageType_t as passed; a registered string is
                                          resolved into text */
    int32_t payload_type;              /* nvtxPayloadType_t, 0 if none */
    uint64_t payload;                  /* integers widened; float/double: their bit pattern */
    uint32_t category;
    uint32_t color;
    uint32_t usage;    /* heap: NVTX_MEM_HEAP_USAGE_* */
    uint32_t mem_type; /* NVTX_MEM_TYPE_* (heap, region), NVTX_MEM_REGION_REF_TYPE_* (unregister) */
    uint64_t handle;   /* what the tool returned: domain, string or heap handle */
    uint64_t heap;     /* the heap the call concerns */
    uint64_t address;
    uint64_t size;
    uint32_t index; /* place of this element in its batch */
    uint32_t count; /* elements in the batch; heap reset/unregister: regions dropped */
    int32_t level;  /* range push / pop: the nesting level returned */
} nvtx_inject_event_t;

/* Exported by libnvtx_inject.so (built with hidden visibility); a test calls them only through
 * nvtx_inject_api_t (see above). */
#define NVTX_INJECT_EXPORT __attribute__((visibility("default")))
NVTX_INJECT_EXPORT size_t nvtx_inject_count(void);
NVTX_INJECT_EXPORT const nvtx_inject_event_t *nvtx_inject_event(size_t i); /* NULL: i >= count */
NVTX_INJECT_EXPORT void nvtx_inject_clear(void); /* the log and the error count, nothing else */
NVTX_INJECT_EXPORT size_t nvtx_inject_errors(void);
NVTX_INJECT_EXPORT void nvtx_inject_last_error(char *buf, size_t size);
NVTX_INJECT_EXPORT size_t nvtx_inject_live_heaps(void);
NVTX_INJECT_EXPORT size_t nvtx_inject_live_regions(uint64_t heap);
/* InitializeInjectionNvtx2 calls: one per NVTX instance (executable or shared object). */
NVTX_INJECT_EXPORT unsigned nvtx_inject_core_attached(void);
/* Memory-extension initialisations: one per instance, on its first nvtxMem* call. */
NVTX_INJECT_EXPORT unsigned nvtx_inject_mem_attached(void);
NVTX_INJECT_EXPORT const char *nvtx_inject_kind_name(nvtx_inject_kind_t kind);
NVTX_INJECT_EXPORT void nvtx_inject_dump(FILE *out);

typedef struct nvtx_inject_api {
    size_t (*count)(void);
    const nvtx_inject_event_t *(*event)(size_t i);
    void (*clear)(void);
    size_t (*errors)(void);
    void (*last_error)(char *buf, size_t size);
    size_t (*live_heaps)(void);
    size_t (*live_regions)(uint64_t heap);
    unsigned (*core_attached)(void);
    unsigned (*mem_attached)(void);
    const char *(*kind_name)(nvtx_inject_kind_t kind);
    void (*dump)(FILE *out);
} nvtx_inject_api_t;

/* Fills api from the library at path if (and only if) the process has already loaded it.
 * Returns 0, or -1 when it is not loaded or lacks a symbol. */
static inline int nvtx_inject_bind(const char *path, nvtx_inject_api_t *api)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    void *sym;
    int missing = 0;
    if (!lib)
        return -1;
        /* ISO C has no object-to-function pointer cast; copying the bits is what dlsym implies. */
#define NVTX_INJECT_BIND(field, name)                                                              \
    do {                                                                                           \
        sym = dlsym(lib, name);                                                                    \
        missing |= sym == NULL;                                                                    \
        memcpy(&api->field, &sym, sizeof api->field);                                              \
    } while (0)
    NVTX_INJECT_BIND(count, "nvtx_inject_count");
    NVTX_INJECT_BIND(event, "nvtx_inject_event");
    NVTX_INJECT_BIND(clear, "nvtx_inject_clear");
    NVTX_INJECT_BIND(errors, "nvtx_inject_errors");
    NVTX_INJECT_BIND(last_error, "nvtx_inject_last_error");
    NVTX_INJECT_BIND(live_heaps, "nvtx_inject_live_heaps");
    NVTX_INJECT_BIND(live_regions, "nvtx_inject_live_regions");
    NVTX_INJECT_BIND(core_attached, "nvtx_inject_core_attached");
    NVTX_INJECT_BIND(mem_attached, "nvtx_inject_mem_attached");
    NVTX_INJECT_BIND(kind_name, "nvtx_inject_kind_name");
    NVTX_INJECT_BIND(dump, "nvtx_inject_dump");
#undef NVTX_INJECT_BIND
    /* Drops only the reference RTLD_NOLOAD took: NVTX's own keeps the library loaded. */
    dlclose(lib);
    return missing ? -1 : 0;
}

#endif /* VPMM_NVTX_INJECT_H */
