/*
 * vpmm_history.h — the allocation history behind torch.cuda.memory._record_memory_history (C++,
 * included by vpmm_cuda_allocator.cpp only): what PyTorch's memory visualiser reads from
 * _snapshot()["device_traces"] and from each block's "frames".
 *
 * One ring of PyTorch TraceEntry records for all devices (alloc, free_requested, free_completed,
 * segment_alloc, segment_free, oom; at most max_entries, the oldest dropped first; the snapshot
 * sorts them by device) and, for each allocation made while recording, its mempool id and — with
 * RecordContext STATE or more — the stack PyTorch's context recorder gathered (the snapshot
 * attaches it to its block; kept after the recording stops, until the allocation is freed, as the
 * native allocator does). What it keeps is PyTorch's own types, which is why it lives on the C++
 * side; the facts (addresses, sizes, streams, pools) all come from vpmm.
 *
 * vpmm frees a block when PyTorch frees it, or — after Tensor.record_stream — defers it until the
 * recorded streams' work is done (docs/ALGORITHM.md, "uses"); the history writes free_completed at
 * the free either way, as vpmm tells no one when a deferred block becomes reusable.
 *
 * Threads: any; one mutex. The context recorder (Python's stack gatherer, which takes
 * the GIL itself) runs before the mutex is taken, never under it.
 */
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/ApproximateClock.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace vpmm_torch
{

using c10::CachingDeviceAllocator::CreateContextFn;
using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::TraceEntry;

class History
{
  public:
    /* recordHistory's arguments, as the native allocator takes them. */
    void configure(bool enabled, CreateContextFn recorder, size_t max_entries, RecordContext when,
                   bool clear, const std::vector<std::string> &skip_actions)
    {
        std::lock_guard<std::mutex> g(lock_);
        enabled_ = enabled;
        recorder_ = enabled ? recorder : nullptr;
        when_ = enabled ? when : RecordContext::NEVER;
        max_entries_ = std::max<size_t>(max_entries, 1);
        skip_.clear();
        for (const auto &name : skip_actions)
            skip_.push_back(c10::CachingDeviceAllocator::parseTraceEntryAction(name));
        std::vector<TraceEntry> kept = clear || !enabled ? std::vector<TraceEntry>() : linear();
        if (kept.size() > max_entries_) /* a smaller ring keeps the newest entries */
            kept.erase(kept.begin(), kept.end() - static_cast<std::ptrdiff_t>(max_entries_));
        ring_ = std::move(kept);
        next_ = 0;
        if (!enabled) {
            /* As the native allocator's blocks keep their stacks: graph trees turn the recording
             * off after recording a graph and still name the allocations it left behind. */
            for (auto it = live_.begin(); it != live_.end();)
                it = it->second.context ? std::next(it) : live_.erase(it);
        }
        tracking_ = enabled || !live_.empty();
    }

    /* An allocation PyTorch got: its trace entry and, with STATE or more, its stack. */
    void on_alloc(c10::DeviceIndex dev, void *ptr, size_t size, void *stream, c10::MempoolId_t pool)
    {
        if (!enabled_)
            return;
        std::shared_ptr<c10::GatheredContext> ctx = gather(RecordContext::STATE);
        std::lock_guard<std::mutex> g(lock_);
        live_[ptr] = Live{ when_ >= RecordContext::STATE ? ctx : nullptr, pool };
        tracking_ = true;
        add(TraceEntry(TraceEntry::ALLOC, dev, reinterpret_cast<size_t>(ptr), size, stream, pool,
                       c10::getApproximateTime(), when_ >= RecordContext::ALLOC ? ctx : nullptr));
    }

    /* A free PyTorch asked for (size and stream as vpmm knows them; the pool as recorded at the
     * allocation, {0,0} for one made before the recording began). */
    void on_free(c10::DeviceIndex dev, void *ptr, size_t size, void *stream)
    {
        if (!tracking_)
            return;
        std::shared_ptr<c10::GatheredContext> ctx = gather(RecordContext::ALL);
        std::lock_guard<std::mutex> g(lock_);
        c10::MempoolId_t pool{ 0, 0 };
        auto it = live_.find(ptr);
        if (it != live_.end()) {
            pool = it->second.pool;
            live_.erase(it);
        }
        tracking_ = enabled_ || !live_.empty();
        if (!enabled_)
            return; /* only forgetting a stack kept from an earlier recording */
        auto addr = reinterpret_cast<size_t>(ptr);
        auto t = c10::getApproximateTime();
        add(TraceEntry(TraceEntry::FREE_REQUESTED, dev, addr, size, stream, pool, t, ctx));
        add(TraceEntry(TraceEntry::FREE_COMPLETED, dev, addr, size, stream, pool, t, ctx));
    }

    /* A segment that appeared or is about to go (SEGMENT_ALLOC / SEGMENT_FREE), as the trackers
     * hear it. Called under vpmm's pool lock: it takes only lock_, and gathers no stack (the
     * recorder takes Python's GIL, which a thread waiting for vpmm may hold). */
    void on_segment(const TraceEntry &e)
    {
        if (!enabled_)
            return;
        std::lock_guard<std::mutex> g(lock_);
        add(TraceEntry(e));
    }

    /* An OutOfMemoryError: addr is the device's free memory, as PyTorch records it. */
    void on_oom(c10::DeviceIndex dev, size_t size, size_t device_free, void *stream)
    {
        if (!enabled_)
            return;
        std::lock_guard<std::mutex> g(lock_);
        add(TraceEntry(TraceEntry::OOM, dev, device_free, size, stream, c10::MempoolId_t{ 0, 0 },
                       c10::getApproximateTime()));
    }

    bool is_enabled() const
    {
        return enabled_;
    }

    /* The entries, oldest first. */
    std::vector<TraceEntry> entries()
    {
        std::lock_guard<std::mutex> g(lock_);
        return linear();
    }

    /* The stack recorded for a live allocation, or nullptr. */
    std::shared_ptr<c10::GatheredContext> context_of(void *ptr)
    {
        std::lock_guard<std::mutex> g(lock_);
        auto it = live_.find(ptr);
        return it == live_.end() ? nullptr : it->second.context;
    }

  private:
    /* The caller's stack, if the recording asks for it at this point (taken outside lock_). */
    std::shared_ptr<c10::GatheredContext> gather(RecordContext needed)
    {
        CreateContextFn fn = nullptr;
        {
            std::lock_guard<std::mutex> g(lock_);
            if (when_ >= needed)
                fn = recorder_;
        }
        return fn != nullptr ? fn() : nullptr;
    }

    std::vector<TraceEntry> linear() const
    { /* under lock_: oldest first */
        std::vector<TraceEntry> out;
        out.reserve(ring_.size());
        for (size_t i = 0; i < ring_.size(); i++)
            out.push_back(ring_[(next_ + i) % ring_.size()]);
        return out;
    }

    void add(TraceEntry &&e)
    { /* under lock_ */
        if (std::find(skip_.begin(), skip_.end(), e.action_) != skip_.end())
            return;
        if (ring_.size() < max_entries_) {
            ring_.push_back(std::move(e));
            return;
        }
        ring_[next_] = std::move(e);
        next_ = (next_ + 1) % max_entries_;
    }

    std::mutex lock_;
    std::atomic<bool> enabled_{ false };  /* read without lock_: the fast path when off */
    std::atomic<bool> tracking_{ false }; /* enabled_, or stacks kept for live allocations */
    CreateContextFn recorder_ = nullptr;
    RecordContext when_ = RecordContext::NEVER;
    size_t max_entries_ = 1;
    std::vector<TraceEntry::Action> skip_;
    std::vector<TraceEntry> ring_; /* full: next_ is the oldest entry */
    size_t next_ = 0;
    struct Live {
        std::shared_ptr<c10::GatheredContext> context; /* with STATE or more */
        c10::MempoolId_t pool;
    };
    std::unordered_map<void *, Live> live_; /* the allocations made while recording */
};

} // namespace vpmm_torch
