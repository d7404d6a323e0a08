// CPU kernels of the codec. Plain loops over small cache-resident chunks, written so that the
// compiler vectorizes each pass; target_clones builds AVX-512 / AVX2 / baseline copies and picks
// one at load time. Work is split across threads on chunk boundaries, so the result does not
// depend on the thread count.
#include "codec.h"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(CDSGD_NO_CLONES)
#define CDSGD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CDSGD_CLONES
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(CDSGD_NO_CLONES)
#define CDSGD_AVX2  // one kernel written with AVX2 intrinsics, chosen at run time (digits_to_wire)
#include <immintrin.h>
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

// A wire word's value v = hi * 3^8 + lo, its two halves of eight base-3 digits; an out-of-range
// word (corrupt payload) counts in `invalid` and reads as 0. hi = v / 6561 by one multiply (exact
// for every v < 3^16, checked exhaustively).
struct Halves { uint32_t hi, lo; };
inline Halves halves_of(uint32_t word, int64_t& invalid) {
  uint32_t v = word - kWireBias;  // wraps to a huge value below the bias
  const bool bad = v >= kWireLimit;
  invalid += bad;
  v = bad ? 0u : v;
  const uint32_t hi = static_cast<uint32_t>((uint64_t{v} * 20947867ull) >> 37);
  return {hi, v - 6561u * hi};
}

// Inverse of wire_encode_range: one table lookup per half.
CDSGD_CLONES
int64_t wire_decode_range(const uint32_t* wire, uint32_t* packed, int64_t begin, int64_t end) {
  int64_t invalid = 0;
  for (int64_t w = begin; w < end; ++w) {
    const Halves h = halves_of(wire[w], invalid);
    packed[w] = kHalfWord.codes[h.lo] | (uint32_t{kHalfWord.codes[h.hi]} << 16);
  }
  return invalid;
}

// Wire word -> its sixteen digits, each half's eight from one table entry of eight bytes; a
// corrupt word gives digits 0 and counts, as in wire_decode_range.
struct DigitTable {
  uint64_t digits[6561];
  DigitTable() {
    for (uint32_t v = 0; v < 6561; ++v) {
      uint64_t r = 0;
      for (uint32_t j = 0, x = v; j < 8; ++j, x /= 3) r |= uint64_t{x % 3} << (8 * j);
      digits[v] = r;
    }
  }
};
const DigitTable kDigits;

CDSGD_CLONES
int64_t wire_to_digits(const uint32_t* wire, uint8_t* d, int64_t nwords) {
  int64_t invalid = 0;
  for (int64_t w = 0; w < nwords; ++w) {
    const Halves h = halves_of(wire[w], invalid);
    std::memcpy(d + kValuesPerWord * w, &kDigits.digits[h.lo], 8);
    std::memcpy(d + kValuesPerWord * w + 8, &kDigits.digits[h.hi], 8);
  }
  return invalid;
}

// The value a digit stands for, from the bits of +step and -step: +step for 1, -step for 2, +0
// for 0, on masks so that the loops using it vectorize (see quantize_range).
inline float digit_step(uint8_t d, uint32_t plus, uint32_t minus) {
  const uint32_t bits = (plus & (0u - static_cast<uint32_t>(d == 1))) | (minus & (0u - static_cast<uint32_t>(d == 2)));
  float step;
  std::memcpy(&step, &bits, 4);
  return step;
}

inline uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// Digits -> +t / -t / 0 (out = or out +=): what dequantize_range gives for the same codes.
CDSGD_CLONES
void dequantize_digits(const uint8_t* d, float* out, int64_t m, float t, bool accumulate) {
  const uint32_t plus = bits_of(t), minus = bits_of(-t);
  for (int64_t i = 0; i < m; ++i) {  // (the compiler unswitches `accumulate`)
    const float step = digit_step(d[i], plus, minus);
    out[i] = accumulate ? out[i] + step : step;
  }
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
  // Per chunk of values: each row's words -> digits in L1 -> added into out (the first
  // row writes). Sums run in row order, so the result does not depend on the thread count.
  parallel_for(n, kValueAlign, threads, [&](int64_t b, int64_t e) {
    alignas(64) uint8_t digit[kChunk];
    int64_t bad = 0;
    for (int64_t c0 = b; c0 < e; c0 += kChunk) {
      const int64_t m = std::min(kChunk, e - c0);
      const int64_t w0 = c0 / kValuesPerWord, nw = packed_words(m);
      if (rows == 0) std::fill(out + c0, out + c0 + m, 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        bad += wire_to_digits(wire + r * stride + w0, digit, nw);
        dequantize_digits(digit, out + c0, m, threshold, r > 0);
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
    alignas(64) uint8_t digit[kChunk];
    alignas(64) float g[kChunk];
    int64_t first = std::upper_bound(runs, runs + nruns, b, [](int64_t v, const SgdRun& r) { return v < r.end; }) - runs;
    for (int64_t c0 = b; c0 < e; c0 += kChunk) {
      const int64_t m = std::min(kChunk, e - c0), c1 = c0 + m;
      const int64_t w0 = c0 / kValuesPerWord, nw = packed_words(m);
      if (rows == 0) std::fill(g, g + m, 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        wire_to_digits(wire + r * stride + w0, digit, nw);
        dequantize_digits(digit, g, m, threshold, r > 0);
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

void sgd(const float* grad, float* weight, float* mom, int64_t n, const SgdRun* runs, int64_t nruns,
         const SgdHyper& h, int threads) {
  parallel_for(n, kValueAlign, threads, [&](int64_t b, int64_t e) {
    int64_t k = std::upper_bound(runs, runs + nruns, b, [](int64_t v, const SgdRun& r) { return v < r.end; }) - runs;
    for (; k < nruns && runs[k].begin < e; ++k) {
      const int64_t lo = std::max(b, runs[k].begin), hi = std::min(e, runs[k].end);
      if (lo < hi) sgd_range(grad + lo, weight + lo, mom == nullptr ? nullptr : mom + lo, hi - lo, h, runs[k].lr, runs[k].wd);
    }
  });
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

// Eight float64 lanes added in a fixed tree: the same sum whatever the machine.
double sum_lanes(const double* l) { return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])); }

// sum of (w - v)^2 over [0, m) in float64, in a fixed order whatever the thread count: eight
// lanes (value i into lane i % 8, sequentially), then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
// v null: the squares of w itself.
CDSGD_CLONES
double sum_of_squares(const float* w, const float* v, int64_t m) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  if (v == nullptr) {
    for (; i + 8 <= m; i += 8)
      for (int j = 0; j < 8; ++j) {
        const double x = static_cast<double>(w[i + j]);
        lane[j] += x * x;
      }
    for (int j = 0; i < m; ++i, ++j) {
      const double x = static_cast<double>(w[i]);
      lane[j] += x * x;
    }
    return sum_lanes(lane);
  }
  for (; i + 8 <= m; i += 8)
    for (int j = 0; j < 8; ++j) {
      const double d = static_cast<double>(w[i + j] - v[i + j]);
      lane[j] += d * d;
    }
  for (int j = 0; i < m; ++i, ++j) {
    const double d = static_cast<double>(w[i] - v[i]);
    lane[j] += d * d;
  }
  return sum_lanes(lane);
}

// One piece's part of the server's encode: one wire digit per value (1 = +, 2 = -, 0) and V's
// update, on masks so that it vectorizes (see quantize_range).
// The rule divides: x = e / s, code +1 where x >= 1/2, -1 where x <= -1/2. Where s / 2 is exact
// and normal (s >= 2^-125) that is e >= s / 2 (e <= -s / 2) exactly: division rounds
// monotonically, and no float e below s / 2 has e / s round up to 1/2 (the gap below s / 2 is
// at least (s / 2) 2^-24, a quotient gap of 2^-25: all of the gap below 1/2). So the compare
// gives the division's codes bit for bit at about half the cost of the pass; tiny steps divide
// (below 2^-125 the compare does differ, e.g. s = 0x1.000002p-126, e = 2^-127).
static_assert(kPullThreshold == 0.5f, "the encode compares e with s / 2");
constexpr float kExactHalf = 0x1p-125f;

CDSGD_CLONES
void pull_encode_segment(const float* w, float* v, uint8_t* digit, int64_t m, float s) {
  if (s == 0.0f) {  // outside every piece: code 0, v + 0 (as the unfused v += step did)
    for (int64_t i = 0; i < m; ++i) { v[i] = v[i] + 0.0f; digit[i] = 0; }
    return;
  }
  const bool divide = !(s >= kExactHalf && s <= std::numeric_limits<float>::max());  // (an infinite step divides too)
  const float t = divide ? kPullThreshold : 0.5f * s, neg_t = -t;
  const float neg_s = -s;
  uint32_t sb, nb;
  std::memcpy(&sb, &s, 4);
  std::memcpy(&nb, &neg_s, 4);
  for (int64_t i = 0; i < m; ++i) {  // (the compiler unswitches `divide`: two loops)
    const float e = w[i] - v[i];
    const float x = divide ? e / s : e;
    const uint32_t pos = 0u - static_cast<uint32_t>(x >= t);  // NaN: neither
    const uint32_t neg = 0u - static_cast<uint32_t>(x <= neg_t);
    const uint32_t stepb = (sb & pos) | (nb & neg);  // +0.0f where the code is 0
    float step;
    std::memcpy(&step, &stepb, 4);
    v[i] = v[i] + step;
    digit[i] = static_cast<uint8_t>((pos & 1u) | (neg & 2u));
  }
}

// Sixteen wire digits per word (value j's at d[16 w + j]) -> the wire word kWireBias +
// sum_j d_j 3^j, as wire_encode_range makes it from the same codes.
constexpr uint32_t kPow3[kValuesPerWord] = {1u, 3u, 9u, 27u, 81u, 243u, 729u, 2187u, 6561u, 19683u, 59049u,
                                            177147u, 531441u, 1594323u, 4782969u, 14348907u};
CDSGD_CLONES
void digits_to_wire_loop(const uint8_t* d, uint32_t* wire, int64_t begin, int64_t end) {
  for (int64_t w = begin; w < end; ++w) {
    uint32_t x = 0;
    for (int j = 0; j < kValuesPerWord; ++j) x += static_cast<uint32_t>(d[kValuesPerWord * w + j]) * kPow3[j];
    wire[w] = kWireBias + x;
  }
}

#if defined(CDSGD_AVX2)
// The same with AVX2's multiply-adds, eight words at a time: digit pairs (1, 3), then groups of
// four (1, 9) in 32 bits, packed to 16 bits and joined (1, 81) into halves of eight digits, then
// (1, 6561) into words. Every partial sum is exact: a group <= 80, a half <= 6560, a word < 3^16.
// About 8x the loop's speed, which the compiler vectorizes only as widen-multiply-reduce.
__attribute__((target("avx2"))) int64_t digits_to_wire_avx2(const uint8_t* d, uint32_t* wire, int64_t nwords) {
  const __m256i by3 = _mm256_set1_epi16(0x0301), by9 = _mm256_set1_epi32(0x00090001);
  const __m256i by81 = _mm256_set1_epi32(0x00510001), by6561 = _mm256_set1_epi32(0x19A10001);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7), bias = _mm256_set1_epi32(static_cast<int>(kWireBias));
  int64_t w = 0;
  for (; w + 8 <= nwords; w += 8) {
    __m256i group[4];  // two words' four groups each
    for (int k = 0; k < 4; ++k) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + kValuesPerWord * w + 32 * k));
      group[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(x, by3), by9);
    }
    const __m256i half0 = _mm256_madd_epi16(_mm256_packs_epi32(group[0], group[1]), by81);
    const __m256i half1 = _mm256_madd_epi16(_mm256_packs_epi32(group[2], group[3]), by81);
    const __m256i words = _mm256_madd_epi16(_mm256_packs_epi32(half0, half1), by6561);  // words 0 2 4 6 | 1 3 5 7
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(wire + w),
                        _mm256_add_epi32(_mm256_permutevar8x32_epi32(words, order), bias));
  }
  return w;
}
#endif

void digits_to_wire(const uint8_t* d, uint32_t* wire, int64_t nwords) {
  int64_t done = 0;
#if defined(CDSGD_AVX2)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) done = digits_to_wire_avx2(d, wire, nwords);
#endif
  digits_to_wire_loop(d, wire, done, nwords);
}

// One piece's part of a worker's decode from its wire digits: v += code * s, and out = v in the
// same pass (out may be null).
CDSGD_CLONES
void pull_decode_segment(const uint8_t* digit, float* v, float* out, int64_t m, float s) {
  const uint32_t plus = bits_of(s), minus = bits_of(-s);
  for (int64_t i = 0; i < m; ++i) {  // (the compiler unswitches `out`)
    const float x = v[i] + digit_step(digit[i], plus, minus);
    v[i] = x;
    if (out != nullptr) out[i] = x;
  }
}

CDSGD_CLONES
void pull_target_range(const float* w, float* prev, float* target, int64_t b, int64_t e, float lookahead) {
  for (int64_t i = b; i < e; ++i) {
    const float x = w[i], d = lookahead * (x - prev[i]);
    target[i] = x + d;  // (-ffp-contract=off: three roundings, as numpy's float32)
    prev[i] = x;
  }
}

}  // namespace

void pull_target(const float* w, float* prev, float* target, int64_t n, float lookahead, int threads) {
  parallel_for(n, kValueAlign, threads,
               [&](int64_t b, int64_t e) { pull_target_range(w, prev, target, b, e, lookahead); });
}

void pull_scales(const float* w, const float* v, const Piece* pieces, int64_t npieces, float* scales) {
  for (int64_t k = 0; k < npieces; ++k) {
    const int64_t m = pieces[k].end - pieces[k].begin;
    const double mean = sum_of_squares(w + pieces[k].begin, v + pieces[k].begin, m) / static_cast<double>(m > 0 ? m : 1);
    const float step = static_cast<float>(std::sqrt(mean) * kPullLevel);
    scales[k] = step == 0.0f ? 1.0f : step;  // all zeros: every code is 0 anyway
  }
}

// The norms in two vectorized passes, each summing as the one-pass loop did (its lanes and
// order; the same bits): one loop with both sums, GCC left scalar, 5x slower.
void pull_norms(const float* w, const float* v, int64_t n, double* norms) {
  norms[0] = sum_of_squares(w, v, n);
  norms[1] = sum_of_squares(w, nullptr, n);
}

void pull_encode(const float* w, float* v, int64_t n, const Piece* pieces, int64_t npieces, uint32_t* wire,
                 int threads) {
  parallel_for(n, kValueAlign, threads, [&](int64_t b, int64_t e) {
    alignas(64) uint8_t digit[kChunk];
    int64_t first = first_piece(pieces, npieces, b);
    for (int64_t c0 = b; c0 < e; c0 += kChunk) {
      const int64_t m = std::min(kChunk, e - c0);
      for_segments(pieces, npieces, first, c0, c0 + m, [&](int64_t lo, int64_t hi, float s) {
        pull_encode_segment(w + lo, v + lo, digit + (lo - c0), hi - lo, s);
      });
      const int64_t padded = (m + kValuesPerWord - 1) / kValuesPerWord * kValuesPerWord;  // the last word's padding: 0
      for (int64_t i = m; i < padded; ++i) digit[i] = 0;
      digits_to_wire(digit, wire + c0 / kValuesPerWord, padded / kValuesPerWord);
    }
  });
}

int64_t pull_decode(const uint32_t* wire, float* v, float* out, int64_t n, const Piece* pieces, int64_t npieces,
                    int threads) {
  // Every word is checked before V changes: a corrupt payload leaves V as it was.
  const int64_t invalid = count_invalid_words(wire, packed_words(n));
  if (invalid) return invalid;
  parallel_for(n, kValueAlign, threads, [&](int64_t b, int64_t e) {
    alignas(64) uint8_t digit[kChunk];
    int64_t first = first_piece(pieces, npieces, b);
    for (int64_t c0 = b; c0 < e; c0 += kChunk) {
      const int64_t m = std::min(kChunk, e - c0);
      wire_to_digits(wire + c0 / kValuesPerWord, digit, packed_words(m));
      for_segments(pieces, npieces, first, c0, c0 + m, [&](int64_t lo, int64_t hi, float s) {
        // outside every piece the encoder wrote digit 0: v + 0, as there
        pull_decode_segment(digit + (lo - c0), v + lo, out == nullptr ? nullptr : out + lo, hi - lo, s);
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
