// CUDA versions of the codec kernels (codec.h): bit-identical results. All pointers are device
// pointers on CUDA device `device`. Each call runs on this module's stream for that device and
// synchronizes it before returning, so results are complete on return (the CPU contract).
// Errors throw std::runtime_error with CUDA's message.
#pragma once
#include <cstdint>

namespace cdsgd {
namespace cuda {

int device_count();  // 0 without a driver or GPU; never throws

int64_t quantize_2bit(const float* grad, float* residual, uint32_t* packed, int64_t n, float threshold,
                      int device);
void dequantize_2bit(const uint32_t* packed, float* out, int64_t n, float threshold, bool accumulate,
                     int device);
void wire_encode(const uint32_t* packed, uint32_t* wire, int64_t nwords, int device);
int64_t wire_decode(const uint32_t* wire, uint32_t* packed, int64_t nwords, int device);
int64_t count_nonfinite(const float* x, int64_t n, int device);

}  // namespace cuda
}  // namespace cdsgd
