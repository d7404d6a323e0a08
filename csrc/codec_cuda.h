// CUDA versions of the codec kernels (codec.h), bit-identical to the CPU ones. Plain C++: usable
// from a .cc compiled without CUDA headers.
//
// All pointers are device pointers on CUDA device `device`. Each call runs on a private stream
// this module keeps for that device and synchronizes it before returning, so results are complete
// on return (the CPU contract); calls on one device are serialized. Inputs written on another
// stream must be complete before the call. Errors throw std::runtime_error with CUDA's message.
#pragma once
#include <cstdint>

namespace cdsgd {
namespace cuda {

int device_count();  // 0 without a driver or GPU; never throws

// Returns how many residual entries are non-finite afterwards, like the CPU version. With
// host_codes (page-locked or not), the packed words are also copied there, in the same wait.
int64_t quantize_2bit(const float* grad, float* residual, uint32_t* packed, int64_t n, float threshold,
                      int device, uint32_t* host_codes = nullptr);
void dequantize_2bit(const uint32_t* packed, float* out, int64_t n, float threshold, bool accumulate,
                     int device);
void wire_encode(const uint32_t* packed, uint32_t* wire, int64_t nwords, int device);
// Returns the number of invalid wire words (they decode to 0 words).
int64_t wire_decode(const uint32_t* wire, uint32_t* packed, int64_t nwords, int device);
// Number of NaN/Inf values among x[0..n).
int64_t count_nonfinite(const float* x, int64_t n, int device);

// Copies `bytes` between device and host memory in either direction (or within one device) on
// the device's stream and waits: the device part of a round moves codes and weights with it.
void copy(void* dst, const void* src, int64_t bytes, int device);
// Page-locked host memory (full-speed, DMA-able copies), or nullptr where CUDA cannot give it
// (no driver or device): the caller then uses ordinary memory. Never throws.
void* alloc_host(int64_t bytes);
void free_host(void* p);

}  // namespace cuda
}  // namespace cdsgd
