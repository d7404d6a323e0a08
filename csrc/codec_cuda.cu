// CUDA kernels of the codec; same semantics and bits as codec_cpu.cc (layouts in codec.h).
//
// Quantize and dequantize work a warp's chunk of 512 values at a time (32 lanes x 4 float4):
// lane l's k-th float4 holds values 4 (l + 32 k) .. + 3, which are exactly byte (l & 3) of the
// chunk's packed word 8 k + (l >> 2), so every float load and store is a full 512-byte warp
// transaction, each lane keeps 8 float4 in flight (one value per thread and a wait per value
// left the card at 45-66% of a copy's bandwidth), and the chunk's 32 words move as one 128-byte
// load or store, exchanged with shuffles. Arrays not 16-byte aligned (views at an odd offset) take
// the one-value-per-thread kernels. Wire encode/decode: one thread per word. All loops are
// grid-stride over int64 indices (the chunk kernels' grids cover their arrays in one pass).
#include "codec_cuda.h"

#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace cdsgd {
namespace cuda {
namespace {

constexpr uint32_t kWireBias = 0x3F800000u;  // bit pattern of 1.0f
constexpr uint32_t kWireLimit = 43046721u;   // 3^16
constexpr uint32_t kQuietBit = 0x00400000u;
constexpr int kThreads = 256;                // a multiple of 32: the quantize loop relies on it
constexpr int kBlocksPerSM = 32;             // enough to fill an SM; the loops stride beyond

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

__device__ __forceinline__ int shift_of(int j) { return 8 * (j >> 2) + 6 - 2 * (j & 3); }

__device__ __forceinline__ bool is_nan_bits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

// `r` = a + b or a - b as computed here. GPUs return one canonical NaN (0x7fffffff) for every NaN
// result, while the CPU kernels propagate operand payloads, so a NaN result is rebuilt the way the
// host's FPU would build it; residuals (which keep NaNs across steps) then stay bit-identical.
// When both operands are NaN the CPU's pick depends on the operand order the compiler chose.
__device__ __forceinline__ float like_host(float r, float a, float b) {
  if (!is_nan_bits(__float_as_uint(r))) return r;
  const uint32_t ua = __float_as_uint(a), ub = __float_as_uint(b);
  const bool na = is_nan_bits(ua), nb = is_nan_bits(ub);
#if defined(__aarch64__)
  // AArch64 with FPCR.DN = 0 (Linux default): a signaling NaN wins over a quiet one; an invalid
  // operation (inf - inf) gives +qNaN.
  const bool sa = na && !(ua & kQuietBit), sb = nb && !(ub & kQuietBit);
  const uint32_t bits = sa ? ua : sb ? ub : na ? ua : nb ? ub : 0x7FC00000u;
#else
  // x86 SSE/AVX: the first NaN operand, quieted; an invalid operation gives the "real
  // indefinite" 0xFFC00000 (sign bit set).
  const uint32_t bits = na ? ua : nb ? ub : 0xFFC00000u;
#endif
  return __uint_as_float(bits | kQuietBit);
}

// Sums a per-thread count over the warp and adds it to the global counter once per warp, instead
// of one atomic per hit (a fully corrupt payload would otherwise serialize on one address).
// Every lane of the warp must call it.
__device__ __forceinline__ void add_count(unsigned long long mine, unsigned long long* counter) {
  for (int offset = 16; offset > 0; offset >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, offset);
  if ((threadIdx.x & 31) == 0 && mine) atomicAdd(counter, mine);
}

// One value of Algorithm 1's compression: r += g; the code of r against +-t; r -= its value.
// Counts a non-finite residual into `bad`.
__device__ __forceinline__ uint32_t quantize_one(float& r, float g, float t, unsigned long long& bad) {
  const float neg_t = -t;
  const float x = like_host(r + g, r, g);
  const bool pos = x >= t, neg = x <= neg_t;
  r = pos ? like_host(x - t, x, t) : (neg ? like_host(x - neg_t, x, neg_t) : x);
  bad += (__float_as_uint(r) & 0x7f800000u) == 0x7f800000u;
  return pos ? 3u : (neg ? 2u : 0u);
}

__device__ __forceinline__ float decode_one(uint32_t c, float t) {
  return c == 3u ? t : (c == 2u ? -t : 0.0f);  // 01 reads as 0
}

__device__ __forceinline__ float add_like_host(float o, float v) { return like_host(o + v, o, v); }

constexpr int kChunk = 512;  // values a warp takes at a time: 32 lanes x 4 float4 = 32 words

// The codes of one lane's 4 values as byte (lane & 3) of their word (value m at bits 6 - 2m).
__device__ __forceinline__ uint32_t quantize4(float4& r, const float4& g, float t, int lane,
                                              unsigned long long& bad) {
  const uint32_t byte = quantize_one(r.x, g.x, t, bad) << 6 | quantize_one(r.y, g.y, t, bad) << 4 |
                        quantize_one(r.z, g.z, t, bad) << 2 | quantize_one(r.w, g.w, t, bad);
  return byte << (8 * (lane & 3));
}

// Lane `lane`'s word of the chunk (word `lane`) from the 4 partial words each lane built, one per
// float4 k: lanes 4j .. 4j + 3 OR theirs into word 8k + j, and lane l takes word l from lane
// 4 (l & 7) at k = l >> 3. Every lane of the warp must call it.
__device__ __forceinline__ uint32_t gather_words(const uint32_t (&part)[4], int lane) {
  uint32_t mine = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    uint32_t w = part[k];
    w |= __shfl_xor_sync(0xffffffffu, w, 1);
    w |= __shfl_xor_sync(0xffffffffu, w, 2);
    w = __shfl_sync(0xffffffffu, w, 4 * (lane & 7));
    if ((lane >> 3) == k) mine = w;
  }
  return mine;
}

// grad and residual 16-byte aligned. A full chunk moves float4s; the last, partial chunk reads
// value by value with bounds (its missing values code as 0: the last word's padding).
__global__ void quantize_chunks_kernel(const float* __restrict__ grad, float* __restrict__ residual,
                                       uint32_t* __restrict__ packed, int64_t n, int64_t nwords, float t,
                                       unsigned long long* nonfinite) {
  const int lane = threadIdx.x & 31;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  unsigned long long bad = 0;
  for (int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; c < chunks; c += warps) {
    const int64_t base = c * kChunk;
    uint32_t part[4];
    if (base + kChunk <= n) {  // warp-uniform
      const float4* g4 = reinterpret_cast<const float4*>(grad + base);
      float4* r4 = reinterpret_cast<float4*>(residual + base);
      float4 g[4], r[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // all loads first: 8 in flight per lane
        g[k] = g4[lane + 32 * k];
        r[k] = r4[lane + 32 * k];
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        part[k] = quantize4(r[k], g[k], t, lane, bad);
        r4[lane + 32 * k] = r[k];
      }
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int64_t i = base + 4 * (lane + 32 * k);
        uint32_t byte = 0;
        for (int m = 0; m < 4; ++m) {
          if (i + m < n) {
            float r = residual[i + m];
            byte |= quantize_one(r, grad[i + m], t, bad) << (6 - 2 * m);
            residual[i + m] = r;
          }
        }
        part[k] = byte << (8 * (lane & 3));
      }
    }
    const uint32_t word = gather_words(part, lane);
    const int64_t w = c * (kChunk / 16) + lane;
    if (w < nwords) packed[w] = word;
  }
  add_count(bad, nonfinite);
}

// out 16-byte aligned. Lane l loads word l of the chunk; the lanes of float4 k take word
// 8k + (l >> 2) from lane 8k + (l >> 2) and decode byte (l & 3) of it.
__global__ void dequantize_chunks_kernel(const uint32_t* __restrict__ packed, float* __restrict__ out,
                                         int64_t n, int64_t nwords, float t, bool accumulate) {
  const int lane = threadIdx.x & 31;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; c < chunks; c += warps) {
    const int64_t base = c * kChunk, w = c * (kChunk / 16) + lane;
    const uint32_t mine = w < nwords ? __ldg(packed + w) : 0u;
    if (base + kChunk <= n) {  // warp-uniform
      float4* o4 = reinterpret_cast<float4*>(out + base);
      float4 o[4];
      if (accumulate) {
#pragma unroll
        for (int k = 0; k < 4; ++k) o[k] = o4[lane + 32 * k];
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t byte = __shfl_sync(0xffffffffu, mine, 8 * k + (lane >> 2)) >> (8 * (lane & 3));
        const float4 v = make_float4(decode_one(byte >> 6 & 3u, t), decode_one(byte >> 4 & 3u, t),
                                     decode_one(byte >> 2 & 3u, t), decode_one(byte & 3u, t));
        o4[lane + 32 * k] = accumulate ? make_float4(add_like_host(o[k].x, v.x), add_like_host(o[k].y, v.y),
                                                     add_like_host(o[k].z, v.z), add_like_host(o[k].w, v.w))
                                       : v;
      }
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t byte = __shfl_sync(0xffffffffu, mine, 8 * k + (lane >> 2)) >> (8 * (lane & 3));
        const int64_t i = base + 4 * (lane + 32 * k);
        for (int m = 0; m < 4; ++m) {
          if (i + m < n) {
            const float v = decode_one(byte >> (6 - 2 * m) & 3u, t);
            out[i + m] = accumulate ? add_like_host(out[i + m], v) : v;
          }
        }
      }
    }
  }
}

// The one-value-per-thread kernels, for arrays that are not 16-byte aligned.
__global__ void quantize_kernel(const float* __restrict__ grad, float* __restrict__ residual,
                                uint32_t* __restrict__ packed, int64_t n, int64_t padded, float t,
                                unsigned long long* nonfinite) {
  const int lane = threadIdx.x & 31;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  // The loop runs on the warp's first index, so all 32 lanes iterate together and the full-mask
  // shuffles are legal. base is a multiple of 32, hence i & 15 == lane & 15 and each half-warp
  // is exactly one packed word. Lanes at or past n add zero codes: the padding of the last word.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x + (threadIdx.x & ~31u); base < padded;
       base += stride) {
    const int64_t i = base + lane;
    uint32_t code = 0;
    if (i < n) {
      float r = residual[i];
      code = quantize_one(r, grad[i], t, bad);
      residual[i] = r;
    }
    uint32_t word = code << shift_of(lane & 15);
    // Offsets below 16 never cross the half-warp boundary.
    for (int offset = 8; offset > 0; offset >>= 1) word |= __shfl_xor_sync(0xffffffffu, word, offset);
    if ((lane & 15) == 0 && i < padded) packed[i >> 4] = word;
  }
  add_count(bad, nonfinite);
}

__global__ void dequantize_kernel(const uint32_t* __restrict__ packed, float* __restrict__ out, int64_t n,
                                  float t, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = decode_one((__ldg(packed + (i >> 4)) >> shift_of(static_cast<int>(i & 15))) & 3u, t);
    out[i] = accumulate ? add_like_host(out[i], v) : v;
  }
}

__global__ void wire_encode_kernel(const uint32_t* __restrict__ packed, uint32_t* __restrict__ wire,
                                   int64_t nwords) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < nwords; w += stride) {
    const uint32_t word = packed[w];
    uint32_t v = 0;
    for (int j = 15; j >= 0; --j) {  // Horner: value j carries weight 3^j
      const uint32_t c = (word >> shift_of(j)) & 3u;
      v = v * 3u + (c >> 1) * (2u - (c & 1u));  // 11 -> 1, 10 -> 2, 00/01 -> 0
    }
    wire[w] = kWireBias + v;
  }
}

__global__ void wire_decode_kernel(const uint32_t* __restrict__ wire, uint32_t* __restrict__ packed,
                                   int64_t nwords, unsigned long long* invalid) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < nwords; w += stride) {
    uint32_t v = wire[w] - kWireBias;  // wraps to a huge value below the bias
    if (v >= kWireLimit) {             // corrupt payload: decodes to 0 and counts
      ++bad;
      v = 0;
    }
    uint32_t word = 0;
    for (int j = 0; j < 16; ++j) {
      const uint32_t q = v / 3u, d = v - 3u * q;
      v = q;
      word |= ((3u * d) & 3u) << shift_of(j);  // 1 -> 11, 2 -> 10, 0 -> 00
    }
    packed[w] = word;
  }
  add_count(bad, invalid);
}

__global__ void count_nonfinite_kernel(const float* __restrict__ x, int64_t n, unsigned long long* counter) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    bad += (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
  add_count(bad, counter);
}

// Per device: the private stream, a device counter with a pinned host copy, and a mutex, since
// concurrent callers (the GIL is released) would otherwise share the counter.
struct DeviceContext {
  std::mutex mu;
  cudaStream_t stream = nullptr;
  unsigned long long* counter = nullptr;
  unsigned long long* host = nullptr;
  int max_blocks = 0;
};

// Restores the caller's current device (MXNet's threads rely on theirs).
struct DeviceGuard {
  int previous = 0;
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous), "cudaGetDevice");
    check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
};

// Called with `device` current. Contexts are created once and never freed (process lifetime).
DeviceContext& context(int device) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<DeviceContext>> contexts;
  std::lock_guard<std::mutex> lock(mu);
  if (contexts.empty()) {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    contexts.resize(count);
  }
  if (device < 0 || device >= static_cast<int>(contexts.size()))
    throw std::runtime_error("CUDA device " + std::to_string(device) + " does not exist");
  if (!contexts[device]) {
    auto c = std::make_unique<DeviceContext>();
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    c->max_blocks = (sms > 0 ? sms : 1) * kBlocksPerSM;
    check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaMalloc(&c->counter, sizeof(unsigned long long)), "cudaMalloc");
    check(cudaMallocHost(&c->host, sizeof(unsigned long long)), "cudaMallocHost");
    contexts[device] = std::move(c);
  }
  return *contexts[device];
}

int blocks_for(const DeviceContext& c, int64_t items) {
  const int64_t b = (items + kThreads - 1) / kThreads;
  return static_cast<int>(b < c.max_blocks ? b : c.max_blocks);
}

// The chunk kernels get a block for every 8 chunks, so each warp takes one chunk and exits: on an
// H200 that wrote 3.9 TB/s at 4e8 values where a grid of 32 blocks per SM striding on wrote 3.6
// (a copy: 4.26). The loops still stride, past the grid's limit.
int one_pass_blocks(int64_t chunks) {
  const int64_t b = (chunks * 32 + kThreads - 1) / kThreads;
  return static_cast<int>(b < INT32_MAX ? b : INT32_MAX);
}

// Runs launch(context, counter) on the device's stream and waits for it. With counts, the counter
// is zeroed before and returned after; otherwise counter is null and 0 is returned.
template <typename Launch>
int64_t run(int device, bool counts, const char* what, Launch launch) {
  DeviceGuard guard(device);
  DeviceContext& c = context(device);
  std::lock_guard<std::mutex> lock(c.mu);
  if (counts) check(cudaMemsetAsync(c.counter, 0, sizeof(unsigned long long), c.stream), "cudaMemsetAsync");
  launch(c, counts ? c.counter : nullptr);
  check(cudaGetLastError(), what);
  if (counts)
    check(cudaMemcpyAsync(c.host, c.counter, sizeof(unsigned long long), cudaMemcpyDeviceToHost, c.stream),
          "cudaMemcpyAsync");
  check(cudaStreamSynchronize(c.stream), what);
  return counts ? static_cast<int64_t>(*c.host) : 0;
}

}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the "no driver / no device" error so later calls start clean
    return 0;
  }
  return count;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

int64_t quantize_2bit(const float* grad, float* residual, uint32_t* packed, int64_t n, float threshold,
                      int device, uint32_t* host_codes) {
  if (n <= 0) return 0;
  const int64_t nwords = (n + 15) / 16;  // every packed word gets written, the last zero-padded
  return run(device, true, "quantize_kernel", [&](DeviceContext& c, unsigned long long* counter) {
    if (aligned16(grad) && aligned16(residual)) {
      quantize_chunks_kernel<<<one_pass_blocks((n + kChunk - 1) / kChunk), kThreads, 0, c.stream>>>(grad, residual, packed, n, nwords,
                                                                              threshold, counter);
    } else {
      quantize_kernel<<<blocks_for(c, nwords * 16), kThreads, 0, c.stream>>>(grad, residual, packed, n,
                                                                              nwords * 16, threshold, counter);
    }
    if (host_codes != nullptr)
      check(cudaMemcpyAsync(host_codes, packed, static_cast<size_t>(nwords) * 4, cudaMemcpyDeviceToHost, c.stream),
            "cudaMemcpyAsync");
  });
}

void dequantize_2bit(const uint32_t* packed, float* out, int64_t n, float threshold, bool accumulate,
                     int device) {
  if (n <= 0) return;
  run(device, false, "dequantize_kernel", [&](DeviceContext& c, unsigned long long*) {
    if (aligned16(out)) {
      dequantize_chunks_kernel<<<one_pass_blocks((n + kChunk - 1) / kChunk), kThreads, 0, c.stream>>>(packed, out, n, (n + 15) / 16,
                                                                                threshold, accumulate);
    } else {
      dequantize_kernel<<<blocks_for(c, n), kThreads, 0, c.stream>>>(packed, out, n, threshold, accumulate);
    }
  });
}

void wire_encode(const uint32_t* packed, uint32_t* wire, int64_t nwords, int device) {
  if (nwords <= 0) return;
  run(device, false, "wire_encode_kernel", [&](DeviceContext& c, unsigned long long*) {
    wire_encode_kernel<<<blocks_for(c, nwords), kThreads, 0, c.stream>>>(packed, wire, nwords);
  });
}

int64_t wire_decode(const uint32_t* wire, uint32_t* packed, int64_t nwords, int device) {
  if (nwords <= 0) return 0;
  return run(device, true, "wire_decode_kernel", [&](DeviceContext& c, unsigned long long* counter) {
    wire_decode_kernel<<<blocks_for(c, nwords), kThreads, 0, c.stream>>>(wire, packed, nwords, counter);
  });
}

int64_t count_nonfinite(const float* x, int64_t n, int device) {
  if (n <= 0) return 0;
  return run(device, true, "count_nonfinite_kernel", [&](DeviceContext& c, unsigned long long* counter) {
    count_nonfinite_kernel<<<blocks_for(c, n), kThreads, 0, c.stream>>>(x, n, counter);
  });
}

void copy(void* dst, const void* src, int64_t bytes, int device) {
  if (bytes <= 0) return;
  run(device, false, "cudaMemcpyAsync", [&](DeviceContext& c, unsigned long long*) {
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, c.stream), "cudaMemcpyAsync");
  });
}

void* alloc_host(int64_t bytes) {
  if (device_count() == 0) return nullptr;
  void* p = nullptr;
  if (cudaMallocHost(&p, static_cast<size_t>(bytes > 0 ? bytes : 4)) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void free_host(void* p) {
  if (p != nullptr) cudaFreeHost(p);
}

}  // namespace cuda
}  // namespace cdsgd
