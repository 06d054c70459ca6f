/*
 * vpmm_trackers.h — PyTorch's allocator trace trackers (attachAllocatorTraceTracker) for vpmm's
 * CUDAAllocator (C++, included by vpmm_cuda_allocator.cpp only): the list of trackers and the
 * call of each with a TraceEntry (SEGMENT_ALLOC / SEGMENT_FREE: ProcessGroupNCCL registers each
 * segment with NCCL; INTERFACE.md §10), what becomes of a tracker's exception, and the wait for
 * the device before a deregistration.
 *
 * The segment events come from vpmm's segment hook, which runs on the thread that called vpmm,
 * under the pool's lock, inside C code: an exception must not unwind there. So call() keeps the
 * first exception a tracker throws (per thread), and the allocator's entry point, once its vpmm
 * call has returned, throws it where its caller may take an exception (throw_error: an
 * allocation, emptyCache), or writes it to stderr where nothing may be thrown (report_error: a
 * deleter, a destructor).
 *
 * Threads: any. The list is replaced whole on attach, under lock_, and read by copying its
 * pointer under lock_: a leaf lock (never held across a call), taken under vpmm's pool lock. The
 * trackers run with no lock of this file held; they must not call the allocator (the native
 * allocator's rule too: they run under its lock).
 */
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace vpmm_torch
{

using c10::CachingDeviceAllocator::TraceEntry;
/* PyTorch's AllocatorTraceTracker (the same type, whichever header declares the alias). */
using Tracker = std::function<void(const TraceEntry &)>;

/* The first exception a tracker threw during this thread's current call into vpmm. */
inline thread_local std::exception_ptr t_tracker_error;

/* Keeps e unless an exception is kept already (the first one is what the caller sees). */
inline void keep_tracker_error(std::exception_ptr e) noexcept
{
    if (!t_tracker_error)
        t_tracker_error = std::move(e);
}

/* Whether a tracker's exception waits on this thread. */
inline bool tracker_error_pending() noexcept
{
    return static_cast<bool>(t_tracker_error);
}

/* The kept exception (null if none), no longer kept. */
inline std::exception_ptr take_tracker_error() noexcept
{
    std::exception_ptr e = std::move(t_tracker_error);
    t_tracker_error = nullptr;
    return e;
}

/* Throws the kept exception, if any (where the caller may throw: native lets it propagate). */
inline void throw_tracker_error()
{
    if (t_tracker_error) {
        std::exception_ptr e = std::move(t_tracker_error);
        t_tracker_error = nullptr;
        std::rethrow_exception(e);
    }
}

/* Writes the kept exception, if any, to stderr (a deleter, a destructor: nothing thrown). */
inline void report_tracker_error(const char *where) noexcept
{
    if (!t_tracker_error)
        return;
    std::exception_ptr e = std::move(t_tracker_error);
    t_tracker_error = nullptr;
    try {
        std::rethrow_exception(e);
    } catch (const c10::Error &x) {
        std::fprintf(stderr, "vpmm: an allocator trace tracker failed during %s: %s\n", where,
                     x.what_without_backtrace());
    } catch (const std::exception &x) {
        std::fprintf(stderr, "vpmm: an allocator trace tracker failed during %s: %s\n", where,
                     x.what());
    } catch (...) {
        std::fprintf(stderr, "vpmm: an allocator trace tracker failed during %s\n", where);
    }
}

/*
 * Before a segment is deregistered: device's work is done. A remap may move free pages whose last
 * use is still running (vpmm orders the new user after it on the GPU), and NCCL's deregistration
 * unmaps the peers' imports of the handle at once: a collective still using it must be over, as
 * the native allocator's cudaFree waits for the device after its SEGMENT_FREE. The caller makes
 * sure nothing is routed to a mempool id on that device (a capture may be under way: a
 * synchronisation would break it; a graph pool's growth moves only pages whose work is done).
 * Under vpmm's pool lock, which vpmm itself holds across synchronisations.
 */
inline void wait_for_device(int device) noexcept
{
    int prev = -1;
    if (cudaGetDevice(&prev) == cudaSuccess && prev != device)
        (void)cudaSetDevice(device);
    if (cudaDeviceSynchronize() != cudaSuccess)
        (void)cudaGetLastError(); /* a sticky error shows at the caller's next CUDA call */
    if (prev >= 0 && prev != device)
        (void)cudaSetDevice(prev);
}

class Trackers
{
  public:
    /* One more tracker, for the life of the process (as the native allocator keeps them). */
    void attach(Tracker tracker)
    {
        std::lock_guard<std::mutex> g(lock_);
        auto next = list_ ? std::make_shared<std::vector<Tracker>>(*list_)
                          : std::make_shared<std::vector<Tracker>>();
        next->push_back(std::move(tracker));
        list_ = std::move(next);
        count_.store(list_->size(), std::memory_order_release);
    }

    /* How many are attached (no lock). */
    size_t count() const noexcept
    {
        return count_.load(std::memory_order_acquire);
    }

    /* Calls every tracker with te; the first exception is kept for the caller's entry point. */
    void call(const TraceEntry &te) noexcept
    {
        if (count() == 0)
            return;
        std::shared_ptr<const std::vector<Tracker>> list;
        {
            std::lock_guard<std::mutex> g(lock_);
            list = list_;
        }
        if (!list)
            return;
        for (const auto &t : *list) {
            try {
                t(te);
            } catch (...) {
                keep_tracker_error(std::current_exception());
            }
        }
    }

  private:
    std::mutex lock_;
    std::shared_ptr<const std::vector<Tracker>> list_;
    std::atomic<size_t> count_{ 0 };
};

} // namespace vpmm_torch
