/*
 * test_nvtx_inject.c — the recording NVTX tool (nvtx_inject.c) on its own: no GPU, no vpmm.
 *
 * The process points NVTX_INJECTION64_PATH at libnvtx_inject.so, makes NVTX calls itself (a
 * domain, registered strings, ranges with uint64 payloads, a sub-allocator heap over a host buffer
 * whose regions are registered, resized, unregistered and reset) and asserts that the tool
 * recorded exactly those calls, in order, with their fields; that misuse is counted as errors;
 * and that recording is thread-safe with range nesting kept per thread. The library is never
 * linked: the group setup checks that it is absent before the first NVTX call and present after,
 * so NVTX's own loader is what is exercised. Test order matters once: test_memory_scenario is the
 * first to call the memory API and checks that the extension attaches then, not before.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>

#include "nvtx_inject.h"
#include "test_util.h"

#define THREADS 4
#define ROUNDS  2000

static nvtx_inject_api_t api;
static _Alignas(4096) unsigned char pool_mem[64 * KiB]; /* stands in for a device VA range */

static int setup_group(void **state)
{
    void *early = dlopen(NVTX_INJECT_PATH, RTLD_NOW | RTLD_NOLOAD);
    (void)state;
    if (early) {
        fprintf(stderr, "%s is loaded before any NVTX call: is it linked?\n", NVTX_INJECT_PATH);
        dlclose(early);
        return -1;
    }
    /* NVTX reads the variable once, at its first call; nvtxInitialize is that call. */
    if (setenv("NVTX_INJECTION64_PATH", NVTX_INJECT_PATH, 1) != 0)
        return -1;
    nvtxInitialize(NULL);
    if (nvtx_inject_bind(NVTX_INJECT_PATH, &api) != 0) {
        fprintf(stderr, "NVTX did not load %s: %s\n", NVTX_INJECT_PATH, dlerror());
        return -1;
    }
    return 0;
}

static int setup(void **state)
{
    (void)state;
    api.clear();
    return 0;
}

/* The i-th event, which must be of this kind, in this domain, and break no rule. */
static const nvtx_inject_event_t *expect(size_t i, nvtx_inject_kind_t kind, const char *domain)
{
    const nvtx_inject_event_t *e = api.event(i);
    if (!e || e->kind != kind || strcmp(e->domain, domain) != 0 || e->flags != 0)
        api.dump(stderr);
    assert_non_null(e);
    assert_string_equal(api.kind_name(e->kind), api.kind_name(kind));
    assert_string_equal(e->domain, domain);
    assert_int_equal(e->flags, 0);
    return e;
}

static nvtxEventAttributes_t attributes_u64(uint64_t payload)
{
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    a.payload.ullValue = payload;
    return a;
}

static nvtxEventAttributes_t ascii_u64(const char *text, uint64_t payload)
{
    nvtxEventAttributes_t a = attributes_u64(payload);
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = text;
    return a;
}

static nvtxEventAttributes_t registered_u64(nvtxStringHandle_t s, uint64_t payload)
{
    nvtxEventAttributes_t a = attributes_u64(payload);
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = s;
    return a;
}

static nvtxMemHeapHandle_t register_heap(nvtxDomainHandle_t d, void *base, size_t size,
                                         const char *name)
{
    nvtxMemVirtualRangeDesc_t range = { .size = size, .ptr = base };
    nvtxMemHeapDesc_t desc;
    memset(&desc, 0, sizeof desc);
    desc.extCompatID = NVTX_EXT_COMPATID_MEM;
    desc.structSize = sizeof desc;
    desc.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
    desc.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    desc.typeSpecificDescSize = sizeof range;
    desc.typeSpecificDesc = &range;
    desc.messageType = NVTX_MESSAGE_TYPE_ASCII;
    desc.message.ascii = name;
    return nvtxMemHeapRegister(d, &desc);
}

static void register_regions(nvtxDomainHandle_t d, nvtxMemHeapHandle_t heap,
                             const nvtxMemVirtualRangeDesc_t *ranges, size_t n,
                             nvtxMemRegionHandle_t *handles_out)
{
    nvtxMemRegionsRegisterBatch_t b;
    memset(&b, 0, sizeof b);
    b.extCompatID = NVTX_EXT_COMPATID_MEM;
    b.structSize = sizeof b;
    b.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    b.heap = heap;
    b.regionCount = n;
    b.regionDescElementSize = sizeof *ranges;
    b.regionDescElements = ranges;
    b.regionHandleElementsOut = handles_out;
    nvtxMemRegionsRegister(d, &b);
}

static void register_region(nvtxDomainHandle_t d, nvtxMemHeapHandle_t heap, void *ptr, size_t size)
{
    nvtxMemVirtualRangeDesc_t r = { .size = size, .ptr = ptr };
    register_regions(d, heap, &r, 1, NULL);
}

static void resize_region(nvtxDomainHandle_t d, void *ptr, size_t size)
{
    nvtxMemVirtualRangeDesc_t r = { .size = size, .ptr = ptr };
    nvtxMemRegionsResizeBatch_t b;
    memset(&b, 0, sizeof b);
    b.extCompatID = NVTX_EXT_COMPATID_MEM;
    b.structSize = sizeof b;
    b.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    b.regionDescCount = 1;
    b.regionDescElementSize = sizeof r;
    b.regionDescElements = &r;
    nvtxMemRegionsResize(d, &b);
}

static void unregister_region(nvtxDomainHandle_t d, const void *ptr)
{
    nvtxMemRegionRef_t ref = { .pointer = ptr };
    nvtxMemRegionsUnregisterBatch_t b;
    memset(&b, 0, sizeof b);
    b.extCompatID = NVTX_EXT_COMPATID_MEM;
    b.structSize = sizeof b;
    b.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
    b.refCount = 1;
    b.refElementSize = sizeof ref;
    b.refElements = &ref;
    nvtxMemRegionsUnregister(d, &b);
}

static void test_loaded_by_nvtx(void **state)
{
    (void)state;
    /* One NVTX instance (this executable) attached the core; memory attaches on its first call. */
    assert_int_equal(api.core_attached(), 1);
    assert_int_equal(api.mem_attached(), 0);
    assert_int_equal(api.count(), 0);
    assert_int_equal(api.errors(), 0);
}

static void test_domain_and_strings(void **state)
{
    const nvtx_inject_event_t *e;
    nvtxDomainHandle_t d = nvtxDomainCreateA("vpmm");
    nvtxStringHandle_t s = nvtxDomainRegisterStringA(d, "vpmm_malloc");
    nvtxStringHandle_t s2 = nvtxDomainRegisterStringA(d, "vpmm_malloc");
    nvtxDomainHandle_t d2 = nvtxDomainCreateA("vpmm");
    nvtxEventAttributes_t a = registered_u64(s, 1);
    (void)state;
    /* A call whose slot the tool leaves empty: NVTX made it a no-op, nothing is recorded. */
    nvtxDomainNameCategoryA(d, 7, "grow");
    assert_non_null(d);
    assert_non_null(s);
    assert_ptr_equal(d2, d); /* same name, same handle */
    assert_ptr_equal(s2, s);

    assert_int_equal(api.count(), 4);
    e = expect(0, NVTX_INJECT_DOMAIN_CREATE, "vpmm");
    assert_string_equal(e->text, "vpmm");
    assert_int_equal(e->handle, (uintptr_t)d);
    e = expect(1, NVTX_INJECT_STRING_REGISTER, "vpmm");
    assert_string_equal(e->text, "vpmm_malloc");
    assert_int_equal(e->handle, (uintptr_t)s);
    e = expect(2, NVTX_INJECT_STRING_REGISTER, "vpmm");
    assert_int_equal(e->handle, (uintptr_t)s);
    e = expect(3, NVTX_INJECT_DOMAIN_CREATE, "vpmm");
    assert_int_equal(e->handle, (uintptr_t)d);

    /* Clearing empties the log; the handles stay good. */
    api.clear();
    assert_int_equal(api.count(), 0);
    nvtxDomainMarkEx(d, &a);
    assert_int_equal(api.count(), 1);
    e = expect(0, NVTX_INJECT_MARK, "vpmm");
    assert_string_equal(e->text, "vpmm_malloc");
    assert_int_equal(e->message_type, NVTX_MESSAGE_TYPE_REGISTERED);
    assert_int_equal(api.errors(), 0);
}

static void test_ranges_with_payload(void **state)
{
    const nvtx_inject_event_t *e;
    nvtxDomainHandle_t d = nvtxDomainCreateA("vpmm");
    nvtxStringHandle_t s = nvtxDomainRegisterStringA(d, "vpmm_malloc");
    nvtxEventAttributes_t outer = registered_u64(s, 4096);
    nvtxEventAttributes_t inner = ascii_u64("vpmm_grow", 2 * MiB);
    (void)state;
    api.clear();

    assert_int_equal(nvtxDomainRangePushEx(d, &outer), 0);
    assert_int_equal(nvtxDomainRangePushEx(d, &inner), 1);
    assert_int_equal(nvtxDomainRangePop(d), 1);
    assert_int_equal(nvtxDomainRangePop(d), 0);
    /* The default domain nests on its own. */
    assert_int_equal(nvtxDomainRangePushEx(d, &outer), 0);
    assert_int_equal(nvtxRangePushA("outside"), 0);
    assert_int_equal(nvtxRangePop(), 0);
    assert_int_equal(nvtxDomainRangePop(d), 0);

    assert_int_equal(api.count(), 8);
    e = expect(0, NVTX_INJECT_RANGE_PUSH, "vpmm");
    assert_string_equal(e->text, "vpmm_malloc");
    assert_int_equal(e->message_type, NVTX_MESSAGE_TYPE_REGISTERED);
    assert_int_equal(e->payload_type, NVTX_PAYLOAD_TYPE_UNSIGNED_INT64);
    assert_int_equal(e->payload, 4096);
    assert_int_equal(e->level, 0);
    e = expect(1, NVTX_INJECT_RANGE_PUSH, "vpmm");
    assert_string_equal(e->text, "vpmm_grow");
    assert_int_equal(e->message_type, NVTX_MESSAGE_TYPE_ASCII);
    assert_int_equal(e->payload, 2 * MiB);
    assert_int_equal(e->level, 1);
    assert_int_equal(expect(2, NVTX_INJECT_RANGE_POP, "vpmm")->level, 1);
    assert_int_equal(expect(3, NVTX_INJECT_RANGE_POP, "vpmm")->level, 0);
    assert_int_equal(expect(4, NVTX_INJECT_RANGE_PUSH, "vpmm")->level, 0);
    e = expect(5, NVTX_INJECT_RANGE_PUSH, "");
    assert_string_equal(e->text, "outside");
    assert_int_equal(e->payload_type, NVTX_PAYLOAD_UNKNOWN);
    assert_int_equal(e->level, 0);
    assert_int_equal(expect(6, NVTX_INJECT_RANGE_POP, "")->level, 0);
    assert_int_equal(expect(7, NVTX_INJECT_RANGE_POP, "vpmm")->level, 0);
    assert_int_equal(api.errors(), 0);
}

/* The scenario an allocator plays: a range around growing the pool, the heap registered inside
 * it, allocations as regions (a batch of two, then one), a resize, a free, a trim (reset) and the
 * pool's destruction. */
static void test_memory_scenario(void **state)
{
    const nvtx_inject_event_t *e;
    const uint64_t base = (uintptr_t)pool_mem;
    unsigned char *a = pool_mem, *b = pool_mem + 8 * KiB, *c = pool_mem + 16 * KiB;
    nvtxMemVirtualRangeDesc_t two[2] = { { .size = 4 * KiB, .ptr = a }, { .size = 512, .ptr = b } };
    nvtxMemRegionHandle_t handles[2] = { NULL, NULL };
    nvtxDomainHandle_t d = nvtxDomainCreateA("vpmm");
    nvtxEventAttributes_t grow =
        registered_u64(nvtxDomainRegisterStringA(d, "vpmm_grow"), sizeof pool_mem);
    nvtxMemHeapHandle_t heap;
    (void)state;
    api.clear();

    assert_int_equal(api.mem_attached(), 0);
    assert_int_equal(nvtxDomainRangePushEx(d, &grow), 0);
    heap = register_heap(d, pool_mem, sizeof pool_mem, "vpmm pool");
    assert_int_equal(api.mem_attached(), 1); /* attached by the call above, lazily */
    assert_ptr_equal(heap, pool_mem);        /* a virtual-address heap's handle is its base */
    assert_int_equal(nvtxDomainRangePop(d), 0);
    register_regions(d, heap, two, 2, handles);
    assert_ptr_equal(handles[0], a);
    assert_ptr_equal(handles[1], b);
    register_region(d, heap, c, 100);
    assert_int_equal(api.live_regions((uintptr_t)heap), 3);
    resize_region(d, b, 1 * KiB);
    unregister_region(d, a);
    assert_int_equal(api.live_regions((uintptr_t)heap), 2);
    nvtxMemHeapReset(d, heap);
    assert_int_equal(api.live_regions(NVTX_INJECT_ALL_HEAPS), 0);
    assert_int_equal(api.live_heaps(), 1);
    nvtxMemHeapUnregister(d, heap);
    assert_int_equal(api.live_heaps(), 0);

    assert_int_equal(api.count(), 10);
    e = expect(0, NVTX_INJECT_RANGE_PUSH, "vpmm");
    assert_string_equal(e->text, "vpmm_grow");
    assert_int_equal(e->payload, sizeof pool_mem);
    e = expect(1, NVTX_INJECT_HEAP_REGISTER, "vpmm");
    assert_int_equal(e->usage, NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR);
    assert_int_equal(e->mem_type, NVTX_MEM_TYPE_VIRTUAL_ADDRESS);
    assert_int_equal(e->address, base);
    assert_int_equal(e->size, sizeof pool_mem);
    assert_int_equal(e->heap, base);
    assert_int_equal(e->handle, base);
    assert_string_equal(e->text, "vpmm pool");
    expect(2, NVTX_INJECT_RANGE_POP, "vpmm");
    e = expect(3, NVTX_INJECT_REGION_REGISTER, "vpmm");
    assert_int_equal(e->heap, base);
    assert_int_equal(e->mem_type, NVTX_MEM_TYPE_VIRTUAL_ADDRESS);
    assert_int_equal(e->address, (uintptr_t)a);
    assert_int_equal(e->size, 4 * KiB);
    assert_int_equal(e->index, 0);
    assert_int_equal(e->count, 2);
    e = expect(4, NVTX_INJECT_REGION_REGISTER, "vpmm");
    assert_int_equal(e->address, (uintptr_t)b);
    assert_int_equal(e->size, 512);
    assert_int_equal(e->index, 1);
    assert_int_equal(e->count, 2);
    e = expect(5, NVTX_INJECT_REGION_REGISTER, "vpmm");
    assert_int_equal(e->address, (uintptr_t)c);
    assert_int_equal(e->size, 100);
    assert_int_equal(e->count, 1);
    e = expect(6, NVTX_INJECT_REGION_RESIZE, "vpmm");
    assert_int_equal(e->address, (uintptr_t)b);
    assert_int_equal(e->size, 1 * KiB);
    assert_int_equal(e->heap, base);
    e = expect(7, NVTX_INJECT_REGION_UNREGISTER, "vpmm");
    assert_int_equal(e->mem_type, NVTX_MEM_REGION_REF_TYPE_POINTER);
    assert_int_equal(e->address, (uintptr_t)a);
    assert_int_equal(e->size, 4 * KiB);
    assert_int_equal(e->heap, base);
    e = expect(8, NVTX_INJECT_HEAP_RESET, "vpmm");
    assert_int_equal(e->heap, base);
    assert_int_equal(e->count, 2); /* b and c */
    e = expect(9, NVTX_INJECT_HEAP_UNREGISTER, "vpmm");
    assert_int_equal(e->heap, base);
    assert_int_equal(e->count, 0);
    assert_int_equal(api.errors(), 0);
}

/* Regions named and unregistered through the handles the tool gave back. */
static void test_names_and_handles(void **state)
{
    const nvtx_inject_event_t *e;
    nvtxDomainHandle_t d = nvtxDomainCreateA("vpmm");
    nvtxMemHeapHandle_t heap = register_heap(d, pool_mem, sizeof pool_mem, "vpmm pool");
    nvtxMemVirtualRangeDesc_t r = { .size = 256, .ptr = pool_mem + 512 };
    nvtxMemRegionHandle_t handle = NULL;
    nvtxMemRegionNameDesc_t name;
    nvtxMemRegionsNameBatch_t names;
    nvtxMemRegionsUnregisterBatch_t b;
    nvtxMemRegionRef_t ref;
    (void)state;
    register_regions(d, heap, &r, 1, &handle);
    assert_ptr_equal(handle, pool_mem + 512);
    api.clear();

    memset(&name, 0, sizeof name);
    name.regionRefType = NVTX_MEM_REGION_REF_TYPE_HANDLE;
    name.nameType = NVTX_MESSAGE_TYPE_ASCII;
    name.region.handle = handle;
    name.name.ascii = "tensor";
    memset(&names, 0, sizeof names);
    names.extCompatID = NVTX_EXT_COMPATID_MEM;
    names.structSize = sizeof names;
    names.regionCount = 1;
    names.regionElementSize = sizeof name;
    names.regionElements = &name;
    nvtxMemRegionsName(d, &names);
    ref.handle = handle;
    memset(&b, 0, sizeof b);
    b.extCompatID = NVTX_EXT_COMPATID_MEM;
    b.structSize = sizeof b;
    b.refType = NVTX_MEM_REGION_REF_TYPE_HANDLE;
    b.refCount = 1;
    b.refElementSize = sizeof ref;
    b.refElements = &ref;
    nvtxMemRegionsUnregister(d, &b);
    nvtxMemHeapUnregister(d, heap);

    assert_int_equal(api.count(), 3);
    e = expect(0, NVTX_INJECT_REGION_NAME, "vpmm");
    assert_int_equal(e->address, (uintptr_t)(pool_mem + 512));
    assert_int_equal(e->heap, (uintptr_t)pool_mem);
    assert_string_equal(e->text, "tensor");
    e = expect(1, NVTX_INJECT_REGION_UNREGISTER, "vpmm");
    assert_int_equal(e->mem_type, NVTX_MEM_REGION_REF_TYPE_HANDLE);
    assert_int_equal(e->address, (uintptr_t)(pool_mem + 512));
    assert_int_equal(e->size, 256);
    assert_int_equal(expect(2, NVTX_INJECT_HEAP_UNREGISTER, "vpmm")->count, 0);
    assert_int_equal(api.errors(), 0);
}

static void assert_last_error(size_t errors, const char *needle)
{
    char msg[256];
    api.last_error(msg, sizeof msg);
    assert_int_equal(api.errors(), errors);
    assert_non_null(strstr(msg, needle));
    assert_true(api.event(api.count() - 1)->flags & NVTX_INJECT_F_ERROR);
}

/* Each misuse a pool could commit is reported (the tool prints it to stderr as well). */
static void test_misuse_is_reported(void **state)
{
    nvtxDomainHandle_t d = nvtxDomainCreateA("vpmm");
    nvtxDomainHandle_t other = nvtxDomainCreateA("other");
    nvtxEventAttributes_t foreign = registered_u64(nvtxDomainRegisterStringA(d, "vpmm_free"), 0);
    nvtxMemHeapHandle_t heap = register_heap(d, pool_mem, sizeof pool_mem, "vpmm pool");
    nvtxMemHeapDesc_t bad;
    (void)state;
    api.clear();

    register_region(d, heap, pool_mem + sizeof pool_mem - 10, 100);
    assert_last_error(1, "outside heap");
    register_region(d, heap, pool_mem, 4 * KiB);
    register_region(d, heap, pool_mem + 4000, 200);
    assert_last_error(2, "overlaps live region");
    unregister_region(d, pool_mem + 12345);
    assert_last_error(3, "not a live region");
    assert_int_equal(nvtxDomainRangePop(d), -1);
    assert_last_error(4, "no open range");
    nvtxMemHeapReset(d, (nvtxMemHeapHandle_t)(uintptr_t)0xdead000);
    assert_last_error(5, "unknown heap");
    nvtxDomainMarkEx(other, &foreign);
    assert_last_error(6, "another domain");
    memset(&bad, 0, sizeof bad);
    bad.structSize = sizeof bad; /* extCompatID left 0 */
    assert_null(nvtxMemHeapRegister(d, &bad));
    assert_last_error(7, "compat");
    {
        /* A malformed batch is one event, however many elements it claims. */
        size_t before = api.count();
        nvtxMemRegionsRegisterBatch_t batch;
        memset(&batch, 0, sizeof batch);
        batch.extCompatID = NVTX_EXT_COMPATID_MEM;
        batch.structSize = sizeof batch;
        batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
        batch.heap = heap;
        batch.regionCount = 1000; /* regionDescElements left NULL */
        nvtxMemRegionsRegister(d, &batch);
        assert_int_equal(api.count(), before + 1);
        assert_last_error(8, "1000 elements");
    }
    assert_int_equal(api.live_regions((uintptr_t)heap), 1);

    nvtxMemHeapUnregister(d, heap);
    assert_int_equal(api.live_regions(NVTX_INJECT_ALL_HEAPS), 0);
    assert_int_equal(api.live_heaps(), 0);
    api.clear();
    assert_int_equal(api.errors(), 0);
}

static nvtxDomainHandle_t thread_domain;
static atomic_int bad_levels;

static void *worker(void *arg)
{
    uint64_t id = (uintptr_t)arg;
    for (uint64_t r = 0; r < ROUNDS; r++) {
        nvtxEventAttributes_t outer = ascii_u64("work", id << 32 | r);
        nvtxEventAttributes_t inner = ascii_u64("step", id << 32 | r);
        int l0 = nvtxDomainRangePushEx(thread_domain, &outer);
        int l1 = nvtxDomainRangePushEx(thread_domain, &inner);
        int p1 = nvtxDomainRangePop(thread_domain);
        int p0 = nvtxDomainRangePop(thread_domain);
        if (l0 != 0 || l1 != 1 || p1 != 1 || p0 != 0)
            atomic_fetch_add(&bad_levels, 1);
    }
    return NULL;
}

/* Concurrent threads: nothing lost, nesting per thread, each thread's events in its own order. */
static void test_threads(void **state)
{
    pthread_t t[THREADS];
    uint64_t next[THREADS] = { 0 };
    (void)state;
    thread_domain = nvtxDomainCreateA("vpmm");
    api.clear();
    for (uintptr_t i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, (void *)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&bad_levels), 0);
    assert_int_equal(api.count(), (size_t)THREADS * ROUNDS * 4);
    assert_int_equal(api.errors(), 0);
    for (size_t i = 0; i < api.count(); i++) {
        const nvtx_inject_event_t *e = api.event(i);
        uint64_t tid;
        if (e->kind != NVTX_INJECT_RANGE_PUSH || e->level != 0)
            continue;
        tid = e->payload >> 32;
        assert_true(tid < THREADS);
        assert_int_equal(e->payload & 0xffffffffu, next[tid]);
        next[tid]++;
    }
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(next[i], ROUNDS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_loaded_by_nvtx, setup),
        cmocka_unit_test_setup(test_domain_and_strings, setup),
        cmocka_unit_test_setup(test_ranges_with_payload, setup),
        cmocka_unit_test_setup(test_memory_scenario, setup),
        cmocka_unit_test_setup(test_names_and_handles, setup),
        cmocka_unit_test_setup(test_misuse_is_reported, setup),
        cmocka_unit_test_setup(test_threads, setup),
    };
    return cmocka_run_group_tests(tests, setup_group, NULL);
}
