/*
 * nvtx.c — the NVTX v3 calls behind nvtx.h: the "vpmm" domain, its registered range names, the
 * memory API's heaps and regions. Header-only NVTX from the CUDA toolkit (nvtx3/; the memory
 * extension needs no CUDA header); NVTX loads a tool's injection library itself (dlopen), and
 * without one every NVTX call is a no-op and the domain is NULL, which turns vpmm's calls off.
 *
 * Thread-safety: the domain and strings are made once (pthread_once); NVTX calls are thread-safe.
 * Built empty without VPMM_HAVE_NVTX.
 */
#include "nvtx.h"

#ifdef VPMM_HAVE_NVTX

#include <pthread.h>

#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>

int vpmm_i_nvtx_on;
int vpmm_i_nvtx_mem = 1;

static nvtxDomainHandle_t domain;
static nvtxStringHandle_t names[VPMM_NVTX_RANGE_COUNT];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const struct {
    const char *name;
    uint32_t argb;
} ranges[VPMM_NVTX_RANGE_COUNT] = {
    [VPMM_NVTX_GROW] = { "grow", 0xff4caf50 },
    [VPMM_NVTX_DEFRAG] = { "defragment", 0xffff9800 },
    [VPMM_NVTX_RECLAIM] = { "reclaim zombies", 0xff9e9e9e },
    [VPMM_NVTX_TRIM] = { "trim", 0xff2196f3 },
    [VPMM_NVTX_CAPTURE_BEGIN] = { "capture begin", 0xff9c27b0 },
    [VPMM_NVTX_CAPTURE_END] = { "capture end", 0xff9c27b0 },
    [VPMM_NVTX_CHECKPOINT_TAKE] = { "checkpoint take", 0xff00bcd4 },
    [VPMM_NVTX_CHECKPOINT_REAPPLY] = { "checkpoint reapply", 0xff00bcd4 },
};

static void init_once(void)
{
    domain = nvtxDomainCreateA("vpmm");
    if (domain == NULL)
        return; /* no tool: every vpmm NVTX call stays off */
    for (int i = 0; i < VPMM_NVTX_RANGE_COUNT; i++)
        names[i] = nvtxDomainRegisterStringA(domain, ranges[i].name);
    __atomic_store_n(&vpmm_i_nvtx_on, 1, __ATOMIC_RELEASE);
}

void vpmm_i_nvtx_init(void)
{
    pthread_once(&once, init_once);
}

void vpmm_i_nvtx_push_slow(vpmm_nvtx_range_t range, uint64_t payload)
{
    nvtxEventAttributes_t a = { 0 };
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.colorType = NVTX_COLOR_ARGB;
    a.color = ranges[range].argb;
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    a.payload.ullValue = payload;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = names[range];
    nvtxDomainRangePushEx(domain, &a);
}

void vpmm_i_nvtx_pop_slow(void)
{
    nvtxDomainRangePop(domain);
}

void *vpmm_i_nvtx_heap_slow(uintptr_t base, size_t size)
{
    const nvtxMemVirtualRangeDesc_t range = { size, (const void *)base };
    nvtxMemHeapDesc_t d = { 0 };
    d.extCompatID = NVTX_EXT_COMPATID_MEM;
    d.structSize = sizeof d;
    d.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
    d.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    d.typeSpecificDescSize = sizeof range;
    d.typeSpecificDesc = &range;
    d.messageType = NVTX_MESSAGE_TYPE_ASCII;
    d.message.ascii = "vpmm VA chunk";
    nvtxMemHeapHandle_t heap = nvtxMemHeapRegister(domain, &d);
    /* NULL when the memory extension has no tool (not NVTX_MEM_HEAP_HANDLE_NO_TOOL, whatever its
     * header says) or when the tool refused the heap: no more heaps or regions, then. */
    if (heap == NULL)
        __atomic_store_n(&vpmm_i_nvtx_mem, 0, __ATOMIC_RELAXED);
    return (void *)heap;
}

void vpmm_i_nvtx_heap_unregister_slow(void *heap)
{
    nvtxMemHeapUnregister(domain, (nvtxMemHeapHandle_t)heap);
}

void vpmm_i_nvtx_heap_reset_slow(void *heap)
{
    nvtxMemHeapReset(domain, (nvtxMemHeapHandle_t)heap);
}

void vpmm_i_nvtx_region_slow(void *heap, uintptr_t addr, size_t size)
{
    const nvtxMemVirtualRangeDesc_t range = { size, (const void *)addr };
    nvtxMemRegionsRegisterBatch_t b = { 0 };
    b.extCompatID = NVTX_EXT_COMPATID_MEM;
    b.structSize = sizeof b;
    b.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    b.heap = (nvtxMemHeapHandle_t)heap;
    b.regionCount = 1;
    b.regionDescElementSize = sizeof range;
    b.regionDescElements = &range;
    b.regionHandleElementsOut = NULL; /* the pointer is the reference */
    nvtxMemRegionsRegister(domain, &b);
}

void vpmm_i_nvtx_unregion_slow(uintptr_t addr)
{
    nvtxMemRegionRef_t ref;
    nvtxMemRegionsUnregisterBatch_t b = { 0 };
    ref.pointer = (const void *)addr;
    b.extCompatID = NVTX_EXT_COMPATID_MEM;
    b.structSize = sizeof b;
    b.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
    b.refCount = 1;
    b.refElementSize = sizeof ref;
    b.refElements = &ref;
    nvtxMemRegionsUnregister(domain, &b);
}

#endif /* VPMM_HAVE_NVTX */
