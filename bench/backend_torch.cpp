/*
 * backend_torch.cpp — vpmm-replay's PyTorch anchors: PyTorch's own CUDA caching allocator
 * (c10::cuda::CUDACachingAllocator, "native"), driven the way PyTorch's C++ callers drive it,
 * raw_alloc_with_stream and raw_delete, so that it is timed by the same timer in the same run as
 * vpmm and the CUDA pools (backends.h). C++17 against the installed PyTorch's headers (2.11),
 * linked with libc10 and libc10_cuda only; built where PyTorch is found (bench/CMakeLists.txt).
 *
 * One CUDA runtime in the process, PyTorch's: libc10_cuda.so needs the shared libcudart.so.N, so
 * this vpmm-replay links that same file instead of cudart_static, which would be a second runtime
 * with its own state (streams, current device, last error) next to PyTorch's, and every stream
 * handed to PyTorch would be the other runtime's object. Hence the streams of backends.c
 * (cudaStreamCreateWithFlags, or NULL for the legacy default stream) are objects of PyTorch's
 * runtime, and are passed as they are, as are backends.c's context creation, --verify copies and
 * device synchronisation (bench/CMakeLists.txt: how the loader keeps one runtime).
 * Setup (torch_backend_open): a C++ program linking only c10 does not run torch's lazy CUDA init,
 * so this file calls the allocator's init(device_count()) itself, as that init does. Expandable
 * segments are PyTorch's allocator setting `expandable_segments:True`, read from the environment
 * once, when the allocator first asks for its settings: open sets PYTORCH_CUDA_ALLOC_CONF before
 * its first c10 call, then checks that the setting took (AcceleratorAllocatorConfig). A user's own
 * PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF or PYTORCH_NO_CUDA_MEMORY_CACHING is refused, not
 * merged: an anchor is PyTorch's defaults, or those plus expandable segments, and nothing else.
 * The allocator must be the native one (its name() is "native"). Statistics are the allocator's
 * own (getDeviceStats, aggregate over its small and large pools): live = allocated bytes,
 * device = reserved bytes, peak = the reserved bytes' high-water mark, the counterpart of
 * cudaMallocAsync's reserved-memory high-water mark.
 * Threads: one (backends.h). No C++ exception leaves this file: each entry point catches
 * everything, c10::OutOfMemoryError as "out of memory", and turns it into a status and a message.
 */
#include <c10/core/Allocator.h>
#include <c10/core/AllocatorConfig.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "backend_torch.h"

struct torch_backend {
    c10::DeviceIndex device;
    const char *name;
};

namespace
{

namespace cca = c10::cuda::CUDACachingAllocator;

enum { TB_OK = 0, TB_OOM = 1, TB_ERROR = -1 }; /* backends.h's backend_rc_t */

constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

/* What configures PyTorch's allocator from the environment: the settings, under their name since
 * 2.9 and the older one, and the switch that turns caching off (then every malloc is cudaMalloc).
 */
const char *const kAllocatorEnv[] = { "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF",
                                      "PYTORCH_NO_CUDA_MEMORY_CACHING" };

void put_error(char *err, size_t errlen, const char *what, const char *msg)
{
    if (err != nullptr && errlen > 0)
        std::snprintf(err, errlen, "%s: %s", what, msg);
}

/* Runs f, turning whatever it throws into a status and a message: out of memory (PyTorch's
 * OutOfMemoryError, after it has freed its cache and retried) is TB_OOM, anything else TB_ERROR. */
template <class F> int guarded(const char *what, char *err, size_t errlen, F &&f)
{
    try {
        f();
        return TB_OK;
    } catch (const c10::OutOfMemoryError &e) {
        put_error(err, errlen, what, e.what_without_backtrace());
        return TB_OOM;
    } catch (const c10::Error &e) {
        put_error(err, errlen, what, e.what_without_backtrace());
    } catch (const std::exception &e) {
        put_error(err, errlen, what, e.what());
    } catch (...) {
        put_error(err, errlen, what, "unknown C++ exception");
    }
    return TB_ERROR;
}

/* Refuses an environment that configures the allocator (see the file's first paragraph). */
bool environment_clean(char *err, size_t errlen)
{
    for (const char *name : kAllocatorEnv) {
        const char *value = std::getenv(name);
        if (value != nullptr) {
            std::snprintf(err, errlen,
                          "%s is set (\"%s\"): the PyTorch anchors run PyTorch's defaults (torch) "
                          "or those plus expandable segments (torch-expandable) and set "
                          "PYTORCH_CUDA_ALLOC_CONF themselves; unset it",
                          name, value);
            return false;
        }
    }
    return true;
}

} // namespace

extern "C" int torch_backend_open(int expandable, torch_backend_t **out, char *err, size_t errlen)
{
    auto *t =
        new (std::nothrow) torch_backend{ 0, expandable ? "torch/expandable" : "torch/native" };
    if (t == nullptr) {
        std::snprintf(err, errlen, "out of host memory");
        return TB_ERROR;
    }
    if (!environment_clean(err, errlen)) {
        delete t;
        return TB_ERROR;
    }
    /* Before any c10 call: PyTorch reads its settings once, at the allocator's first look. */
    if (expandable && setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 1) != 0) {
        std::snprintf(err, errlen, "setenv(PYTORCH_CUDA_ALLOC_CONF) failed");
        delete t;
        return TB_ERROR;
    }
    std::string problem;
    int rc = guarded("PyTorch allocator setup", err, errlen, [&] {
        cca::CUDAAllocator *a = cca::get();
        if (a == nullptr || a->name() != "native") {
            problem = "PyTorch's CUDA allocator is " +
                      (a == nullptr ? std::string("missing") : "'" + a->name() + "'") +
                      ", not its native caching allocator";
            return;
        }
        c10::DeviceIndex n = c10::cuda::device_count();
        if (n <= 0) {
            problem = "PyTorch sees no CUDA device";
            return;
        }
        /* What torch's lazy CUDA init does, which a program on c10 alone never runs. */
        if (!a->initialized())
            cca::init(n);
        t->device = c10::cuda::current_device();
        /* The setting as the allocator will read it: a mismatch means PyTorch parsed its
         * settings before this function ran, and the row would carry the wrong name. */
        bool on = c10::CachingAllocator::AcceleratorAllocatorConfig::use_expandable_segments();
        if (on != (expandable != 0))
            problem = expandable ? "expandable segments did not take: PyTorch had read its "
                                   "allocator settings before PYTORCH_CUDA_ALLOC_CONF was set"
                                 : "PyTorch's allocator settings have expandable segments on";
    });
    if (rc == TB_OK && !problem.empty()) {
        std::snprintf(err, errlen, "%s", problem.c_str());
        rc = TB_ERROR;
    }
    if (rc != TB_OK) {
        delete t;
        return TB_ERROR; /* out of memory while setting up is no replay's failed malloc */
    }
    *out = t;
    return TB_OK;
}

extern "C" const char *torch_backend_name(const torch_backend_t *t)
{
    return t->name;
}

extern "C" int torch_backend_malloc(torch_backend_t *t, size_t size, void *stream, void **out,
                                    char *err, size_t errlen)
{
    (void)t;
    return guarded("raw_alloc_with_stream", err, errlen, [&] {
        *out = cca::raw_alloc_with_stream(size, static_cast<cudaStream_t>(stream));
    });
}

extern "C" int torch_backend_free(torch_backend_t *t, void *p, char *err, size_t errlen)
{
    (void)t;
    int rc = guarded("raw_delete", err, errlen, [&] { cca::raw_delete(p); });
    return rc == TB_OOM ? TB_ERROR : rc; /* a free has no "out of memory" to report */
}

extern "C" void torch_backend_sample(torch_backend_t *t, uint64_t *live, uint64_t *device)
{
    *live = *device = 0;
    guarded("getDeviceStats", nullptr, 0, [&] {
        const auto s = cca::getDeviceStats(t->device);
        *live = static_cast<uint64_t>(s.allocated_bytes[kAggregate].current);
        *device = static_cast<uint64_t>(s.reserved_bytes[kAggregate].current);
    });
}

extern "C" uint64_t torch_backend_peak_reserved(torch_backend_t *t)
{
    uint64_t peak = 0;
    guarded("getDeviceStats", nullptr, 0, [&] {
        peak =
            static_cast<uint64_t>(cca::getDeviceStats(t->device).reserved_bytes[kAggregate].peak);
    });
    return peak;
}

extern "C" void torch_backend_close(torch_backend_t *t)
{
    if (t == nullptr)
        return;
    char err[256];
    if (guarded("emptyCache", err, sizeof err, [] { cca::emptyCache(); }) != TB_OK)
        std::fprintf(stderr, "vpmm-replay: %s\n", err);
    delete t;
}
