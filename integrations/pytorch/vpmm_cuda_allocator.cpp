/*
 * vpmm_cuda_allocator.cpp — vpmm as PyTorch's complete CUDA allocator: a subclass of
 * c10::cuda::CUDACachingAllocator::CUDAAllocator (PyTorch 2.11), installed before CUDA is
 * initialised by vpmm_torch_backend_install() (integrations/pytorch/vpmm/torch.py calls it).
 *
 * A thin layer: each method turns PyTorch's types into the C adapter's (torch_adapter.h, tested
 * on the host backend) and back. What lives only here: PyTorch's routing filters (a capture or a
 * thread allocating into a mempool id: beginAllocateToPool's std::function, evaluated LIFO as the
 * native allocator does), DataPtrs and their one raw deleter, the OutOfMemoryError with vpmm's
 * report and the OOM observers, the CheckpointDelta's DataPtrs, and the CUDA runtime calls the
 * interface asks for (copies, peer access), and the allocators of MemPools created with their own
 * allocator (torch.cuda.MemPool(allocator), e.g. NCCL's for symmetric memory): allocations routed
 * to such a pool come from that allocator, one call each (vpmm cannot cache or remap memory it
 * does not own); the adapter counts them and shows them in snapshots. What PyTorch's interface
 * asks and vpmm cannot do is refused with a clear error naming it (IPC handles). Contracts and
 * call traces: INTERFACE.md.
 *
 * Threads: any. The device table is created once by init(); a device's pool at its first use,
 * under a mutex; the routing list of a device under its own mutex (never held while vpmm works),
 * with an atomic count so that a malloc with nothing routed takes no lock; the MemPools' own
 * allocators and their live pointers under ext_lock_.
 * No iostreams (INTERFACE.md §5).
 */
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

extern "C" {
#include "stats_json.h"
#include "torch_adapter.h"
}
#include "vpmm_history.h"

namespace
{

using namespace c10::cuda::CUDACachingAllocator;
using c10::MempoolId_t;
using c10::CachingDeviceAllocator::BlockInfo;
using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::SegmentInfo;

void vpmm_raw_delete(void *ptr);

vta_pool_id_t to_vta(MempoolId_t id)
{
    return vta_pool_id_t{ id.first, id.second };
}

std::string status_text(vpmm_status_t st)
{
    return std::string(vpmm_status_name(st)) + " (" + vpmm_strerror(st) + "): " + vpmm_last_error();
}

/* One CUDA device: its vpmm pool, the adapter's state over it, PyTorch's routing list. */
struct Device {
    vpmm_pool_t *pool = nullptr;
    vta_device_t vta{};
    std::mutex routes_lock;
    std::vector<std::pair<MempoolId_t, std::function<bool(cudaStream_t)>>> routes;
    std::atomic<size_t> nroutes{ 0 }; /* routes.size(), read without the lock */
    double fraction = 1.0;            /* setMemoryFraction's */
};

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
        if (devices_.empty())
            devices_.resize(static_cast<size_t>(device_count));
        initialized_ = true;
    }
    bool initialized() override
    {
        return initialized_;
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
    void raw_delete(void *ptr) override
    {
        if (ptr == nullptr)
            return;
        if (n_ext_.load(std::memory_order_relaxed) != 0 && free_external(ptr))
            return;
        for (size_t i = 0; i < devices_.size(); i++) {
            Device *d = devices_[i].get();
            if (d && d->pool) {
                vpmm_region_info_t info;
                if (vpmm_pointer_info(d->pool, ptr, &info) == VPMM_SUCCESS) {
                    history_.on_free(static_cast<c10::DeviceIndex>(i), ptr, info.size, info.stream);
                    vpmm_status_t st = vta_free_known(&d->vta, ptr, &info);
                    TORCH_CHECK(st == VPMM_SUCCESS, "vpmm: invalid device pointer: ", ptr, ": ",
                                status_text(st));
                    return;
                }
            }
        }
        TORCH_CHECK(false, "vpmm: invalid device pointer: ", ptr, " (not allocated by vpmm)");
    }
    void copy_data(void *dest, const void *src, std::size_t count) const override
    {
        C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
    }
    void recordStream(const c10::DataPtr &ptr, c10::cuda::CUDAStream stream) override
    {
        if (!ptr.get() || ptr.get_deleter() != &vpmm_raw_delete)
            return; /* foreign memory: nothing to order (as the native allocator) */
        Device &d = device(stream.device_index());
        vpmm_status_t st = vta_record_stream(&d.vta, ptr.get(), stream.stream());
        TORCH_CHECK(st == VPMM_SUCCESS, "vpmm: recordStream failed: ", status_text(st));
    }

    /* ---- memory pools (CUDA graphs, MemPool) ---- */
    void beginAllocateToPool(c10::DeviceIndex dev, MempoolId_t id,
                             std::function<bool(cudaStream_t)> filter) override
    {
        Device &d = device(dev);
        vpmm_status_t st = vta_pool_incref(&d.vta, to_vta(id)); /* a pool of either kind */
        TORCH_CHECK(st == VPMM_SUCCESS, "vpmm: beginAllocateToPool failed: ", status_text(st));
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
        vpmm_status_t st = vta_pool_decref(&d.vta, to_vta(id));
        TORCH_CHECK(st == VPMM_SUCCESS, "vpmm: releasePool of an unknown mempool id");
        if (vta_pool_use_count(&d.vta, to_vta(id)) == 0) {
            std::lock_guard<std::mutex> g(ext_lock_);
            pool_allocators_.erase({ dev, id }); /* its live allocations keep theirs */
        }
    }
    int getPoolUseCount(c10::DeviceIndex dev, MempoolId_t id) override
    {
        return static_cast<int>(vta_pool_use_count(&device(dev).vta, to_vta(id)));
    }
    void createOrIncrefPool(c10::DeviceIndex dev, MempoolId_t id,
                            std::shared_ptr<CUDAAllocator> allocator) override
    {
        Device &d = device(dev);
        if (allocator == nullptr) {
            vpmm_status_t st = vta_pool_incref(&d.vta, to_vta(id));
            TORCH_CHECK(st == VPMM_SUCCESS, "vpmm: createOrIncrefPool failed: ", status_text(st));
            return;
        }
        /* A pool served by its own allocator (an id of one kind only). */
        std::lock_guard<std::mutex> g(ext_lock_);
        vpmm_status_t st = vta_pool_incref_external(&d.vta, to_vta(id));
        TORCH_CHECK(st == VPMM_SUCCESS, "vpmm: createOrIncrefPool failed: ", status_text(st),
                    st == VPMM_ERROR_INVALID_ARGUMENT
                        ? " (the mempool id is already a pool without an allocator)"
                        : "");
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
        int r = vta_pool_live_matches(&device(dev).vta, to_vta(id), ptrs.data(), ptrs.size());
        TORCH_CHECK(r >= 0, "Could not find pool of id");
        return r == 1;
    }
    std::shared_ptr<AllocatorState> getCheckpointState(c10::DeviceIndex dev,
                                                       MempoolId_t id) override
    {
        auto state = std::make_shared<VpmmState>();
        vpmm_status_t st = vta_checkpoint_take(&device(dev).vta, to_vta(id), &state->ck);
        TORCH_CHECK(st == VPMM_SUCCESS, "vpmm: getCheckpointState failed: ", status_text(st));
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
        TORCH_CHECK(st == VPMM_SUCCESS, "vpmm: setCheckpointPoolState failed: ", status_text(st));
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
    DeviceStats getDeviceStats(c10::DeviceIndex dev) override
    {
        vta_stats_t s;
        vta_get_stats(&device(dev).vta, &s);
        DeviceStats out;
        copy_array(out.allocation, s.allocation);
        copy_array(out.segment, s.segment);
        copy_array(out.active, s.active);
        copy_array(out.inactive_split, s.inactive_split);
        copy_array(out.allocated_bytes, s.allocated_bytes);
        copy_array(out.reserved_bytes, s.reserved_bytes);
        copy_array(out.active_bytes, s.active_bytes);
        copy_array(out.inactive_split_bytes, s.inactive_split_bytes);
        copy_array(out.requested_bytes, s.requested_bytes);
        out.num_alloc_retries = s.num_alloc_retries;
        out.num_ooms = s.num_ooms;
        copy_stat(out.oversize_allocations, s.oversize_allocations);
        copy_stat(out.oversize_segments, s.oversize_segments);
        out.num_sync_all_streams = s.num_sync_all_streams;
        out.num_device_alloc = s.num_device_alloc;
        out.num_device_free = s.num_device_free;
        out.max_split_size = s.max_split_size;
        return out;
    }
    void resetAccumulatedStats(c10::DeviceIndex dev) override
    {
        vta_reset_accumulated(&device(dev).vta);
    }
    void resetPeakStats(c10::DeviceIndex dev) override
    {
        vta_reset_peak(&device(dev).vta);
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
        for (size_t i = 0; i < devices_.size(); i++) {
            Device *d = devices_[i].get();
            if (!d || !d->pool)
                continue;
            if (d->nroutes.load(std::memory_order_acquire) == 0) {
                c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(i));
                C10_CUDA_CHECK(cudaDeviceSynchronize());
            }
            (void)vta_empty_cache(&d->vta);
        }
    }
    void cacheInfo(c10::DeviceIndex dev, size_t *largestBlock) override
    {
        *largestBlock = vta_largest_free(&device(dev).vta);
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
        for (auto &d : devices_) {
            vpmm_region_info_t info;
            if (d && d->pool && vpmm_pointer_info(d->pool, ptr, &info) == VPMM_SUCCESS) {
                if (size)
                    *size = info.size;
                return reinterpret_cast<void *>(info.addr);
            }
        }
        TORCH_CHECK(false, "vpmm: getBaseAllocation: ", ptr, " is not vpmm memory");
    }
    SnapshotInfo snapshot(MempoolId_t id, bool include_traces) override
    {
        SnapshotInfo info;
        const bool all = id.first == 0 && id.second == 0;
        info.device_traces.resize(devices_.size());
        if (include_traces)
            for (auto &e : history_.entries())
                if (e.device_ >= 0 && static_cast<size_t>(e.device_) < devices_.size())
                    info.device_traces[static_cast<size_t>(e.device_)].push_back(std::move(e));
        for (size_t i = 0; i < devices_.size(); i++) {
            if (!devices_[i] || !devices_[i]->pool)
                continue;
            vta_segment_t *segs = nullptr;
            size_t n = 0;
            vpmm_status_t st = vta_snapshot(&devices_[i]->vta, to_vta(id), all, &segs, &n);
            TORCH_CHECK(st == VPMM_SUCCESS, "vpmm: snapshot failed: ", status_text(st));
            for (size_t k = 0; k < n; k++) {
                SegmentInfo seg;
                seg.device = static_cast<c10::DeviceIndex>(i);
                seg.address = segs[k].address;
                seg.total_size = segs[k].total_size;
                seg.requested_size = segs[k].requested_size;
                seg.allocated_size = segs[k].allocated_size;
                seg.active_size = segs[k].allocated_size;
                seg.stream = segs[k].stream;
                seg.is_large = true;
                seg.owner_private_pool_id = MempoolId_t{ segs[k].pool.first, segs[k].pool.second };
                for (size_t b = 0; b < segs[k].nblocks; b++) {
                    BlockInfo block;
                    block.size = segs[k].blocks[b].size;
                    block.requested_size = segs[k].blocks[b].requested_size;
                    block.allocated = segs[k].blocks[b].allocated != 0;
                    block.active = block.allocated;
                    if (block.allocated)
                        block.context_when_allocated = history_.context_of(
                            reinterpret_cast<void *>(segs[k].blocks[b].address));
                    seg.blocks.push_back(block);
                }
                info.segments.push_back(std::move(seg));
            }
            vta_snapshot_free(segs, n);
        }
        return info;
    }

    /* ---- what vpmm does not do, or does as the native allocator does ---- */
    double getMemoryFraction(c10::DeviceIndex dev) override
    {
        return device(dev).fraction;
    }
    /* The fraction of the device's total memory vpmm may map (vpmm_set_max_bytes). */
    void setMemoryFraction(double fraction, c10::DeviceIndex dev) override
    {
        TORCH_CHECK(fraction >= 0.0 && fraction <= 1.0, "invalid fraction:", fraction,
                    ". Please set within [0, 1].");
        Device &d = device(dev);
        size_t cap = 0;
        if (fraction < 1.0) {
            c10::cuda::CUDAGuard guard(dev);
            size_t free_b = 0, total_b = 0;
            C10_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
            cap = static_cast<size_t>(fraction * static_cast<double>(total_b));
        }
        vpmm_status_t st = vpmm_set_max_bytes(d.pool, cap);
        TORCH_CHECK(st == VPMM_SUCCESS, "vpmm: memory fraction ", fraction,
                    " is too small for vpmm (less than one page): ", status_text(st));
        d.fraction = fraction;
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
    ShareableHandle shareIpcHandle(void *) override
    {
        TORCH_CHECK(false,
                    "vpmm: CUDA IPC of vpmm memory is not supported yet (sharing tensors between "
                    "processes needs cuMemExportToShareableHandle)");
    }
    std::shared_ptr<void> getIpcDevPtr(std::string) override
    {
        TORCH_CHECK(false, "vpmm: CUDA IPC of vpmm memory is not supported yet");
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
    }
    void attachOutOfMemoryObserver(OutOfMemoryObserver observer) override
    {
        std::lock_guard<std::mutex> g(observers_lock_);
        observers_.push_back(std::move(observer));
    }
    void attachAllocatorTraceTracker(AllocatorTraceTracker) override
    {
        /* PyTorch-internal (its memory profiler's); vpmm keeps no trace of that kind. */
    }
    void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override
    {
        c10::cuda::CUDAGuard guard(dev);
        cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
        if (err == cudaErrorPeerAccessAlreadyEnabled) {
            (void)cudaGetLastError(); /* clear it */
            return;
        }
        C10_CUDA_CHECK(err);
    }
    cudaError_t memcpyAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
                            cudaStream_t stream, bool p2p_enabled) override
    {
        if (p2p_enabled || dstDevice == srcDevice)
            return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
        return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
    }

    /* For the Python side (vpmm_torch_backend_*): the device's pool, or nullptr. */
    vpmm_pool_t *pool_of(int dev)
    {
        if (dev < 0 || static_cast<size_t>(dev) >= devices_.size() || !devices_[dev])
            return nullptr;
        return devices_[dev]->pool;
    }

  private:
    template <typename A> static void copy_array(A &out, const vta_stat_t *in)
    {
        for (size_t t = 0; t < out.size(); t++)
            copy_stat(out[t], in[t]);
    }
    template <typename S> static void copy_stat(S &out, const vta_stat_t &in)
    {
        out.current = in.current;
        out.peak = in.peak;
        out.allocated = in.allocated;
        out.freed = in.freed;
    }

    /* The device's state, its pool created at its first use. */
    Device &device(c10::DeviceIndex dev)
    {
        TORCH_CHECK(initialized_ && dev >= 0 && static_cast<size_t>(dev) < devices_.size(),
                    "vpmm: device ", static_cast<int>(dev), " is out of range or not initialised");
        std::unique_ptr<Device> &slot = devices_[static_cast<size_t>(dev)];
        std::lock_guard<std::mutex> g(create_lock_);
        if (!slot) {
            auto d = std::make_unique<Device>();
            vpmm_config_t cfg;
            vpmm_config_init(&cfg); /* the CUDA backend: vpmm's default */
            cfg.device = dev;
            vpmm_status_t st = vpmm_pool_create(&cfg, &d->pool);
            TORCH_CHECK(st == VPMM_SUCCESS, "vpmm: creating the pool of device ",
                        static_cast<int>(dev), " failed: ", status_text(st));
            TORCH_CHECK(vta_device_init(&d->vta, d->pool, dev) == 0, "vpmm: out of host memory");
            slot = std::move(d);
        }
        return *slot;
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
            std::string msg = "CUDA out of memory. Tried to allocate " + std::to_string(n) +
                              " bytes on device " + std::to_string(dev) +
                              ": the MemPool's own "
                              "allocator (" +
                              a->name() + ") returned no memory";
            TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
        }
        std::lock_guard<std::mutex> g(ext_lock_);
        vpmm_status_t st = vta_external_add(&d.vta, to_vta(id), p, n, stream);
        if (st != VPMM_SUCCESS) {
            a->raw_delete(p);
            TORCH_CHECK(false, "vpmm: counting a MemPool allocation failed: ", status_text(st));
        }
        ext_ptrs_.emplace(p, External{ std::move(a), dev, n, stream });
        n_ext_.fetch_add(1, std::memory_order_relaxed);
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
        x.allocator->raw_delete(ptr);
        return true;
    }

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
        if (st == VPMM_SUCCESS) {
            history_.on_alloc(dev, p, n, stream, id);
            return p;
        }
        if (st == VPMM_ERROR_OUT_OF_MEMORY) {
            char msg[2048];
            vta_oom_message(&d.vta, n, msg, sizeof msg);
            size_t free_b = 0, total_b = 0;
            (void)cudaMemGetInfo(&free_b, &total_b);
            history_.on_oom(dev, n, free_b, stream);
            std::vector<OutOfMemoryObserver> obs;
            {
                std::lock_guard<std::mutex> g(observers_lock_);
                obs = observers_;
            }
            for (auto &o : obs)
                o(dev, n, total_b, free_b);
            TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
        }
        TORCH_CHECK(false, "vpmm: allocating ", n, " bytes on device ", static_cast<int>(dev),
                    " failed: ", status_text(st));
    }

    std::mutex create_lock_;
    std::vector<std::unique_ptr<Device>> devices_;
    bool initialized_ = false;
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
    };
    std::mutex ext_lock_;
    std::map<std::pair<c10::DeviceIndex, MempoolId_t>, std::shared_ptr<CUDAAllocator>>
        pool_allocators_;
    std::unordered_map<void *, External> ext_ptrs_;
    std::atomic<size_t> n_ext_{ 0 };
    vpmm_torch::History history_;
};

std::shared_ptr<VpmmAllocator> g_allocator;

void vpmm_raw_delete(void *ptr)
{
    if (ptr != nullptr && g_allocator)
        g_allocator->raw_delete(ptr);
}

} // namespace

extern "C" {

/*
 * Makes vpmm PyTorch's CUDA allocator: 0, or -1 with the reason in err (CUDA already initialised:
 * PyTorch refuses to swap an allocator that has handed memory out).
 */
__attribute__((visibility("default"))) int vpmm_torch_backend_install(char *err, size_t len)
{
    try {
        if (!g_allocator) {
            auto a = std::make_shared<VpmmAllocator>();
            torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(a);
            c10::SetAllocator(c10::DeviceType::CUDA, a.get());
            g_allocator = a;
        }
        return 0;
    } catch (const c10::Error &e) {
        std::snprintf(err, len, "%s", e.what_without_backtrace());
        return -1;
    }
}

/* vpmm_trim of device's pool (0: every free page); the bytes given back, or -1 (no pool). */
__attribute__((visibility("default"))) long long vpmm_torch_backend_trim(int device, size_t target)
{
    vpmm_pool_t *pool = g_allocator ? g_allocator->pool_of(device) : nullptr;
    size_t released = 0;
    if (pool == nullptr)
        return -1;
    return vpmm_trim(pool, target, &released) == VPMM_SUCCESS ? static_cast<long long>(released)
                                                              : -1;
}

/* vpmm_pool_dump of device's pool to path (stderr when NULL); -1 without a pool or file. */
__attribute__((visibility("default"))) int vpmm_torch_backend_dump(int device, const char *path)
{
    vpmm_pool_t *pool = g_allocator ? g_allocator->pool_of(device) : nullptr;
    if (pool == nullptr)
        return -1;
    FILE *f = path && *path ? std::fopen(path, "w") : stderr;
    if (f == nullptr)
        return -1;
    int st = vpmm_pool_dump(pool, f);
    if (f != stderr)
        std::fclose(f);
    return st;
}

/* vpmm_pool_check of device's pool: the violated invariants (0), or -1 without a pool. */
__attribute__((visibility("default"))) long vpmm_torch_backend_check(int device)
{
    vpmm_pool_t *pool = g_allocator ? g_allocator->pool_of(device) : nullptr;
    return pool ? static_cast<long>(vpmm_pool_check(pool, stderr)) : -1;
}

/* vpmm_get_stats of device's pool as JSON (stats_json.h): the length needed, or -1 without a
 * pool. */
__attribute__((visibility("default"))) long vpmm_torch_backend_stats_json(int device, char *buf,
                                                                          size_t cap)
{
    vpmm_pool_t *pool = g_allocator ? g_allocator->pool_of(device) : nullptr;
    vpmm_stats_t s;
    if (pool == nullptr || vpmm_get_stats(pool, &s) != VPMM_SUCCESS)
        return -1;
    return static_cast<long>(
        vpmm_stats_json(&s, device, vpmm_pool_backend_name(pool), nullptr, buf, cap));
}

} // extern "C"
