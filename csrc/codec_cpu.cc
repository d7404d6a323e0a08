// CPU kernels of the codec. Plain loops over small cache-resident chunks, written so that the
// compiler vectorizes each pass; target_clones builds AVX-512 / AVX2 / baseline copies and picks
// one at load time. Work is split across threads on chunk boundaries, so the result does not
// depend on the thread count.
#include "codec.h"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(CDSGD_NO_CLONES)
#define CDSGD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CDSGD_CLONES
#endif

namespace cdsgd {
namespace {

// Values per inner chunk: the code bytes of one chunk stay in L1 between the two passes.
constexpr int64_t kChunk = 4096;
// Below this many values per thread, starting a thread costs more than it saves.
constexpr int64_t kMinPerThread = 1 << 18;

std::atomic<int> g_threads{1};

// Runs fn(begin, end) over [0, n) in `threads` pieces whose bounds are multiples of `align`.
template <typename Fn>
void parallel_for(int64_t n, int64_t align, int threads, Fn fn) {
  if (threads <= 0) threads = g_threads.load();
  int64_t useful = std::max<int64_t>(1, n / kMinPerThread);
  int t = static_cast<int>(std::min<int64_t>(threads, useful));
  if (t <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  int64_t per = (n + t - 1) / t;
  per = (per + align - 1) / align * align;
  std::vector<std::thread> pool;
  for (int i = 1; i < t; ++i) {
    int64_t b = std::min(n, per * i), e = std::min(n, per * (i + 1));
    if (b < e) pool.emplace_back(fn, b, e);
  }
  fn(int64_t{0}, std::min(n, per));
  for (auto& th : pool) th.join();
}

// Shift of the low code bit of value j (0..15) inside its word.
constexpr int shift_of(int j) { return 8 * (j >> 2) + 6 - 2 * (j & 3); }

// Pass 1: residual update and one code byte per value (3 = +, 2 = -, 0).
// Pass 2: four code bytes (read as one little-endian uint32) -> one packed byte. The multiply
// moves byte 0 to bits 31-30, byte 1 to 29-28, byte 2 to 27-26, byte 3 to 25-24; the other
// partial products land below bit 24 without carries.
CDSGD_CLONES
int64_t quantize_range(const float* grad, float* residual, uint8_t* out, int64_t begin,
                       int64_t end, int64_t n, float t) {
  alignas(64) uint8_t code[kChunk];
  const float neg_t = -t;
  int64_t nonfinite = 0;
  for (int64_t c0 = begin; c0 < end; c0 += kChunk) {
    const int64_t m = std::min(kChunk, end - c0);
    const float* g = grad + c0;
    float* r = residual + c0;
    // The select is done on the bits with all-ones/all-zeros masks, not with ?: on floats:
    // compilers vectorize this form on every x86 level (SSE2, AVX2), while the float select
    // stayed a data-dependent branch everywhere but AVX-512 (15x slower on random gradients).
    uint32_t bad = 0;  // at most kChunk per chunk
    for (int64_t i = 0; i < m; ++i) {
      const float x = r[i] + g[i];
      const float down = x - t, up = x - neg_t;  // both computed: exact, as MXNet's rule
      uint32_t xb, db, ub;
      std::memcpy(&xb, &x, 4);
      std::memcpy(&db, &down, 4);
      std::memcpy(&ub, &up, 4);
      const uint32_t pos = 0u - static_cast<uint32_t>(x >= t);  // NaN: neither
      const uint32_t neg = 0u - static_cast<uint32_t>(x <= neg_t);
      const uint32_t yb = (db & pos) | (ub & neg) | (xb & ~(pos | neg));
      std::memcpy(r + i, &yb, 4);
      code[i] = static_cast<uint8_t>((pos & 3u) | (neg & 2u));
      bad += (yb & 0x7f800000u) == 0x7f800000u;
    }
    nonfinite += bad;
    // The last chunk of the array fills its last word with zero codes.
    int64_t padded = m;
    if (c0 + m == n) padded = (m + kValuesPerWord - 1) / kValuesPerWord * kValuesPerWord;
    for (int64_t i = m; i < padded; ++i) code[i] = 0;
    uint8_t* o = out + c0 / 4;
    for (int64_t b = 0; b < padded / 4; ++b) {
      uint32_t x;
      std::memcpy(&x, code + 4 * b, 4);
      o[b] = static_cast<uint8_t>((x * 0x40100401u) >> 24);
    }
  }
  return nonfinite;
}

// Pass 1: each packed byte -> four code bytes. Pass 2: code -> +t / -t / 0 (01 reads as 0).
CDSGD_CLONES
void dequantize_range(const uint8_t* in, float* out, int64_t begin, int64_t end, float t,
                      bool accumulate) {
  alignas(64) uint8_t code[kChunk];
  for (int64_t c0 = begin; c0 < end; c0 += kChunk) {
    const int64_t m = std::min(kChunk, end - c0);
    const uint8_t* src = in + c0 / 4;
    const int64_t nb = (m + 3) / 4;
    for (int64_t b = 0; b < nb; ++b) {
      const uint32_t x = src[b];
      const uint32_t y = ((x >> 6) | (x << 4) | (x << 14) | (x << 24)) & 0x03030303u;
      std::memcpy(code + 4 * b, &y, 4);
    }
    float* o = out + c0;
    if (accumulate) {
      for (int64_t i = 0; i < m; ++i) {
        const uint8_t c = code[i];
        o[i] += c == 3 ? t : (c == 2 ? -t : 0.0f);
      }
    } else {
      for (int64_t i = 0; i < m; ++i) {
        const uint8_t c = code[i];
        o[i] = c == 3 ? t : (c == 2 ? -t : 0.0f);
      }
    }
  }
}

// Horner over the 16 codes of each word: digit 1 for + (11), 2 for - (10), 0 otherwise.
CDSGD_CLONES
void wire_encode_range(const uint32_t* packed, uint32_t* wire, int64_t begin, int64_t end) {
  for (int64_t w = begin; w < end; ++w) {
    const uint32_t word = packed[w];
    uint32_t v = 0;
    for (int j = kValuesPerWord - 1; j >= 0; --j) {
      const uint32_t c = (word >> shift_of(j)) & 3u;
      const uint32_t d = (c >> 1) * (2u - (c & 1u));
      v = v * 3u + d;
    }
    wire[w] = kWireBias + v;
  }
}

// Half a word: 8 base-3 digits (v < 3^8) -> their 8 codes in the low 16 bits of the packed
// layout (value j of the half at shift_of(j); the high half is the same shifted by 16).
struct HalfWordTable {
  uint16_t codes[6561];
  HalfWordTable() {
    for (uint32_t v = 0; v < 6561; ++v) {
      uint32_t x = v, half = 0;
      for (int j = 0; j < 8; ++j, x /= 3) half |= ((3u * (x % 3)) & 3u) << shift_of(j);  // 1 -> 11, 2 -> 10
      codes[v] = static_cast<uint16_t>(half);
    }
  }
};
const HalfWordTable kHalfWord;

// Inverse of wire_encode_range; an out-of-range value (corrupt payload) decodes to 0 and counts.
// v = hi * 3^8 + lo; hi = v / 6561 by one multiply (exact for every v < 3^16, checked
// exhaustively), then one table lookup per half.
CDSGD_CLONES
int64_t wire_decode_range(const uint32_t* wire, uint32_t* packed, int64_t begin, int64_t end) {
  int64_t invalid = 0;
  for (int64_t w = begin; w < end; ++w) {
    uint32_t v = wire[w] - kWireBias;  // wraps to a huge value below the bias
    const bool bad = v >= kWireLimit;
    invalid += bad;
    v = bad ? 0u : v;
    const uint32_t hi = static_cast<uint32_t>((uint64_t{v} * 20947867ull) >> 37);
    const uint32_t lo = v - 6561u * hi;
    packed[w] = kHalfWord.codes[lo] | (uint32_t{kHalfWord.codes[hi]} << 16);
  }
  return invalid;
}

CDSGD_CLONES
int64_t count_nonfinite_range(const float* x, int64_t begin, int64_t end) {
  int64_t bad = 0;
  for (int64_t i = begin; i < end; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    bad += (bits & 0x7f800000u) == 0x7f800000u;
  }
  return bad;
}

// MXNet 1.9.1's sgd_mom_update / sgd_update kernels (optimizer_op-inl.h), element for element:
// the same float32 operations in the same order (no FMA contraction: -ffp-contract=off), so a
// fused update equals decode_sum followed by MXNet's own update bit for bit.
inline float clip_like_mxnet(float x, float bound) {
  return x > bound ? bound : (x < -bound ? -bound : x);  // NaN passes, as mshadow_op::clip
}

CDSGD_CLONES
void sgd_range(const float* g, float* w, float* mom, int64_t count, const SgdHyper& h, float lr, float wd) {
  const float lrwd = lr * wd;
  if (mom != nullptr) {
    if (h.clip >= 0.0f) {
      for (int64_t i = 0; i < count; ++i) {
        const float m = h.momentum * mom[i] - lrwd * w[i] - lr * clip_like_mxnet(h.rescale * g[i], h.clip);
        mom[i] = m;
        w[i] = w[i] + m;
      }
    } else {
      const float lr_rescale = lr * h.rescale;
      for (int64_t i = 0; i < count; ++i) {
        const float m = h.momentum * mom[i] - lrwd * w[i] - lr_rescale * g[i];
        mom[i] = m;
        w[i] = w[i] + m;
      }
    }
  } else {
    const float keep = 1.0f - lrwd;
    if (h.clip >= 0.0f) {
      for (int64_t i = 0; i < count; ++i) w[i] = keep * w[i] - lr * clip_like_mxnet(h.rescale * g[i], h.clip);
    } else {
      const float lr_rescale = lr * h.rescale;
      for (int64_t i = 0; i < count; ++i) w[i] = keep * w[i] - lr_rescale * g[i];
    }
  }
}

CDSGD_CLONES
int64_t count_invalid_words(const uint32_t* wire, int64_t nwords) {
  int64_t bad = 0;
  for (int64_t w = 0; w < nwords; ++w) bad += (wire[w] - kWireBias) >= kWireLimit;
  return bad;
}

// Thread ranges for value kernels are multiples of 256 values: whole 64-byte lines of codes.
constexpr int64_t kValueAlign = 256;
constexpr int64_t kWordAlign = 16;

}  // namespace

int default_threads() { return g_threads.load(); }
void set_default_threads(int threads) { g_threads.store(threads < 1 ? 1 : threads); }

int64_t quantize_2bit(const float* grad, float* residual, uint32_t* packed, int64_t n,
                      float threshold, int threads) {
  std::atomic<int64_t> nonfinite{0};
  auto* out = reinterpret_cast<uint8_t*>(packed);
  parallel_for(n, kValueAlign, threads, [&](int64_t b, int64_t e) {
    nonfinite += quantize_range(grad, residual, out, b, e, n, threshold);
  });
  return nonfinite.load();
}

void dequantize_2bit(const uint32_t* packed, float* out, int64_t n, float threshold,
                     bool accumulate, int threads) {
  const auto* in = reinterpret_cast<const uint8_t*>(packed);
  parallel_for(n, kValueAlign, threads, [&](int64_t b, int64_t e) {
    dequantize_range(in, out, b, e, threshold, accumulate);
  });
}

void wire_encode(const uint32_t* packed, uint32_t* wire, int64_t nwords, int threads) {
  parallel_for(nwords, kWordAlign, threads,
               [&](int64_t b, int64_t e) { wire_encode_range(packed, wire, b, e); });
}

int64_t wire_decode(const uint32_t* wire, uint32_t* packed, int64_t nwords, int threads) {
  std::atomic<int64_t> invalid{0};
  parallel_for(nwords, kWordAlign, threads,
               [&](int64_t b, int64_t e) { invalid += wire_decode_range(wire, packed, b, e); });
  return invalid.load();
}

int64_t decode_sum(const uint32_t* wire, int64_t rows, int64_t nwords, int64_t stride, float* out, int64_t n,
                   float threshold, int threads) {
  std::atomic<int64_t> invalid{0};
  // Per chunk of values: each row's words -> packed words in L1 -> added into out (the first
  // row writes). Sums run in row order, so the result does not depend on the thread count.
  parallel_for(n, kValueAlign, threads, [&](int64_t b, int64_t e) {
    alignas(64) uint32_t packed[kChunk / kValuesPerWord];
    int64_t bad = 0;
    for (int64_t c0 = b; c0 < e; c0 += kChunk) {
      const int64_t m = std::min(kChunk, e - c0);
      const int64_t w0 = c0 / kValuesPerWord, nw = packed_words(m);
      if (rows == 0) std::fill(out + c0, out + c0 + m, 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        bad += wire_decode_range(wire + r * stride + w0, packed, 0, nw);
        dequantize_range(reinterpret_cast<const uint8_t*>(packed), out + c0, 0, m, threshold, r > 0);
      }
    }
    invalid += bad;
  });
  return invalid.load();
}

int64_t decode_sgd(const uint32_t* wire, int64_t rows, int64_t nwords, int64_t stride, float* weight,
                   float* mom, int64_t n, float threshold, const SgdRun* runs, int64_t nruns, const SgdHyper& h,
                   int threads) {
  // Every row is checked before any weight changes: a corrupt payload leaves the state as it was.
  int64_t invalid = 0;
  for (int64_t r = 0; r < rows; ++r) invalid += count_invalid_words(wire + r * stride, nwords);
  if (invalid) return invalid;
  // Per chunk: the rows' sum is decoded into L1 exactly as decode_sum does, then each run of
  // parameters overlapping the chunk takes its SGD step from it (runs sorted, disjoint).
  parallel_for(n, kValueAlign, threads, [&](int64_t b, int64_t e) {
    alignas(64) uint32_t packed[kChunk / kValuesPerWord];
    alignas(64) float g[kChunk];
    int64_t first = std::upper_bound(runs, runs + nruns, b, [](int64_t v, const SgdRun& r) { return v < r.end; }) - runs;
    for (int64_t c0 = b; c0 < e; c0 += kChunk) {
      const int64_t m = std::min(kChunk, e - c0), c1 = c0 + m;
      const int64_t w0 = c0 / kValuesPerWord, nw = packed_words(m);
      if (rows == 0) std::fill(g, g + m, 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        wire_decode_range(wire + r * stride + w0, packed, 0, nw);
        dequantize_range(reinterpret_cast<const uint8_t*>(packed), g, 0, m, threshold, r > 0);
      }
      while (first < nruns && runs[first].end <= c0) ++first;
      for (int64_t k = first; k < nruns && runs[k].begin < c1; ++k) {
        const int64_t lo = std::max(c0, runs[k].begin), hi = std::min(c1, runs[k].end);
        if (lo < hi)
          sgd_range(g + (lo - c0), weight + lo, mom == nullptr ? nullptr : mom + lo, hi - lo, h, runs[k].lr, runs[k].wd);
      }
    }
  });
  return 0;
}

namespace {

// Calls fn(lo, hi, scale) over [c0, c1) in order: each piece's part, and scale 0 for a part
// outside every piece. `first` is the first piece that may overlap; it moves on as chunks do.
template <typename Fn>
void for_segments(const Piece* pieces, int64_t npieces, int64_t& first, int64_t c0, int64_t c1, Fn fn) {
  while (first < npieces && pieces[first].end <= c0) ++first;
  int64_t at = c0;
  for (int64_t k = first; k < npieces && pieces[k].begin < c1; ++k) {
    const int64_t lo = std::max(c0, pieces[k].begin), hi = std::min(c1, pieces[k].end);
    if (at < lo) fn(at, lo, 0.0f);
    if (lo < hi) fn(lo, hi, pieces[k].scale);
    at = std::max(at, hi);
  }
  if (at < c1) fn(at, c1, 0.0f);
}

int64_t first_piece(const Piece* pieces, int64_t npieces, int64_t b) {
  return std::upper_bound(pieces, pieces + npieces, b, [](int64_t v, const Piece& p) { return v < p.end; }) - pieces;
}

// sum of (w - v)^2 over [0, m) in float64, in a fixed order whatever the thread count: eight
// lanes (value i into lane i % 8, sequentially), then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
CDSGD_CLONES
double sum_of_squares(const float* w, const float* v, int64_t m) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= m; i += 8)
    for (int j = 0; j < 8; ++j) {
      const double d = static_cast<double>(w[i + j] - v[i + j]);
      lane[j] += d * d;
    }
  for (int j = 0; i < m; ++i, ++j) {
    const double d = static_cast<double>(w[i] - v[i]);
    lane[j] += d * d;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// One piece's part of the server's encode: code bytes (3 = +, 2 = -, 0, as quantize_range) and
// V's update, on masks so that it vectorizes (see quantize_range).
CDSGD_CLONES
void pull_encode_segment(const float* w, float* v, uint8_t* code, int64_t m, float s) {
  if (s == 0.0f) {  // outside every piece: code 0, v + 0 (as the unfused v += step did)
    for (int64_t i = 0; i < m; ++i) { v[i] = v[i] + 0.0f; code[i] = 0; }
    return;
  }
  const float neg_s = -s;
  uint32_t sb, nb;
  std::memcpy(&sb, &s, 4);
  std::memcpy(&nb, &neg_s, 4);
  for (int64_t i = 0; i < m; ++i) {
    const float x = (w[i] - v[i]) / s;
    const uint32_t pos = 0u - static_cast<uint32_t>(x >= kPullThreshold);  // NaN: neither
    const uint32_t neg = 0u - static_cast<uint32_t>(x <= -kPullThreshold);
    const uint32_t stepb = (sb & pos) | (nb & neg);  // +0.0f where the code is 0
    float step;
    std::memcpy(&step, &stepb, 4);
    v[i] = v[i] + step;
    code[i] = static_cast<uint8_t>((pos & 3u) | (neg & 2u));
  }
}

// One piece's part of a worker's decode from its code bytes (3 = +, 2 = -).
CDSGD_CLONES
void pull_decode_segment(const uint8_t* code, float* v, float* out, int64_t m, float s) {
  const float neg_s = -s;
  uint32_t sb, nb;
  std::memcpy(&sb, &s, 4);
  std::memcpy(&nb, &neg_s, 4);
  for (int64_t i = 0; i < m; ++i) {
    const uint32_t pos = 0u - static_cast<uint32_t>(code[i] == 3);
    const uint32_t neg = 0u - static_cast<uint32_t>(code[i] == 2);
    const uint32_t stepb = (sb & pos) | (nb & neg);
    float step;
    std::memcpy(&step, &stepb, 4);
    v[i] = v[i] + step;
  }
  if (out != nullptr) std::memcpy(out, v, static_cast<size_t>(m) * 4);
}

}  // namespace

void pull_scales(const float* w, const float* v, const Piece* pieces, int64_t npieces, float* scales) {
  for (int64_t k = 0; k < npieces; ++k) {
    const int64_t m = pieces[k].end - pieces[k].begin;
    const double mean = sum_of_squares(w + pieces[k].begin, v + pieces[k].begin, m) / static_cast<double>(m > 0 ? m : 1);
    const float step = static_cast<float>(std::sqrt(mean) * kPullLevel);
    scales[k] = step == 0.0f ? 1.0f : step;  // all zeros: every code is 0 anyway
  }
}

void pull_encode(const float* w, float* v, int64_t n, const Piece* pieces, int64_t npieces, uint32_t* wire,
                 int threads) {
  parallel_for(n, kValueAlign, threads, [&](int64_t b, int64_t e) {
    alignas(64) uint8_t code[kChunk];
    alignas(64) uint32_t packed[kChunk / kValuesPerWord];
    int64_t first = first_piece(pieces, npieces, b);
    for (int64_t c0 = b; c0 < e; c0 += kChunk) {
      const int64_t m = std::min(kChunk, e - c0);
      for_segments(pieces, npieces, first, c0, c0 + m, [&](int64_t lo, int64_t hi, float s) {
        pull_encode_segment(w + lo, v + lo, code + (lo - c0), hi - lo, s);
      });
      const int64_t padded = (m + kValuesPerWord - 1) / kValuesPerWord * kValuesPerWord;  // the last word's padding: 0
      for (int64_t i = m; i < padded; ++i) code[i] = 0;
      auto* bytes = reinterpret_cast<uint8_t*>(packed);
      for (int64_t k = 0; k < padded / 4; ++k) {  // four code bytes -> one packed byte (quantize_range)
        uint32_t x;
        std::memcpy(&x, code + 4 * k, 4);
        bytes[k] = static_cast<uint8_t>((x * 0x40100401u) >> 24);
      }
      wire_encode_range(packed, wire + c0 / kValuesPerWord, 0, padded / kValuesPerWord);
    }
  });
}

int64_t pull_decode(const uint32_t* wire, float* v, float* out, int64_t n, const Piece* pieces, int64_t npieces,
                    int threads) {
  // Every word is checked before V changes: a corrupt payload leaves V as it was.
  const int64_t invalid = count_invalid_words(wire, packed_words(n));
  if (invalid) return invalid;
  parallel_for(n, kValueAlign, threads, [&](int64_t b, int64_t e) {
    alignas(64) uint32_t packed[kChunk / kValuesPerWord];
    alignas(64) uint8_t code[kChunk];
    int64_t first = first_piece(pieces, npieces, b);
    for (int64_t c0 = b; c0 < e; c0 += kChunk) {
      const int64_t m = std::min(kChunk, e - c0);
      const int64_t nw = packed_words(m);
      wire_decode_range(wire + c0 / kValuesPerWord, packed, 0, nw);
      const auto* bytes = reinterpret_cast<const uint8_t*>(packed);
      for (int64_t k = 0; k < (m + 3) / 4; ++k) {  // packed byte -> four codes, as dequantize_range
        const uint32_t x = bytes[k];
        const uint32_t y = ((x >> 6) | (x << 4) | (x << 14) | (x << 24)) & 0x03030303u;
        std::memcpy(code + 4 * k, &y, 4);
      }
      for_segments(pieces, npieces, first, c0, c0 + m, [&](int64_t lo, int64_t hi, float s) {
        // outside every piece the encoder wrote code 0: v + 0, as there
        pull_decode_segment(code + (lo - c0), v + lo, out == nullptr ? nullptr : out + lo, hi - lo, s);
      });
    }
  });
  return 0;
}

int64_t count_nonfinite(const float* x, int64_t n, int threads) {
  std::atomic<int64_t> bad{0};
  parallel_for(n, kValueAlign, threads, [&](int64_t b, int64_t e) { bad += count_nonfinite_range(x, b, e); });
  return bad.load();
}

}  // namespace cdsgd
