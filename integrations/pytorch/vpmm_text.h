/*
 * vpmm_text.h — messages without iostreams, for vpmm's PyTorch CUDAAllocator (C++, included by
 * vpmm_cuda_allocator.cpp): cat(...) builds a std::string from strings, numbers and pointers with
 * std::to_string / snprintf (INTERFACE.md §5: iostreams crashed inside an extension on the
 * H100 image it was tested on), status_text a vpmm status with its name, meaning and this
 * thread's last error.
 * Threads: free.
 */
#pragma once

#include <cstdio>
#include <string>
#include <type_traits>

extern "C" {
#include "vpmm.h"
}

namespace vpmm_torch
{

inline std::string status_text(vpmm_status_t st)
{
    return std::string(vpmm_status_name(st)) + " (" + vpmm_strerror(st) + "): " + vpmm_last_error();
}

inline void append(std::string &s, const char *x)
{
    s += x;
}
inline void append(std::string &s, const std::string &x)
{
    s += x;
}
inline void append(std::string &s, const void *p)
{
    char b[32];
    std::snprintf(b, sizeof b, "%p", p);
    s += b;
}
inline void append(std::string &s, double v)
{
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    s += b;
}
template <typename T, typename std::enable_if<std::is_integral<T>::value, int>::type = 0>
inline void append(std::string &s, T v)
{
    s += std::to_string(static_cast<long long>(v)); /* int8_t (DeviceIndex) as a number */
}
template <typename... A> inline std::string cat(const A &...a)
{
    std::string s;
    (append(s, a), ...);
    return s;
}

} // namespace vpmm_torch
