// nvtx_vmm_probe.cu — which NVTX memory-API heaps does compute-sanitizer take?
// (docs/OBSERVABILITY.md)
//
// Each variant registers a sub-allocator heap and one 1000-byte region at its start, then a kernel
// writes one byte just past the region and one byte 4 KiB in (both inside the heap, both mapped).
// Under `compute-sanitizer --tool memcheck`, an accepted heap makes both writes errors.
//   1  the heap is a 2 MiB cudaMalloc allocation
//   2  the heap is 2 MiB reserved and mapped with the VMM API (cuMemAddressReserve/Create/Map)
//   3  the heap is a 64 MiB VMM reservation of which 2 MiB are mapped (what vpmm has)
//   4  as 2, the heap registered before the CUDA runtime is initialised
//   5  no heap: the region registered in the process-wide heap, over VMM memory
//   6  as 2, with usage LAYOUT instead of SUB_ALLOCATOR
//
//   nvcc -O1 scripts/nvtx_vmm_probe.cu -o /tmp/probe -lcuda -ldl
//   for v in 1 2 3 4 5 6; do compute-sanitizer --tool memcheck /tmp/probe $v; done
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>

__global__ void poke(unsigned char *p)
{
    p[0] = 42;
}

static nvtxDomainHandle_t domain;

static nvtxMemHeapHandle_t heap_over(void *base, size_t size, unsigned usage)
{
    nvtxMemVirtualRangeDesc_t range = { size, base };
    nvtxMemHeapDesc_t d = {};
    d.extCompatID = NVTX_EXT_COMPATID_MEM;
    d.structSize = sizeof d;
    d.usage = usage;
    d.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    d.typeSpecificDescSize = sizeof range;
    d.typeSpecificDesc = &range;
    return nvtxMemHeapRegister(domain, &d);
}

static void region(nvtxMemHeapHandle_t heap, void *p, size_t n)
{
    nvtxMemVirtualRangeDesc_t range = { n, p };
    nvtxMemRegionsRegisterBatch_t b = {};
    b.extCompatID = NVTX_EXT_COMPATID_MEM;
    b.structSize = sizeof b;
    b.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    b.heap = heap;
    b.regionCount = 1;
    b.regionDescElementSize = sizeof range;
    b.regionDescElements = &range;
    nvtxMemRegionsRegister(domain, &b);
}

static unsigned char *vmm(size_t reserve, size_t map)
{
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp prop = {};
    CUmemAccessDesc access = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (cuMemAddressReserve(&va, reserve, 0, 0, 0) || cuMemCreate(&h, map, &prop, 0) ||
        cuMemMap(va, map, 0, h, 0) || cuMemSetAccess(va, map, &access, 1)) {
        printf("the VMM calls failed\n");
        exit(1);
    }
    return (unsigned char *)va;
}

int main(int argc, char **argv)
{
    const int v = argc > 1 ? atoi(argv[1]) : 1;
    unsigned char *base = nullptr;
    size_t heap_size = 2 << 20;
    nvtxMemHeapHandle_t heap;
    if (v == 4) { /* the driver API only, as vpmm itself */
        CUdevice dev;
        CUcontext ctx;
        cuInit(0);
        cuDeviceGet(&dev, 0);
        cuDevicePrimaryCtxRetain(&ctx, dev);
        cuCtxSetCurrent(ctx);
    } else {
        cudaFree(0);
    }
    domain = nvtxDomainCreateA("probe");
    if (v == 1)
        cudaMalloc(&base, 2 << 20);
    else if (v == 3)
        base = vmm(heap_size = 64 << 20, 2 << 20);
    else
        base = vmm(2 << 20, 2 << 20);
    heap = v == 5 ? NVTX_MEM_HEAP_HANDLE_PROCESS_WIDE
                  : heap_over(base, heap_size,
                              v == 6 ? NVTX_MEM_HEAP_USAGE_TYPE_LAYOUT
                                     : NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR);
    printf("variant %d: domain %p, heap %p\n", v, (void *)domain, (void *)heap);
    region(heap, base, 1000);
    if (v == 4)
        cudaFree(0);
    poke<<<1, 1>>>(base + 1000);
    poke<<<1, 1>>>(base + 4096);
    printf("kernels: %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
    return 0;
}
