/*
 * vpmm_convert.h — the C adapter's types (torch_adapter.h) as PyTorch's, for vpmm's
 * CUDAAllocator (C++, included by vpmm_cuda_allocator.cpp only): a mempool id, the DeviceStats,
 * a snapshot segment as SegmentInfo with the stacks the history kept. Threads: free (the history
 * has its own lock).
 */
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <cstddef>
#include <cstdint>

extern "C" {
#include "torch_adapter.h"
}
#include "vpmm_history.h"

namespace vpmm_torch
{

inline vta_pool_id_t to_vta(c10::MempoolId_t id)
{
    return vta_pool_id_t{ id.first, id.second };
}

template <typename S> inline void copy_stat(S &out, const vta_stat_t &in)
{
    out.current = in.current;
    out.peak = in.peak;
    out.allocated = in.allocated;
    out.freed = in.freed;
}

template <typename A> inline void copy_array(A &out, const vta_stat_t *in)
{
    for (size_t t = 0; t < out.size(); t++)
        copy_stat(out[t], in[t]);
}

/* getDeviceStats: field for field (torch_adapter.c says how each is filled). */
inline c10::CachingDeviceAllocator::DeviceStats device_stats(const vta_stats_t &s)
{
    c10::CachingDeviceAllocator::DeviceStats out;
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

/*
 * A snapshot segment of the adapter (torch_adapter.h) as PyTorch's SegmentInfo, with the stacks
 * the history kept for its allocations. A continued part of an allocation (handle segments:
 * INTERFACE.md §10.2) is active, not an allocation of its own ("active_pending_free" for
 * PyTorch's tools), so that the "active_allocated" blocks are the allocations, each at its
 * data_ptr. registration_counter: newer ProcessGroupNCCLs sort a pool's segments by it (symmetric
 * windows are registered collectively, in one order on every rank) and refuse -1; the caller
 * gives the segment's place in address order, the same on ranks that allocate alike.
 */
inline c10::CachingDeviceAllocator::SegmentInfo segment_info(const vta_segment_t &g,
                                                             c10::DeviceIndex device,
                                                             int32_t registration_counter,
                                                             History &history)
{
    c10::CachingDeviceAllocator::SegmentInfo seg;
    seg.device = device;
    seg.registration_counter = registration_counter;
    seg.address = g.address;
    seg.total_size = g.total_size;
    seg.requested_size = g.requested_size;
    seg.allocated_size = g.allocated_size;
    seg.active_size = g.allocated_size;
    seg.stream = g.stream;
    seg.is_large = g.type != VTA_SMALL;
    seg.is_expandable = g.expandable != 0;
    seg.owner_private_pool_id = c10::MempoolId_t{ g.pool.first, g.pool.second };
    for (size_t b = 0; b < g.nblocks; b++) {
        c10::CachingDeviceAllocator::BlockInfo block;
        block.size = g.blocks[b].size;
        block.requested_size = g.blocks[b].requested_size;
        block.allocated = g.blocks[b].allocated != 0 && g.blocks[b].continued == 0;
        block.active = g.blocks[b].allocated != 0;
        if (block.allocated)
            block.context_when_allocated =
                history.context_of(reinterpret_cast<void *>(g.blocks[b].address));
        seg.blocks.push_back(block);
    }
    return seg;
}

} // namespace vpmm_torch
