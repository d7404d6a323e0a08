// CUDA kernels of the codec; same semantics and bits as codec_cpu.cc.
//
// Quantize: one thread per value, so loads and stores of grad/residual are coalesced; the 16
// lanes that hold one word OR their codes together with warp shuffles and the first of them
// stores the word. Dequantize: one thread per value (the 16 threads of a word read the same
// 4 bytes, served by one transaction). Wire encode/decode: one thread per word.
#include "codec_cuda.h"

#include <cuda_runtime.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace cdsgd {
namespace cuda {
namespace {

constexpr uint32_t kWireBias = 0x3F800000u;
constexpr uint32_t kWireLimit = 43046721u;  // 3^16
constexpr int kThreads = 256;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

__device__ __forceinline__ int shift_of(int j) { return 8 * (j >> 2) + 6 - 2 * (j & 3); }

// Per device: a stream and a counter for the kernels that count (non-finite, invalid words).
struct DeviceContext {
  cudaStream_t stream = nullptr;
  unsigned long long* counter = nullptr;
};

DeviceContext& context(int device) {
  static std::mutex mu;
  static std::vector<DeviceContext> contexts;
  std::lock_guard<std::mutex> lock(mu);
  if (contexts.empty()) {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    contexts.resize(count);
  }
  if (device < 0 || device >= static_cast<int>(contexts.size()))
    throw std::runtime_error("CUDA device " + std::to_string(device) + " does not exist");
  DeviceContext& c = contexts[device];
  if (c.stream == nullptr) {
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaMalloc(&c.counter, sizeof(unsigned long long)), "cudaMalloc");
  }
  return c;
}

// Keeps the caller's current device.
struct DeviceGuard {
  int previous = 0;
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous), "cudaGetDevice");
    check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous); }
};

int blocks_for(int64_t items) {
  const int64_t b = (items + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

__global__ void quantize_kernel(const float* __restrict__ grad, float* __restrict__ residual,
                                uint32_t* __restrict__ packed, int64_t n, int64_t padded, float t,
                                unsigned long long* nonfinite) {
  const float neg_t = -t;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;  // a multiple of 32
  unsigned long long bad = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i - threadIdx.x % 32 < padded;
       i += stride) {
    uint32_t code = 0;
    if (i < n) {
      const float x = residual[i] + grad[i];
      const bool pos = x >= t, neg = x <= neg_t;
      const float y = pos ? x - t : (neg ? x - neg_t : x);
      residual[i] = y;
      code = pos ? 3u : (neg ? 2u : 0u);
      bad += (__float_as_uint(y) & 0x7f800000u) == 0x7f800000u;
    }
    uint32_t word = code << shift_of(static_cast<int>(i & 15));
    // OR across the 16 lanes of this word (offsets < 16 stay inside each half-warp)
    for (int offset = 8; offset > 0; offset >>= 1) word |= __shfl_xor_sync(0xffffffffu, word, offset);
    if ((i & 15) == 0 && i < padded) packed[i >> 4] = word;
  }
  for (int offset = 16; offset > 0; offset >>= 1) bad += __shfl_xor_sync(0xffffffffu, bad, offset);
  if (threadIdx.x % 32 == 0 && bad) atomicAdd(nonfinite, bad);
}

__global__ void dequantize_kernel(const uint32_t* __restrict__ packed, float* __restrict__ out, int64_t n, float t,
                                  bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t c = (packed[i >> 4] >> shift_of(static_cast<int>(i & 15))) & 3u;
    const float v = c == 3u ? t : (c == 2u ? -t : 0.0f);
    out[i] = accumulate ? out[i] + v : v;
  }
}

__global__ void wire_encode_kernel(const uint32_t* __restrict__ packed, uint32_t* __restrict__ wire, int64_t nwords) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < nwords; w += stride) {
    const uint32_t word = packed[w];
    uint32_t v = 0;
    for (int j = 15; j >= 0; --j) {
      const uint32_t c = (word >> shift_of(j)) & 3u;
      v = v * 3u + (c >> 1) * (2u - (c & 1u));  // + -> 1, - -> 2, else 0
    }
    wire[w] = kWireBias + v;
  }
}

__global__ void wire_decode_kernel(const uint32_t* __restrict__ wire, uint32_t* __restrict__ packed, int64_t nwords,
                                   unsigned long long* invalid) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < nwords; w += stride) {
    uint32_t v = wire[w] - kWireBias;
    if (v >= kWireLimit) {
      atomicAdd(invalid, 1ull);
      v = 0;
    }
    uint32_t word = 0;
    for (int j = 0; j < 16; ++j) {
      const uint32_t q = v / 3u, d = v - 3u * q;
      v = q;
      word |= ((3u * d) & 3u) << shift_of(j);
    }
    packed[w] = word;
  }
}

__global__ void count_nonfinite_kernel(const float* __restrict__ x, int64_t n, unsigned long long* bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned long long mine = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    mine += (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
  for (int offset = 16; offset > 0; offset >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, offset);
  if (threadIdx.x % 32 == 0 && mine) atomicAdd(bad, mine);
}

int64_t read_counter(DeviceContext& c) {
  unsigned long long host = 0;
  check(cudaMemcpyAsync(&host, c.counter, sizeof(host), cudaMemcpyDeviceToHost, c.stream), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(c.stream), "cudaStreamSynchronize");
  return static_cast<int64_t>(host);
}

}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

int64_t quantize_2bit(const float* grad, float* residual, uint32_t* packed, int64_t n, float threshold, int device) {
  if (n == 0) return 0;
  DeviceGuard guard(device);
  DeviceContext& c = context(device);
  const int64_t padded = (n + 15) / 16 * 16;
  check(cudaMemsetAsync(c.counter, 0, sizeof(unsigned long long), c.stream), "cudaMemsetAsync");
  quantize_kernel<<<blocks_for(padded), kThreads, 0, c.stream>>>(grad, residual, packed, n, padded, threshold,
                                                                   c.counter);
  check(cudaGetLastError(), "quantize_kernel");
  return read_counter(c);
}

void dequantize_2bit(const uint32_t* packed, float* out, int64_t n, float threshold, bool accumulate, int device) {
  if (n == 0) return;
  DeviceGuard guard(device);
  DeviceContext& c = context(device);
  dequantize_kernel<<<blocks_for(n), kThreads, 0, c.stream>>>(packed, out, n, threshold, accumulate);
  check(cudaGetLastError(), "dequantize_kernel");
  check(cudaStreamSynchronize(c.stream), "cudaStreamSynchronize");
}

void wire_encode(const uint32_t* packed, uint32_t* wire, int64_t nwords, int device) {
  if (nwords == 0) return;
  DeviceGuard guard(device);
  DeviceContext& c = context(device);
  wire_encode_kernel<<<blocks_for(nwords), kThreads, 0, c.stream>>>(packed, wire, nwords);
  check(cudaGetLastError(), "wire_encode_kernel");
  check(cudaStreamSynchronize(c.stream), "cudaStreamSynchronize");
}

int64_t wire_decode(const uint32_t* wire, uint32_t* packed, int64_t nwords, int device) {
  if (nwords == 0) return 0;
  DeviceGuard guard(device);
  DeviceContext& c = context(device);
  check(cudaMemsetAsync(c.counter, 0, sizeof(unsigned long long), c.stream), "cudaMemsetAsync");
  wire_decode_kernel<<<blocks_for(nwords), kThreads, 0, c.stream>>>(wire, packed, nwords, c.counter);
  check(cudaGetLastError(), "wire_decode_kernel");
  return read_counter(c);
}

int64_t count_nonfinite(const float* x, int64_t n, int device) {
  if (n == 0) return 0;
  DeviceGuard guard(device);
  DeviceContext& c = context(device);
  check(cudaMemsetAsync(c.counter, 0, sizeof(unsigned long long), c.stream), "cudaMemsetAsync");
  count_nonfinite_kernel<<<blocks_for(n), kThreads, 0, c.stream>>>(x, n, c.counter);
  check(cudaGetLastError(), "count_nonfinite_kernel");
  return read_counter(c);
}

}  // namespace cuda
}  // namespace cdsgd
