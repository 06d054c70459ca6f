/*
 * vpmm_backend.h — what the C functions the Python package calls (vpmm_torch_backend.cpp: the
 * library's exported vpmm_torch_backend_*) ask of the allocator (vpmm_cuda_allocator.cpp). C++
 * without PyTorch's headers. Threads: any.
 */
#pragma once

#include <cstddef>
#include <string>

extern "C" {
#include "torch_adapter.h"
}

namespace vpmm_torch
{

/* Makes vpmm PyTorch's CUDA allocator (once; later calls do nothing), its snapshots' segments as
 * mode says: "" or why not (CUDA already initialised: PyTorch refuses to swap an allocator that
 * has handed memory out). */
std::string install(vta_segments_mode_t mode);

/* The device's pool and adapter state; nullptr before install or while the device has no pool. */
vpmm_pool_t *pool_of(int device);
vta_device_t *state_of(int device);

/* vpmm_trim of the device's pool (a tracker's failure reported on stderr): vpmm's status,
 * INVALID_ARGUMENT without a pool. */
vpmm_status_t trim(int device, size_t target, size_t *released);

/* The allocator trace trackers attached; whether snapshot() lists the physical handles. */
size_t trace_trackers();
bool snapshot_lists_handles();

} // namespace vpmm_torch
