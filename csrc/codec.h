// cdsgd_mx native codec: threshold 2-bit quantization with error feedback, and the wire format
// that carries the codes through MXNet's unmodified parameter server.
//
// Packed layout (MXNet's own, gradient_compression-inl.h): 16 values per 32-bit word; value j of
// a block sits in byte j/4 of the word, bits 7-6 for j%4==0 down to bits 1-0 for j%4==3.
// Codes: 11 = +threshold, 10 = -threshold, 00 = 0 (01 never written; read as 0).
//
// Wire layout ("ternary16"): one float32 per packed word, bit pattern 0x3F800000 + v where
// v = sum_j d_j * 3^j over the 16 values of the word, d = 1 for +, 2 for -, 0 for 0.
// v < 3^16 < 2^26, so every wire float is a finite normal in [1, 73): the server's float merge
// (x + 0) keeps it bit-exact, which raw packed words (NaN, denormal, -0 patterns) would not be.
#pragma once
#include <cstdint>

namespace cdsgd {

constexpr int64_t kValuesPerWord = 16;
constexpr uint32_t kWireBias = 0x3F800000u;  // bit pattern of 1.0f
constexpr uint32_t kWireLimit = 43046721u;   // 3^16: number of valid word values

inline int64_t packed_words(int64_t n) { return (n + kValuesPerWord - 1) / kValuesPerWord; }

// residual += grad; emit +t / -t / 0 by MXNet's rule; residual -= emitted; write ceil(n/16) words.
// Returns how many residual entries are non-finite afterwards (NaN/Inf propagate as in MXNet).
int64_t quantize_2bit(const float* grad, float* residual, uint32_t* packed, int64_t n,
                      float threshold, int threads);

// out = decoded (accumulate=false) or out += decoded (accumulate=true), first n values.
void dequantize_2bit(const uint32_t* packed, float* out, int64_t n, float threshold,
                     bool accumulate, int threads);

// packed words -> wire floats (as raw bits), nwords of each.
void wire_encode(const uint32_t* packed, uint32_t* wire, int64_t nwords, int threads);

// wire floats -> packed words. Returns the number of wire words that are not valid codes
// (those decode to 0 words); the caller treats any as a corrupt payload.
int64_t wire_decode(const uint32_t* wire, uint32_t* packed, int64_t nwords, int threads);

// The server's decode of a bucket: out[0..n) = sum over `rows` wire rows (nwords words each,
// row r at wire + r * stride: a row may be followed by other values, e.g. a proof tag) of the
// decoded codes. Returns the number of invalid wire words (they decode to 0); the caller
// treats any as a corrupt payload.
int64_t decode_sum(const uint32_t* wire, int64_t rows, int64_t nwords, int64_t stride, float* out, int64_t n,
                   float threshold, int threads);

// The server's fused decode and SGD step of a bucket: the rows' decoded sum (as decode_sum
// computes it, never stored) is the gradient of MXNet's sgd_mom_update (mom != nullptr) or
// sgd_update, applied to weight (and mom) in place, run by run: each run of parameters has its
// own learning rate and weight decay (float32, as MXNet's kernel receives them). Bit for bit
// what decode_sum followed by MXNet's own update gives. Checks every wire word first: returns
// the number of invalid ones and changes nothing if there are any, else 0.
struct SgdRun { int64_t begin, end; float lr, wd; };
struct SgdHyper { float momentum, rescale, clip; };  // clip < 0: none
int64_t decode_sgd(const uint32_t* wire, int64_t rows, int64_t nwords, int64_t stride, float* weight,
                   float* mom, int64_t n, float threshold, const SgdRun* runs, int64_t nruns, const SgdHyper& h,
                   int threads);
// The same SGD step from an fp32 gradient (the server's fp32 rounds): weight[0, n) and mom take
// MXNet's sgd_mom_update / sgd_update from grad, run by run; values outside every run are left.
void sgd(const float* grad, float* weight, float* mom, int64_t n, const SgdRun* runs, int64_t nruns,
         const SgdHyper& h, int threads);

// 2-bit pulls (pull_compression.py): V, the weights every worker holds, follows W by the codes
// of W - V. A bucket's pieces are sorted, disjoint ranges [begin, end) of its values, each with
// its own scale s > 0; a value outside every piece has code 0.
struct Piece { int64_t begin, end; float scale; };

// The rule (pull_compression.py): a piece's step s is kPullLevel times the root mean square of
// its change e = w - v, and a value moves by +-s where |e| >= kPullThreshold * s (0.875 RMS).
// Chosen by measurement: with error feedback an overshoot is taken back the next round, and a
// step larger than the threshold keeps V nearer W than the plain threshold rule (step = threshold
// = RMS): 0.80 against 1.39 steps of SGD with momentum 0.9 behind, 0.60 against 0.73 without.
constexpr double kPullLevel = 1.75;
constexpr float kPullThreshold = 0.5f;

// The step of each piece: kPullLevel times the root mean square of w - v over it (float32
// differences, their squares summed in float64 in a fixed order, see sum_of_squares), as
// float32; 1 where it is 0.
void pull_scales(const float* w, const float* v, const Piece* pieces, int64_t npieces, float* scales);

// The norms a down payload carries for the workers' log: norms[0] = sum of (w - v)^2 (float32
// differences), norms[1] = sum of w^2, each squared and summed in float64 in a fixed order, in
// one pass over w and v.
void pull_norms(const float* w, const float* v, int64_t n, double* norms);

// The server's encode, one pass: per value e = w - v, x = e / s; code +1 where x >= 1/2, -1
// where x <= -1/2, else 0; v += code * s; the codes written as ceil(n/16) ternary16 wire words.
// (Computed as e against s / 2 wherever that gives the same codes: csrc/codec_cpu.cc.)
// The same float32 operations as quantize_2bit(0, e / s, threshold 1/2), then
// dequantize_2bit(threshold 1) * s + v, so the result is bit for bit theirs.
void pull_encode(const float* w, float* v, int64_t n, const Piece* pieces, int64_t npieces, uint32_t* wire,
                 int threads);

// Where a compressed pull aims (issue 40): V would stay about one update behind W (0.8 under SGD
// with momentum 0.9), and under momentum the workers' gradients at the lagging V cost accuracy;
// the server encodes toward target = w + lookahead * (w - prev), W plus the part of its next
// update that its last one predicts (lookahead = the optimizer's momentum), in one pass that
// also sets prev = w. float32, each operation rounded (built with -ffp-contract=off).
void pull_target(const float* w, float* prev, float* target, int64_t n, float lookahead, int threads);

// A worker's decode, one pass: v += code * s per value, then out = v (out may be null). Checks
// every wire word first: returns the number of invalid ones and changes nothing if there are any.
int64_t pull_decode(const uint32_t* wire, float* v, float* out, int64_t n, const Piece* pieces, int64_t npieces,
                    int threads);

// Number of NaN/Inf values among x[0..n).
int64_t count_nonfinite(const float* x, int64_t n, int threads);

// Threads used when a call passes threads <= 0.
int default_threads();
void set_default_threads(int threads);

}  // namespace cdsgd
