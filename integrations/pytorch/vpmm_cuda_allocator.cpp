/*
 * vpmm_cuda_allocator.cpp — vpmm as PyTorch's complete CUDA allocator: a subclass of
 * c10::cuda::CUDACachingAllocator::CUDAAllocator (PyTorch 2.11), installed before CUDA is
 * initialised (vpmm_backend.h's install, which vpmm_torch_backend.cpp's exported
 * vpmm_torch_backend_install calls for integrations/pytorch/vpmm/torch.py).
 *
 * A thin layer: each method turns PyTorch's types into the C adapter's (torch_adapter.h, tested
 * on the host backend) and back. What lives only here: PyTorch's routing filters (a capture or a
 * thread allocating into a mempool id: beginAllocateToPool's std::function, evaluated LIFO as the
 * native allocator does), DataPtrs and their one raw deleter, the OutOfMemoryError with vpmm's
 * report and the OOM observers, the CheckpointDelta's DataPtrs, the CUDA runtime calls the
 * interface asks for (copies, peer access), and the allocators of MemPools created with their own
 * allocator (torch.cuda.MemPool(allocator), e.g. NCCL's): their allocations come from that
 * allocator, one call each; the adapter counts them and shows them in snapshots. Contracts and
 * call traces: INTERFACE.md.
 *
 * Several devices (§9.1): one vpmm pool per device, created by its first use (a statistics query
 * creates none); a free, recordStream or shareIpcHandle goes to the pool that holds the pointer;
 * enablePeerAccess also grants the pool (cudaDeviceEnablePeerAccess does not reach VMM memory).
 * CUDA IPC (§9.3): vpmm_ipc_export / vpmm_ipc_open / vpmm_ipc_close through the adapter, whose
 * free of an exported block ends the shares no consumer closed; handles of PyTorch's own allocator
 * are refused by name. Out of memory: PyTorch's free-memory callbacks run (its IPC collection) and
 * the allocation is retried once, as the native allocator does.
 *
 * Segments and trace trackers (§10): attachAllocatorTraceTracker keeps PyTorch's trackers
 * (vpmm_trackers.h; ProcessGroupNCCL's register each segment with NCCL); from the first tracker
 * (or history recording) on, every device's pool reports its segments — each physical handle at
 * its live address, reported gone before it moves or is unmapped — as TraceEntry SEGMENT_ALLOC /
 * SEGMENT_FREE (no stream; the mempool id of its graph pool, or {0,0}) to the trackers and the
 * history; before a SEGMENT_FREE reaches the trackers the device's work is waited for
 * (wait_for_device). A MemPool's own allocations are segments of their own, as with the native
 * allocator. While a tracker is attached (or with VPMM_TORCH_SEGMENTS=handles) snapshot() lists the
 * same segments, else runs of regions (each allocation one block, what PyTorch's memory tools
 * expect).
 *
 * Threads: any. The device table is made by init(); a device's state and pool at its first use,
 * under create_lock_, published with release stores and read with acquire loads; devices are never
 * destroyed (PyTorch frees tensors until the process ends; the native allocator is a leaked
 * static too). A device's routing list is under its own mutex (never held while vpmm works), with
 * an atomic count so that a malloc with nothing routed takes no lock; the MemPools' allocators and
 * live pointers under ext_lock_. Lock order (each may be taken holding those before it, never the
 * other way): ext_lock_ → create_lock_ → a device's adapter lock → vpmm's pool lock → the adapter's
 * seg_lock → the trackers' list lock / the history's lock → the trackers' own locks. The segment
 * hook runs under vpmm's pool lock and calls the trackers there (as the native allocator calls
 * them under its own), so whatever it takes must never be held by a thread that waits for vpmm:
 * seg_lock and the list and history locks are leaves, and PyTorch's trackers take only their own
 * locks and call NCCL, never the allocator (ProcessGroupNCCL releases them before it calls
 * snapshot()). A tracker's exception never unwinds through vpmm: it is thrown after the vpmm call
 * where the caller may throw (an allocation, emptyCache, setMemoryFraction), else written to
 * stderr (raw_delete, releasePool, setCheckpointPoolState: deleters and destructors call them).
 * No iostreams (§5): messages are vpmm_text.h's cat(); every TORCH_CHECK gets one string.
 */
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <torch/version.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

extern "C" {
#include "torch_adapter.h"
}
#include "vpmm_backend.h"
#include "vpmm_convert.h"
#include "vpmm_history.h"
#include "vpmm_text.h"
#include "vpmm_trackers.h"

/* The PyTorch whose headers this library was compiled against ("2.11.0"): vpmm.torch refuses to
 * install it into another major.minor (PyTorch's C++ ABI changes between them). */
extern "C" __attribute__((visibility("default"))) const char *vpmm_torch_backend_torch_version(void)
{
    return TORCH_VERSION;
}

namespace
{

using namespace c10::cuda::CUDACachingAllocator;
using c10::MempoolId_t;
using c10::CachingDeviceAllocator::DeviceStats;

using vpmm_torch::cat;
using vpmm_torch::report_tracker_error;
using vpmm_torch::status_text;
using vpmm_torch::throw_tracker_error;
using vpmm_torch::to_vta;
using vpmm_torch::tracker_error_pending;

void vpmm_raw_delete(void *ptr);

/* One CUDA device: its vpmm pool, the adapter's state over it, PyTorch's routing list. */
struct Device {
    vpmm_pool_t *pool = nullptr;
    vta_device_t vta{};
    std::mutex routes_lock;
    std::vector<std::pair<MempoolId_t, std::function<bool(cudaStream_t)>>> routes;
    std::atomic<size_t> nroutes{ 0 }; /* routes.size(), read without the lock */
};

/* PyTorch's free-memory callbacks (FreeCudaMemoryCallbacksRegistry: torch.multiprocessing's
 * "cuda_ipc_collect" frees the blocks other processes are done with), as the native allocator
 * runs them before it gives up: whether any freed something. Called with no lock held (they free
 * through raw_delete). */
bool run_free_memory_callbacks()
{
    bool freed = false;
    for (const auto &name : c10::FreeCudaMemoryCallbacksRegistry()->Keys())
        freed |= c10::FreeCudaMemoryCallbacksRegistry()->Create(name)->Execute();
    return freed;
}

/* The device's total and free memory (cudaMemGetInfo under a guard); {0, 0} if CUDA refuses. */
std::pair<size_t, size_t> memory_info(c10::DeviceIndex dev)
{
    size_t free_b = 0, total_b = 0;
    c10::cuda::CUDAGuard guard(dev);
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear it: the caller reports the OOM */
        return { 0, 0 };
    }
    return { total_b, free_b };
}

/* A checkpoint of a mempool id's graph pool (getCheckpointState). */
struct VpmmState : public AllocatorState {
    vpmm_checkpoint_t *ck = nullptr;
    c10::DeviceIndex device = 0;
    ~VpmmState() override
    {
        vpmm_checkpoint_destroy(ck);
    }
};

class VpmmAllocator : public CUDAAllocator
{
  public:
    /* ---- lifetime ---- */
    void init(int device_count) override
    {
        std::lock_guard<std::mutex> g(create_lock_);
        if (ndevices_ == 0 && device_count > 0) {
            ndevices_ = static_cast<size_t>(device_count);
            devs_ = new Device *[ndevices_](); /* never freed: see the head comment */
            table_ = new vta_device_t *[ndevices_]();
        }
        initialized_.store(true, std::memory_order_release);
    }
    bool initialized() override
    {
        return initialized_.load(std::memory_order_acquire);
    }
    std::string name() override
    {
        return "vpmm";
    }

    /* ---- allocation ---- */
    c10::DataPtr allocate(size_t n) override
    {
        c10::DeviceIndex device = c10::cuda::current_device();
        cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
        void *p = n == 0 ? nullptr : alloc_on(device, n, stream);
        return { p, p, &vpmm_raw_delete, c10::Device(c10::DeviceType::CUDA, device) };
    }
    c10::DeleterFnPtr raw_deleter() const override
    {
        return &vpmm_raw_delete;
    }
    void *raw_alloc(size_t nbytes) override
    {
        c10::DeviceIndex device = c10::cuda::current_device();
        return nbytes == 0
                   ? nullptr
                   : alloc_on(device, nbytes, c10::cuda::getCurrentCUDAStream(device).stream());
    }
    void *raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override
    {
        return nbytes == 0 ? nullptr : alloc_on(c10::cuda::current_device(), nbytes, stream);
    }
    /* Frees ptr on the pool that holds it, whatever device is current (asked first: where most
     * frees happen). */
    void raw_delete(void *ptr) override
    {
        if (ptr == nullptr)
            return;
        if (n_ext_.load(std::memory_order_relaxed) != 0 && free_external(ptr))
            return;
        vpmm_region_info_t info;
        int owner = vta_owner(table_, ndevices_, ptr, current_device_or(-1), &info);
        TORCH_CHECK(owner >= 0, cat("vpmm: invalid device pointer: ", ptr,
                                    " (not allocated by vpmm on any device)"));
        history_.on_free(static_cast<c10::DeviceIndex>(owner), ptr, info.size, info.stream);
        vpmm_status_t st = vta_free_known(table_[owner], ptr, &info);
        report_tracker_error("a free"); /* a deleter: nothing thrown */
        TORCH_CHECK(st == VPMM_SUCCESS, cat("vpmm: invalid device pointer: ", ptr, " (device ",
                                            owner, "): ", status_text(st)));
    }
    void copy_data(void *dest, const void *src, std::size_t count) const override
    {
        C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
    }
    /* Recorded on the pool that holds the pointer (the DataPtr's device asked first), not on the
     * stream's device's: a stream of another device is vpmm's to order (its markers are events
     * made on that stream's device). */
    void recordStream(const c10::DataPtr &ptr, c10::cuda::CUDAStream stream) override
    {
        if (!ptr.get() || ptr.get_deleter() != &vpmm_raw_delete)
            return; /* foreign memory: nothing to order (as the native allocator) */
        int owner = -1;
        vpmm_status_t st = vta_record_stream_any(table_, ndevices_, ptr.get(), ptr.device().index(),
                                                 stream.stream(), &owner);
        TORCH_CHECK(st == VPMM_SUCCESS, cat("vpmm: recordStream of ", ptr.get(), " (device ", owner,
                                            ") with a stream of device ", stream.device_index(),
                                            " failed: ", status_text(st)));
    }

    /* ---- memory pools (CUDA graphs, MemPool) ---- */
    void beginAllocateToPool(c10::DeviceIndex dev, MempoolId_t id,
                             std::function<bool(cudaStream_t)> filter) override
    {
        Device &d = device(dev);
        vpmm_status_t st = vta_pool_incref(&d.vta, to_vta(id)); /* a pool of either kind */
        TORCH_CHECK(st == VPMM_SUCCESS, cat("vpmm: beginAllocateToPool failed: ", status_text(st)));
        std::lock_guard<std::mutex> g(d.routes_lock);
        for (auto &r : d.routes)
            TORCH_CHECK(r.first != id, "beginAllocateToPool: already recording to mempool_id");
        d.routes.emplace_back(id, std::move(filter));
        d.nroutes.store(d.routes.size());
    }
    void endAllocateToPool(c10::DeviceIndex dev, MempoolId_t id) override
    {
        Device &d = device(dev);
        std::lock_guard<std::mutex> g(d.routes_lock);
        for (auto it = d.routes.begin(); it != d.routes.end(); ++it) {
            if (it->first == id) {
                d.routes.erase(it);
                d.nroutes.store(d.routes.size());
                return;
            }
        }
        TORCH_CHECK(false, "endAllocatePool: not currently recording to mempool_id");
    }
    void releasePool(c10::DeviceIndex dev, MempoolId_t id) override
    {
        Device &d = device(dev);
        vpmm_status_t st = vta_pool_decref(&d.vta, to_vta(id)); /* may hand its pages over */
        report_tracker_error("releasePool"); /* CUDAGraph's destructor calls it */
        TORCH_CHECK(st == VPMM_SUCCESS, "vpmm: releasePool of an unknown mempool id");
        if (vta_pool_use_count(&d.vta, to_vta(id)) == 0) {
            std::lock_guard<std::mutex> g(ext_lock_);
            pool_allocators_.erase({ dev, id }); /* its live allocations keep theirs */
        }
    }
    int getPoolUseCount(c10::DeviceIndex dev, MempoolId_t id) override
    {
        Device *d = find(dev);
        return d ? static_cast<int>(vta_pool_use_count(&d->vta, to_vta(id))) : 0;
    }
    void createOrIncrefPool(c10::DeviceIndex dev, MempoolId_t id,
                            std::shared_ptr<CUDAAllocator> allocator) override
    {
        Device &d = device(dev);
        if (allocator == nullptr) {
            vpmm_status_t st = vta_pool_incref(&d.vta, to_vta(id));
            TORCH_CHECK(st == VPMM_SUCCESS,
                        cat("vpmm: createOrIncrefPool failed: ", status_text(st)));
            return;
        }
        /* A pool served by its own allocator (an id of one kind only). */
        std::lock_guard<std::mutex> g(ext_lock_);
        vpmm_status_t st = vta_pool_incref_external(&d.vta, to_vta(id));
        TORCH_CHECK(st == VPMM_SUCCESS,
                    cat("vpmm: createOrIncrefPool failed: ", status_text(st),
                        st == VPMM_ERROR_INVALID_ARGUMENT
                            ? " (the mempool id is already a pool without an allocator)"
                            : ""));
        pool_allocators_.emplace(std::make_pair(dev, id), std::move(allocator));
    }
    void setUseOnOOM(c10::DeviceIndex, MempoolId_t, bool) override
    {
        /* vpmm has one shared pool per device to fall back on, and keeps no free memory of a
         * pool with its own allocator: nothing to add. */
    }
    void setNoSplit(c10::DeviceIndex, MempoolId_t) override
    {
        /* vpmm's blocks are carved from pages and remapped, never "split" segments: nothing to do.
         */
    }
    bool checkPoolLiveAllocations(c10::DeviceIndex dev, MempoolId_t id,
                                  const std::unordered_set<void *> &expected) override
    {
        std::vector<void *> ptrs(expected.begin(), expected.end());
        Device *d = find(dev);
        int r = d ? vta_pool_live_matches(&d->vta, to_vta(id), ptrs.data(), ptrs.size()) : -1;
        TORCH_CHECK(r >= 0, "Could not find pool of id");
        return r == 1;
    }
    std::shared_ptr<AllocatorState> getCheckpointState(c10::DeviceIndex dev,
                                                       MempoolId_t id) override
    {
        auto state = std::make_shared<VpmmState>();
        vpmm_status_t st = vta_checkpoint_take(&device(dev).vta, to_vta(id), &state->ck);
        TORCH_CHECK(st == VPMM_SUCCESS, cat("vpmm: getCheckpointState failed: ", status_text(st)));
        state->device = dev;
        return state;
    }
    CheckpointDelta setCheckpointPoolState(c10::DeviceIndex dev,
                                           std::shared_ptr<AllocatorState> pps) override
    {
        auto state = std::dynamic_pointer_cast<VpmmState>(pps);
        TORCH_CHECK(state != nullptr, "vpmm: not a vpmm checkpoint");
        void **freed = nullptr, **allocd = nullptr;
        size_t nfreed = 0, nallocd = 0;
        vpmm_status_t st =
            vta_checkpoint_apply(&device(dev).vta, state->ck, &freed, &nfreed, &allocd, &nallocd);
        report_tracker_error("setCheckpointPoolState"); /* its delta must reach the caller */
        TORCH_CHECK(st == VPMM_SUCCESS,
                    cat("vpmm: setCheckpointPoolState failed: ", status_text(st)));
        CheckpointDelta delta;
        delta.ptrs_freed.assign(freed, freed + nfreed);
        for (size_t i = 0; i < nallocd; i++)
            delta.dataptrs_allocd.emplace_back(allocd[i], allocd[i], &vpmm_raw_delete,
                                               c10::Device(c10::DeviceType::CUDA, dev));
        std::free(freed);
        std::free(allocd);
        return delta;
    }

    /* ---- statistics, cache, snapshot ---- */
    /* A device with no pool yet has all-zero statistics (nothing is created to report them). */
    DeviceStats getDeviceStats(c10::DeviceIndex dev) override
    {
        check_index(dev);
        vta_stats_t s{};
        s.max_split_size = -1;
        if (Device *d = find(dev))
            vta_get_stats(&d->vta, &s);
        return vpmm_torch::device_stats(s);
    }
    void resetAccumulatedStats(c10::DeviceIndex dev) override
    {
        check_index(dev);
        if (Device *d = find(dev))
            vta_reset_accumulated(&d->vta);
    }
    void resetPeakStats(c10::DeviceIndex dev) override
    {
        check_index(dev);
        if (Device *d = find(dev))
            vta_reset_peak(&d->vta);
    }
    /* torch.cuda.empty_cache() ({0,0}): vpmm_trim of every device's pool. As the native
     * allocator waits for the work pending on the blocks it frees, a device with nothing routed
     * (no capture, no MemPool context: a synchronisation there would break a capture) is
     * synchronised first, so that memory freed on a stream still busy is given back too.
     * A MemPool's id (its destructor empties its cache after releasing it): nothing — its graph
     * pool's pages went back to the shared pool when it was released, to serve the next
     * allocations; trimming the whole device at every MemPool's end would make them grow again. */
    void emptyCache(MempoolId_t id) override
    {
        if (id != MempoolId_t{ 0, 0 })
            return;
        for (size_t i = 0; i < ndevices_; i++) {
            Device *d = find(static_cast<c10::DeviceIndex>(i));
            if (!d)
                continue;
            if (d->nroutes.load(std::memory_order_acquire) == 0) {
                c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(i));
                C10_CUDA_CHECK(cudaDeviceSynchronize());
                vta_note_sync_all(&d->vta);
            }
            (void)vta_empty_cache(&d->vta);
        }
        throw_tracker_error(); /* a deregistration that failed, as the native allocator's */
    }
    void cacheInfo(c10::DeviceIndex dev, size_t *largestBlock) override
    {
        Device *d = find(dev);
        *largestBlock = d ? vta_largest_free(&d->vta) : 0;
    }
    void *getBaseAllocation(void *ptr, size_t *size) override
    {
        if (n_ext_.load(std::memory_order_relaxed) != 0) {
            std::lock_guard<std::mutex> g(ext_lock_);
            auto it = ext_ptrs_.find(ptr);
            if (it != ext_ptrs_.end()) {
                if (size)
                    *size = it->second.size;
                return ptr;
            }
        }
        vpmm_region_info_t info;
        if (vta_owner(table_, ndevices_, ptr, current_device_or(-1), &info) >= 0) {
            if (size)
                *size = info.size;
            return reinterpret_cast<void *>(info.addr);
        }
        TORCH_CHECK(false, cat("vpmm: getBaseAllocation: ", ptr, " is not vpmm memory"));
    }
    SnapshotInfo snapshot(MempoolId_t id, bool include_traces) override
    {
        SnapshotInfo info;
        const bool all = id.first == 0 && id.second == 0;
        info.device_traces.resize(ndevices_);
        if (include_traces)
            for (auto &e : history_.entries())
                if (e.device_ >= 0 && static_cast<size_t>(e.device_) < ndevices_)
                    info.device_traces[static_cast<size_t>(e.device_)].push_back(std::move(e));
        /* The segments trackers hear of (physical handles) while any is attached: a communicator
         * created now registers them, and the events deregister them later. */
        const bool handles = segments_mode_ == VTA_SEGMENTS_HANDLES || trackers_.count() != 0;
        for (size_t i = 0; i < ndevices_; i++) {
            Device *d = find(static_cast<c10::DeviceIndex>(i));
            if (!d)
                continue;
            vta_segment_t *segs = nullptr;
            size_t n = 0;
            vpmm_status_t st = handles ? vta_snapshot_handles(&d->vta, to_vta(id), all, &segs, &n)
                                       : vta_snapshot(&d->vta, to_vta(id), all, &segs, &n);
            TORCH_CHECK(st == VPMM_SUCCESS,
                        cat("vpmm: snapshot of device ", i, " failed: ", status_text(st)));
            for (size_t k = 0; k < n; k++) /* registration_counter: address order */
                info.segments.push_back(
                    vpmm_torch::segment_info(segs[k], static_cast<c10::DeviceIndex>(i),
                                             static_cast<int32_t>(info.segments.size()), history_));
            vta_snapshot_free(segs, n);
        }
        return info;
    }

    /* ---- what vpmm does not do, or does as the native allocator does ---- */
    double getMemoryFraction(c10::DeviceIndex dev) override
    {
        check_index(dev);
        Device *d = find(dev);
        return d ? vta_memory_fraction(&d->vta) : 1.0;
    }
    /* The fraction of that device's total memory its pool may map (vpmm_set_max_bytes). */
    void setMemoryFraction(double fraction, c10::DeviceIndex dev) override
    {
        TORCH_CHECK(fraction >= 0.0 && fraction <= 1.0,
                    cat("invalid fraction:", fraction, ". Please set within [0, 1]."));
        Device &d = device(dev);
        size_t total_b = 0;
        if (fraction < 1.0) {
            size_t free_b = 0;
            c10::cuda::CUDAGuard guard(dev);
            C10_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        }
        vpmm_status_t st = vta_set_memory_fraction(&d.vta, fraction, total_b);
        throw_tracker_error();
        TORCH_CHECK(st == VPMM_SUCCESS, cat("vpmm: setting device ", dev, "'s memory fraction to ",
                                            fraction, " failed: ", status_text(st)));
    }
    std::vector<StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex) override
    {
        return {};
    }
    void enable(bool value) override
    {
        enabled_ = value;
    }
    bool isEnabled() const override
    {
        return enabled_;
    }
    /*
     * A handle another process opens with getIpcDevPtr: vpmm_ipc_export's bytes for the
     * allocation that holds ptr, and ptr's offset from its start (torch.multiprocessing passes the
     * storage's own pointer: offset 0). Each call counts one share in vpmm, which the consumer's
     * getIpcDevPtr takes over and its deleter ends; a send that the consumer finds in its cache
     * opens nothing, and its share ends at the block's free (raw_delete: PyTorch frees a shared
     * block only once every consumer released it; vta_free_known).
     */
    ShareableHandle shareIpcHandle(void *ptr) override
    {
        if (n_ext_.load(std::memory_order_relaxed) != 0 && is_external(ptr))
            TORCH_CHECK(false, cat("vpmm: cannot share the CUDA memory at ", ptr,
                                   " with another process: it belongs to a MemPool with its own "
                                   "allocator, which vpmm does not manage"));
        vpmm_region_info_t info;
        int owner = vta_owner(table_, ndevices_, ptr, current_device_or(-1), &info);
        TORCH_CHECK(owner >= 0, cat("vpmm: shareIpcHandle: invalid device pointer: ", ptr,
                                    " (not allocated by vpmm on any device)"));
        unsigned char *bytes = nullptr;
        size_t len = 0, offset = 0;
        vpmm_status_t st = vta_ipc_export(table_[owner], ptr, &bytes, &len, &offset);
        TORCH_CHECK(st == VPMM_SUCCESS,
                    cat("vpmm: cannot share the CUDA memory at ", ptr, " (device ", owner,
                        ") with another process: ", status_text(st)));
        ShareableHandle h;
        h.offset = static_cast<ptrdiff_t>(offset);
        h.handle.assign(reinterpret_cast<const char *>(bytes), len);
        std::free(bytes);
        return h;
    }
    /*
     * Maps another process's allocation on the current device's pool (torch.multiprocessing sets
     * it to the producer's device index) and returns its start; one vpmm_ipc_open per call (the
     * same pages are mapped once), one vpmm_ipc_close per deleter. Handles of PyTorch's own
     * allocator, or of none, are refused by name.
     */
    std::shared_ptr<void> getIpcDevPtr(std::string handle) override
    {
        const c10::DeviceIndex dev = c10::cuda::current_device();
        if (vta_ipc_kind(handle.data(), handle.size()) != VTA_IPC_VPMM) {
            char why[1024];
            vta_ipc_refusal(handle.data(), handle.size(), why, sizeof why);
            TORCH_CHECK(false,
                        cat("vpmm: cannot open a CUDA IPC handle on device ", dev, ": ", why));
        }
        Device &d = device(dev);
        void *p = nullptr;
        vpmm_status_t st = vta_ipc_open(&d.vta, handle.data(), handle.size(), &p);
        TORCH_CHECK(st == VPMM_SUCCESS,
                    cat("vpmm: cannot open the CUDA IPC handle of another process on device ", dev,
                        ": ", status_text(st)));
        vta_device_t *v = &d.vta; /* devices live until the process ends */
        return std::shared_ptr<void>(p, [v](void *q) {
            vpmm_status_t s = vta_ipc_close(v, q);
            if (s != VPMM_SUCCESS) /* a deleter must not throw */
                std::fprintf(stderr, "vpmm: closing the CUDA IPC mapping at %p failed: %s\n", q,
                             status_text(s).c_str());
        });
    }
    bool isHistoryEnabled() override
    {
        return history_.is_enabled();
    }
    void recordHistory(bool enabled, CreateContextFn recorder, size_t max_entries,
                       RecordContext when, bool clear,
                       const std::vector<std::string> &skip_actions) override
    {
        history_.configure(enabled, recorder, max_entries, when, clear, skip_actions);
        if (enabled)
            report_segments(); /* segment_alloc / segment_free entries from now on */
    }
    void attachOutOfMemoryObserver(OutOfMemoryObserver observer) override
    {
        std::lock_guard<std::mutex> g(observers_lock_);
        observers_.push_back(std::move(observer));
    }
    /*
     * ProcessGroupNCCL's (TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1, registerMemPool): one to
     * register each SEGMENT_ALLOC with NCCL, one to deregister each SEGMENT_FREE. Kept for the
     * life of the process, as the native allocator keeps them; every device's pool reports its
     * segments from now on, and snapshot() lists the same segments.
     */
    void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) override
    {
        /* The pools report first: from the moment the tracker is in the list (and snapshot()
         * lists handles), no segment comes or goes unheard. */
        report_segments();
        trackers_.attach(std::move(tracker));
    }

    /* A segment event of device's pool (vta_segment_sink_t; under vpmm's pool lock): a
     * SEGMENT_ALLOC or SEGMENT_FREE for the history and the trackers. Nothing may unwind from
     * here into vpmm. */
    void on_segment(int device, vpmm_segment_event_t ev, uintptr_t addr, size_t size,
                    vta_pool_id_t pool) noexcept
    {
        if (ev == VPMM_SEGMENT_UNMAPPED && trackers_.count() != 0) {
            Device *d = find(static_cast<c10::DeviceIndex>(device));
            if (d != nullptr && d->nroutes.load(std::memory_order_acquire) == 0)
                vpmm_torch::wait_for_device(device); /* nothing routed: no capture under way */
        }
        try {
            trace(TraceEntry(
                ev == VPMM_SEGMENT_MAPPED ? TraceEntry::SEGMENT_ALLOC : TraceEntry::SEGMENT_FREE,
                static_cast<c10::DeviceIndex>(device), static_cast<size_t>(addr), size, nullptr,
                MempoolId_t{ pool.first, pool.second }, c10::getApproximateTime()));
        } catch (...) { /* host memory for the entry: kept, thrown as a tracker's would be */
            vpmm_torch::keep_tracker_error(std::current_exception());
        }
    }

    /* VPMM_TORCH_SEGMENTS, read once by vpmm_torch_backend_install. */
    void set_segments_mode(vta_segments_mode_t mode)
    {
        segments_mode_ = mode;
    }
    size_t trackers() const
    {
        return trackers_.count();
    }
    bool snapshot_handles() const
    {
        return segments_mode_ == VTA_SEGMENTS_HANDLES || trackers() != 0;
    }
    /*
     * PyTorch asks this before its first copy from dev to dev_to_access (the copy runs on dev's
     * stream and writes dev_to_access's memory). cudaDeviceEnablePeerAccess covers cudaMalloc
     * memory (other allocators', legacy IPC); vpmm's memory is mapped with cuMemMap and reachable
     * from dev only once dev_to_access's pool gives it access — to every page mapped now and
     * later (vpmm_pool_grant_access; the pool is created here if that device has none yet).
     */
    void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override
    {
        {
            c10::cuda::CUDAGuard guard(dev);
            cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
            if (err == cudaErrorPeerAccessAlreadyEnabled)
                (void)cudaGetLastError(); /* clear it: already enabled is what was asked */
            else
                C10_CUDA_CHECK(err);
        }
        Device &to = device(dev_to_access);
        vpmm_status_t st = vta_grant_peer(&to.vta, dev);
        TORCH_CHECK(st == VPMM_SUCCESS, cat("vpmm: giving device ", dev, " access to device ",
                                            dev_to_access, "'s memory failed: ", status_text(st)));
    }
    /*
     * A copy between two devices (or within one): cudaMemcpyAsync when one device may reach the
     * other's memory (p2p_enabled: PyTorch called enablePeerAccess for this pair, so the copying
     * device has access to vpmm's pages on the other) or both are the same device; otherwise
     * cudaMemcpyPeerAsync, which moves memory between devices without mappings (the native
     * allocator does the same for its VMM memory, expandable segments).
     */
    cudaError_t memcpyAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
                            cudaStream_t stream, bool p2p_enabled) override
    {
        if (p2p_enabled || dstDevice == srcDevice)
            return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
        return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
    }

    /* For the Python side (vpmm_torch_backend_*): the device's pool and state, or nullptr. */
    vpmm_pool_t *pool_of(int dev)
    {
        Device *d = dev >= 0 && dev <= 127 ? find(static_cast<c10::DeviceIndex>(dev)) : nullptr;
        return d ? d->pool : nullptr;
    }
    vta_device_t *vta_of(int dev)
    {
        Device *d = dev >= 0 && dev <= 127 ? find(static_cast<c10::DeviceIndex>(dev)) : nullptr;
        return d ? &d->vta : nullptr;
    }

  private:
    /* A segment event to the history and to every tracker (PyTorch's record_trace of a segment).
     * A tracker's exception is kept (vpmm_trackers.h) for the caller's entry point. */
    void trace(const TraceEntry &te)
    {
        history_.on_segment(te);
        trackers_.call(te);
    }

    /* From now on every device's pool reports its segments: the pools that exist (here) and the
     * ones created later (device()), both under create_lock_, so none is missed. */
    void report_segments()
    {
        std::lock_guard<std::mutex> g(create_lock_);
        if (segment_events_.exchange(true))
            return;
        for (size_t i = 0; i < ndevices_; i++)
            if (Device *d = find(static_cast<c10::DeviceIndex>(i)))
                attach_segments(*d);
    }
    void attach_segments(Device &d);

    void check_index(c10::DeviceIndex dev) const
    {
        TORCH_CHECK(ready() && dev >= 0 && static_cast<size_t>(dev) < ndevices_,
                    cat("vpmm: device ", dev, " is out of range or not initialised (", ndevices_,
                        " devices)"));
    }
    bool ready() const
    {
        return initialized_.load(std::memory_order_acquire);
    }

    /* The device's state if it has a pool, else nullptr (creates nothing). */
    Device *find(c10::DeviceIndex dev) const
    {
        if (dev < 0 || static_cast<size_t>(dev) >= ndevices_ || devs_ == nullptr)
            return nullptr;
        return __atomic_load_n(&devs_[dev], __ATOMIC_ACQUIRE);
    }

    /* The current device, or fallback when CUDA cannot say (a hint only). */
    static int current_device_or(int fallback)
    {
        int dev = -1;
        if (cudaGetDevice(&dev) != cudaSuccess) {
            (void)cudaGetLastError();
            return fallback;
        }
        return dev;
    }

    /* The device's state, its pool created at its first use. */
    Device &device(c10::DeviceIndex dev)
    {
        check_index(dev);
        if (Device *d = find(dev))
            return *d;
        std::lock_guard<std::mutex> g(create_lock_);
        if (Device *d = find(dev))
            return *d;
        auto d = std::make_unique<Device>();
        vpmm_config_t cfg;
        vpmm_config_init(&cfg); /* the CUDA backend: vpmm's default */
        cfg.device = dev;
        vpmm_status_t st = vpmm_pool_create(&cfg, &d->pool);
        TORCH_CHECK(st == VPMM_SUCCESS,
                    cat("vpmm: creating the pool of device ", dev, " failed: ", status_text(st)));
        if (vta_device_init(&d->vta, d->pool, dev) != 0) {
            (void)vpmm_pool_destroy(d->pool);
            TORCH_CHECK(false, "vpmm: out of host memory");
        }
        Device *raw = d.release(); /* never freed: see the head comment */
        if (segment_events_.load())
            attach_segments(*raw); /* before its first allocation */
        __atomic_store_n(&table_[dev], &raw->vta, __ATOMIC_RELEASE);
        __atomic_store_n(&devs_[dev], raw, __ATOMIC_RELEASE);
        return *raw;
    }

    /* Whether ptr is a live allocation of a MemPool's own allocator. */
    bool is_external(void *ptr)
    {
        std::lock_guard<std::mutex> g(ext_lock_);
        return ext_ptrs_.find(ptr) != ext_ptrs_.end();
    }

    /* The mempool id PyTorch's filters route this stream to ({0,0}: none), newest first. */
    MempoolId_t route(Device &d, cudaStream_t stream)
    {
        std::lock_guard<std::mutex> g(d.routes_lock);
        for (auto it = d.routes.rbegin(); it != d.routes.rend(); ++it)
            if (it->second(stream))
                return it->first;
        return MempoolId_t{ 0, 0 };
    }

    /* An allocation of a MemPool with its own allocator: from that allocator, counted. */
    void *alloc_external(Device &d, c10::DeviceIndex dev, MempoolId_t id, size_t n,
                         cudaStream_t stream)
    {
        std::shared_ptr<CUDAAllocator> a;
        {
            std::lock_guard<std::mutex> g(ext_lock_);
            auto it = pool_allocators_.find({ dev, id });
            TORCH_CHECK(it != pool_allocators_.end(), "vpmm: the MemPool's allocator is gone");
            a = it->second;
        }
        void *p = a->raw_alloc_with_stream(n, stream);
        if (p == nullptr) {
            std::string msg =
                cat("CUDA out of memory. Tried to allocate ", n, " bytes on device ", dev,
                    ": the MemPool's own allocator (", a->name(), ") returned no memory");
            TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
        }
        {
            std::lock_guard<std::mutex> g(ext_lock_);
            vpmm_status_t st = vta_external_add(&d.vta, to_vta(id), p, n, stream);
            if (st != VPMM_SUCCESS) {
                a->raw_delete(p);
                TORCH_CHECK(false,
                            cat("vpmm: counting a MemPool allocation failed: ", status_text(st)));
            }
            ext_ptrs_.emplace(p, External{ std::move(a), dev, n, stream, id });
            n_ext_.fetch_add(1, std::memory_order_relaxed);
        }
        /* A segment of its own, as the native allocator reports the memory a pool's allocator
         * gave it (registerMemPool's pools: NCCL registers it); no lock of ours held. A tracker
         * that failed undoes the allocation and its exception is thrown. */
        trace(TraceEntry(TraceEntry::SEGMENT_ALLOC, dev, reinterpret_cast<size_t>(p), n, stream, id,
                         c10::getApproximateTime()));
        if (tracker_error_pending()) {
            std::exception_ptr e = vpmm_torch::take_tracker_error(); /* before the free's own */
            (void)free_external(p);
            std::rethrow_exception(e);
        }
        history_.on_alloc(dev, p, n, stream, id);
        return p;
    }

    /* raw_delete of a MemPool's own allocation: true if ptr is one (given back to its
     * allocator). */
    bool free_external(void *ptr)
    {
        External x;
        {
            std::lock_guard<std::mutex> g(ext_lock_);
            auto it = ext_ptrs_.find(ptr);
            if (it == ext_ptrs_.end())
                return false;
            x = std::move(it->second);
            ext_ptrs_.erase(it);
            size_t size = 0;
            (void)vta_external_remove(&device(x.device).vta, ptr, &size);
            n_ext_.fetch_sub(1, std::memory_order_relaxed);
        }
        history_.on_free(x.device, ptr, x.size, x.stream);
        /* Deregistered (SEGMENT_FREE) before its allocator takes it back. */
        trace(TraceEntry(TraceEntry::SEGMENT_FREE, x.device, reinterpret_cast<size_t>(ptr), x.size,
                         x.stream, x.pool, c10::getApproximateTime()));
        report_tracker_error("a free"); /* raw_delete: nothing thrown */
        x.allocator->raw_delete(ptr);
        return true;
    }

    /* An allocation vpmm has made. A tracker's exception while it was made (the registration of a
     * new segment that failed) undoes it and is thrown, as the native allocator lets it escape
     * its malloc. */
    void *allocated(Device &d, c10::DeviceIndex dev, void *p, size_t n, cudaStream_t stream,
                    MempoolId_t id)
    {
        if (tracker_error_pending()) {
            std::exception_ptr e = vpmm_torch::take_tracker_error();
            (void)vta_free(&d.vta, p);
            vpmm_torch::report_tracker_error("undoing an allocation"); /* the free's own */
            std::rethrow_exception(e);
        }
        history_.on_alloc(dev, p, n, stream, id);
        return p;
    }

    /*
     * An allocation on device dev. A failure about size (the device or the cap had no room, or
     * more than vpmm reserves at once) is PyTorch's OutOfMemoryError, as the native allocator's:
     * PyTorch's free-memory callbacks run first (torch.multiprocessing frees the blocks other
     * processes are done with) and the allocation is retried once if they freed anything; then
     * the history's OOM entry, the OOM observers (no lock held) and the error, whose text says
     * what was asked, on which device, and why (vta_oom_message).
     */
    void *alloc_on(c10::DeviceIndex dev, size_t n, cudaStream_t stream)
    {
        Device &d = device(dev);
        MempoolId_t id{ 0, 0 };
        if (d.nroutes.load(std::memory_order_acquire) != 0)
            id = route(d, stream);
        if (id != MempoolId_t{ 0, 0 } && vta_pool_is_external(&d.vta, to_vta(id)))
            return alloc_external(d, dev, id, n, stream);
        void *p = nullptr;
        vpmm_status_t st = vta_malloc(&d.vta, n, stream, to_vta(id), &p);
        if (st == VPMM_SUCCESS)
            return allocated(d, dev, p, n, stream, id);
        report_tracker_error("an allocation that failed"); /* its own error comes next */
        TORCH_CHECK(vta_is_oom(st), cat("vpmm: allocating ", n, " bytes on device ", dev,
                                        " failed: ", status_text(st)));
        char msg[3072];
        auto mem = memory_info(dev); /* {total, free} */
        /* Right after the failure: the text reads this thread's vpmm_last_error. */
        vta_oom_message(&d.vta, n, st, mem.first, mem.second, msg, sizeof msg);
        if (st == VPMM_ERROR_OUT_OF_MEMORY && run_free_memory_callbacks()) {
            vta_oom_retried(&d.vta);
            st = vta_malloc(&d.vta, n, stream, to_vta(id), &p);
            if (st == VPMM_SUCCESS)
                return allocated(d, dev, p, n, stream, id);
            report_tracker_error("an allocation that failed");
            TORCH_CHECK(vta_is_oom(st), cat("vpmm: allocating ", n, " bytes on device ", dev,
                                            " failed: ", status_text(st)));
            mem = memory_info(dev);
            vta_oom_message(&d.vta, n, st, mem.first, mem.second, msg, sizeof msg);
        }
        history_.on_oom(dev, n, mem.second, stream);
        std::vector<OutOfMemoryObserver> obs;
        {
            std::lock_guard<std::mutex> g(observers_lock_);
            obs = observers_;
        }
        /* As the native allocator: the allowed maximum when a fraction caps the device. */
        const double fraction = vta_memory_fraction(&d.vta);
        const size_t allowed = fraction < 1.0
                                   ? static_cast<size_t>(fraction * static_cast<double>(mem.first))
                                   : mem.first;
        for (auto &o : obs)
            o(dev, static_cast<int64_t>(n), static_cast<int64_t>(allowed),
              static_cast<int64_t>(mem.second));
        TORCH_CHECK_WITH(OutOfMemoryError, false, std::string(msg));
    }

    std::mutex create_lock_;
    size_t ndevices_ = 0;            /* init()'s device count; fixed from then on */
    Device **devs_ = nullptr;        /* [ndevices_], published with release stores */
    vta_device_t **table_ = nullptr; /* the same devices' adapter state (vta_owner's table) */
    std::atomic<bool> initialized_{ false };
    bool enabled_ = true;
    std::mutex observers_lock_;
    std::vector<OutOfMemoryObserver> observers_;
    /* MemPools with their own allocator: the allocator of each (device, id), and each live
     * allocation's (which keeps its allocator alive after the pool is released). */
    struct External {
        std::shared_ptr<CUDAAllocator> allocator;
        c10::DeviceIndex device = 0;
        size_t size = 0;
        cudaStream_t stream = nullptr;
        MempoolId_t pool{ 0, 0 };
    };
    std::mutex ext_lock_;
    std::map<std::pair<c10::DeviceIndex, MempoolId_t>, std::shared_ptr<CUDAAllocator>>
        pool_allocators_;
    std::unordered_map<void *, External> ext_ptrs_;
    std::atomic<size_t> n_ext_{ 0 };
    vpmm_torch::History history_;
    vpmm_torch::Trackers trackers_; /* attachAllocatorTraceTracker's (vpmm_trackers.h) */
    std::atomic<bool> segment_events_{ false }; /* the pools report their segments (set once) */
    vta_segments_mode_t segments_mode_ = VTA_SEGMENTS_AUTO;
};

/* vpmm's segment events, through the adapter (vta_segment_sink_t: a C function pointer, called
 * under vpmm's pool lock), to the allocator. */
extern "C" {
static void vpmm_segment_sink(void *user, int device, vpmm_segment_event_t event, uintptr_t addr,
                              size_t size, vta_pool_id_t pool)
{
    static_cast<VpmmAllocator *>(user)->on_segment(device, event, addr, size, pool);
}
}

void VpmmAllocator::attach_segments(Device &d)
{
    vpmm_status_t st = vta_segments_attach(&d.vta, &vpmm_segment_sink, this);
    TORCH_CHECK(st == VPMM_SUCCESS,
                cat("vpmm: reporting the segments of a pool failed: ", status_text(st)));
}

std::shared_ptr<VpmmAllocator> g_allocator;

void vpmm_raw_delete(void *ptr)
{
    if (ptr != nullptr && g_allocator)
        g_allocator->raw_delete(ptr);
}

} // namespace

/* What the C functions Python calls ask (vpmm_backend.h; vpmm_torch_backend.cpp). */
namespace vpmm_torch
{

std::string install(vta_segments_mode_t mode)
{
    try {
        if (!g_allocator) {
            auto a = std::make_shared<VpmmAllocator>();
            a->set_segments_mode(mode);
            torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(a);
            c10::SetAllocator(c10::DeviceType::CUDA, a.get());
            g_allocator = a;
        }
        return "";
    } catch (const c10::Error &e) {
        return e.what_without_backtrace();
    }
}

vpmm_pool_t *pool_of(int device)
{
    return g_allocator ? g_allocator->pool_of(device) : nullptr;
}

vta_device_t *state_of(int device)
{
    return g_allocator ? g_allocator->vta_of(device) : nullptr;
}

vpmm_status_t trim(int device, size_t target, size_t *released)
{
    vpmm_pool_t *pool = pool_of(device);
    vpmm_status_t st = pool ? vpmm_trim(pool, target, released) : VPMM_ERROR_INVALID_ARGUMENT;
    report_tracker_error("vpmm.torch.trim()"); /* a C caller: nothing thrown */
    return st;
}

size_t trace_trackers()
{
    return g_allocator ? g_allocator->trackers() : 0;
}

bool snapshot_lists_handles()
{
    return g_allocator && g_allocator->snapshot_handles();
}

} // namespace vpmm_torch
