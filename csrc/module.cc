// Python bindings of the codec. Arrays arrive as DLPack capsules (MXNet NDArrays, zero-copy) or
// as buffer-protocol objects (numpy). Every argument is checked here, with an error that names
// it; kernels then run with the GIL released so a communication thread can use them while the
// main thread trains.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "codec.h"
#ifdef CDSGD_WITH_CUDA
#include "codec_cuda.h"
#endif

namespace py = pybind11;

namespace {

// DLPack v0.2 ABI (the layout MXNet 1.9.1 and numpy share).
struct DLContext { int32_t device_type; int32_t device_id; };
struct DLDataType { uint8_t code; uint8_t bits; uint16_t lanes; };
struct DLTensor {
  void* data; DLContext ctx; int32_t ndim; DLDataType dtype;
  int64_t* shape; int64_t* strides; uint64_t byte_offset;
};
struct DLManagedTensor { DLTensor dl_tensor; void* manager_ctx; void (*deleter)(DLManagedTensor*); };

constexpr int kDLCPU = 1, kDLGPU = 2, kDLCPUPinned = 3;
enum Kind { kFloat32, kWord32 };  // what an argument must hold

// One argument, resolved to a pointer and its facts.
struct View {
  void* data = nullptr;
  int64_t size = 0;
  bool gpu = false;
  int device = 0;
  py::object keep;  // keeps a buffer alive while in use
  std::vector<int64_t> shape;
};

// Plain string building, no iostreams: some toolchains link libstdc++ statically into the
// module, and its stream locale is then uninitialized (seen to crash on an H100 image).
std::string shape_str(const std::vector<int64_t>& s) {
  std::string o = "(";
  for (size_t i = 0; i < s.size(); ++i) o += std::to_string(s[i]) + (s.size() == 1 || i + 1 < s.size() ? "," : "");
  return o + ")";
}

void check_dtype(const char* name, Kind kind, char code, int bits, const std::string& shown) {
  const bool is_f32 = code == 'f' && bits == 32;
  const bool ok = kind == kFloat32 ? is_f32 : (bits == 32 && (code == 'f' || code == 'i' || code == 'u'));
  if (!ok)
    throw py::type_error(std::string(name) + " must be " +
                         (kind == kFloat32 ? "float32" : "a 4-byte array (float32, int32 or uint32)") +
                         ", got " + shown);
}

View from_capsule(const char* name, Kind kind, py::handle obj) {
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(obj.ptr(), "dltensor"));
  if (m == nullptr) {
    PyErr_Clear();
    throw py::type_error(std::string(name) + ": DLPack capsule was already consumed");
  }
  const DLTensor& t = m->dl_tensor;
  const char code = t.dtype.code == 2 ? 'f' : t.dtype.code == 0 ? 'i' : t.dtype.code == 1 ? 'u' : '?';
  if (t.dtype.lanes != 1) throw py::type_error(std::string(name) + " must have one lane per element");
  check_dtype(name, kind, code, t.dtype.bits,
              std::string(1, code) + std::to_string(t.dtype.bits) + " DLPack tensor");
  View v;
  v.size = 1;
  int64_t expect = 1;
  bool contiguous = true;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.strides != nullptr && t.shape[i] > 1 && t.strides[i] != expect) contiguous = false;
    expect *= t.shape[i];
  }
  for (int i = 0; i < t.ndim; ++i) { v.size *= t.shape[i]; v.shape.push_back(t.shape[i]); }
  if (!contiguous) throw py::value_error(std::string(name) + " must be contiguous");
  v.data = static_cast<char*>(t.data) + t.byte_offset;
  if (t.ctx.device_type == kDLGPU) { v.gpu = true; v.device = t.ctx.device_id; }
  else if (t.ctx.device_type != kDLCPU && t.ctx.device_type != kDLCPUPinned)
    throw py::value_error(std::string(name) + " is on an unsupported device type " +
                          std::to_string(t.ctx.device_type) + " (CPU or CUDA only)");
  v.keep = py::reinterpret_borrow<py::object>(obj);
  return v;
}

View from_buffer(const char* name, Kind kind, py::handle obj, bool writable) {
  if (!PyObject_CheckBuffer(obj.ptr()))
    throw py::type_error(std::string(name) + " must be an MXNet NDArray, a numpy array or a DLPack capsule, got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  py::buffer buf = py::reinterpret_borrow<py::buffer>(obj);
  py::buffer_info info;
  try {
    info = buf.request(writable);
  } catch (py::error_already_set&) {
    throw py::value_error(std::string(name) + (writable ? " must be a writable buffer" : " is not a readable buffer"));
  }
  std::string fmt = info.format;
  char code = '?';
  if (fmt == "f") code = 'f';
  else if (fmt == "i" || fmt == "l" || fmt == "q" || fmt == "b" || fmt == "h") code = 'i';
  else if (fmt == "I" || fmt == "L" || fmt == "Q" || fmt == "B" || fmt == "H") code = 'u';
  else if (fmt == "d" || fmt == "e") code = 'f';
  check_dtype(name, kind, code, static_cast<int>(info.itemsize * 8),
              "buffer of format '" + fmt + "' (" + std::to_string(info.itemsize) + " bytes)");
  View v;
  v.size = info.size;
  int64_t expect = info.itemsize;
  for (int i = static_cast<int>(info.ndim) - 1; i >= 0; --i) {
    if (info.shape[i] > 1 && info.strides[i] != expect)
      throw py::value_error(std::string(name) + " must be contiguous");
    expect *= info.shape[i];
  }
  for (auto s : info.shape) v.shape.push_back(s);
  v.data = info.ptr;
  v.keep = buf;
  return v;
}

View view(const char* name, Kind kind, py::handle obj, bool writable) {
  if (PyCapsule_CheckExact(obj.ptr())) return from_capsule(name, kind, obj);
  return from_buffer(name, kind, obj, writable);
}

void check_size(const char* name, const View& v, int64_t expected, const char* rule) {
  if (v.size != expected)
    throw py::value_error(std::string(name) + " has " + std::to_string(v.size) + " elements " +
                          shape_str(v.shape) + ", expected " + std::to_string(expected) + " (" + rule + ")");
}

// All arrays of one call on one device; returns true for CUDA.
bool same_device(std::initializer_list<std::pair<const char*, const View*>> views) {
  const View* first = views.begin()->second;
  for (auto& [name, v] : views) {
    if (v->gpu != first->gpu || v->device != first->device)
      throw py::value_error(std::string(name) + " is on a different device from " + views.begin()->first);
  }
#ifndef CDSGD_WITH_CUDA
  if (first->gpu)
    throw py::value_error(std::string(views.begin()->first) +
                          " is a GPU array but cdsgd_mx was built without CUDA (set CDSGD_CUDA=1 and reinstall where nvcc is found)");
#endif
  return first->gpu;
}

void check_no_overlap(const char* a, const View& va, int64_t bytes_a, const char* b, const View& vb, int64_t bytes_b) {
  auto pa = static_cast<const char*>(va.data), pb = static_cast<const char*>(vb.data);
  if (bytes_a > 0 && bytes_b > 0 && pa < pb + bytes_b && pb < pa + bytes_a)
    throw py::value_error(std::string(a) + " and " + b + " must not share memory");
}

void check_threshold(float t) {
  if (!(t > 0.0f) || !std::isfinite(t))
    throw py::value_error("threshold must be a finite number > 0, got " + std::to_string(t));
}

// With codes_to (host memory, packed's size), the codes are also copied there before the call
// returns: on a GPU in the same wait as the kernel (a device bucket's round pays one, not two).
int64_t quantize(py::handle grad, py::handle residual, py::handle packed, float threshold, int threads,
                 py::handle codes_to) {
  check_threshold(threshold);
  View g = view("grad", kFloat32, grad, false), r = view("residual", kFloat32, residual, true),
       p = view("packed", kWord32, packed, true);
  check_size("residual", r, g.size, "same as grad");
  check_size("packed", p, cdsgd::packed_words(g.size), "ceil(grad.size / 16)");
  check_no_overlap("grad", g, g.size * 4, "residual", r, r.size * 4);
  check_no_overlap("residual", r, r.size * 4, "packed", p, p.size * 4);
  check_no_overlap("grad", g, g.size * 4, "packed", p, p.size * 4);
  const bool gpu = same_device({{"grad", &g}, {"residual", &r}, {"packed", &p}});
  View h;
  if (!codes_to.is_none()) {
    h = view("codes_to", kWord32, codes_to, true);
    check_size("codes_to", h, p.size, "same as packed");
    if (h.gpu) throw py::value_error("codes_to must be host memory, got a GPU array");
    check_no_overlap("packed", p, p.size * 4, "codes_to", h, h.size * 4);
  }
  auto* gp = static_cast<const float*>(g.data);
  auto* rp = static_cast<float*>(r.data);
  auto* pp = static_cast<uint32_t*>(p.data);
  auto* hp = static_cast<uint32_t*>(h.data);
  py::gil_scoped_release nogil;
#ifdef CDSGD_WITH_CUDA
  if (gpu) return cdsgd::cuda::quantize_2bit(gp, rp, pp, g.size, threshold, g.device, hp);
#endif
  (void)gpu;
  const int64_t bad = cdsgd::quantize_2bit(gp, rp, pp, g.size, threshold, threads);
  if (hp != nullptr && p.size > 0) std::memcpy(hp, pp, static_cast<size_t>(p.size) * 4);
  return bad;
}

void dequantize(py::handle packed, py::handle out, float threshold, bool accumulate, int threads) {
  check_threshold(threshold);
  View p = view("packed", kWord32, packed, false), o = view("out", kFloat32, out, true);
  check_size("packed", p, cdsgd::packed_words(o.size), "ceil(out.size / 16)");
  check_no_overlap("packed", p, p.size * 4, "out", o, o.size * 4);
  const bool gpu = same_device({{"packed", &p}, {"out", &o}});
  auto* pp = static_cast<const uint32_t*>(p.data);
  auto* op = static_cast<float*>(o.data);
  py::gil_scoped_release nogil;
#ifdef CDSGD_WITH_CUDA
  if (gpu) return cdsgd::cuda::dequantize_2bit(pp, op, o.size, threshold, accumulate, o.device);
#endif
  (void)gpu;
  cdsgd::dequantize_2bit(pp, op, o.size, threshold, accumulate, threads);
}

void wire_encode(py::handle packed, py::handle wire, int threads) {
  View p = view("packed", kWord32, packed, false), w = view("wire", kWord32, wire, true);
  check_size("wire", w, p.size, "same as packed");
  check_no_overlap("packed", p, p.size * 4, "wire", w, w.size * 4);
  const bool gpu = same_device({{"packed", &p}, {"wire", &w}});
  auto* pp = static_cast<const uint32_t*>(p.data);
  auto* wp = static_cast<uint32_t*>(w.data);
  py::gil_scoped_release nogil;
#ifdef CDSGD_WITH_CUDA
  if (gpu) return cdsgd::cuda::wire_encode(pp, wp, p.size, p.device);
#endif
  (void)gpu;
  cdsgd::wire_encode(pp, wp, p.size, threads);
}

int64_t wire_decode(py::handle wire, py::handle packed, int threads) {
  View w = view("wire", kWord32, wire, false), p = view("packed", kWord32, packed, true);
  check_size("packed", p, w.size, "same as wire");
  check_no_overlap("wire", w, w.size * 4, "packed", p, p.size * 4);
  const bool gpu = same_device({{"wire", &w}, {"packed", &p}});
  auto* wp = static_cast<const uint32_t*>(w.data);
  auto* pp = static_cast<uint32_t*>(p.data);
  py::gil_scoped_release nogil;
#ifdef CDSGD_WITH_CUDA
  if (gpu) return cdsgd::cuda::wire_decode(wp, pp, w.size, w.device);
#endif
  (void)gpu;
  return cdsgd::wire_decode(wp, pp, w.size, threads);
}

int64_t decode_sum(py::handle wire, int64_t rows, py::handle out, float threshold, int threads, int64_t stride) {
  check_threshold(threshold);
  View w = view("wire", kWord32, wire, false), o = view("out", kFloat32, out, true);
  const int64_t words = cdsgd::packed_words(o.size);
  if (rows < 0) throw py::value_error("rows must be >= 0, got " + std::to_string(rows));
  if (stride == 0) stride = words;
  if (stride < words)
    throw py::value_error("stride must be >= ceil(out.size / 16) = " + std::to_string(words) + ", got " +
                          std::to_string(stride));
  check_size("wire", w, rows * stride, "rows * stride");
  check_no_overlap("wire", w, w.size * 4, "out", o, o.size * 4);
  if (same_device({{"wire", &w}, {"out", &o}}))
    throw py::value_error("decode_sum runs on the CPU (the server's side); got GPU arrays");
  auto* wp = static_cast<const uint32_t*>(w.data);
  auto* op = static_cast<float*>(o.data);
  py::gil_scoped_release nogil;
  return cdsgd::decode_sum(wp, rows, words, stride, op, o.size, threshold, threads);
}

// Sorted, disjoint runs inside [0, n), as the native SGD step takes them.
std::vector<cdsgd::SgdRun> sgd_runs(const std::vector<std::tuple<int64_t, int64_t, float, float>>& runs, int64_t n) {
  std::vector<cdsgd::SgdRun> rs;
  int64_t last = 0;
  for (const auto& r : runs) {
    const int64_t b = std::get<0>(r), e = std::get<1>(r);
    if (b < last || e < b || e > n)
      throw py::value_error("runs must be sorted, disjoint ranges inside [0, n = " + std::to_string(n) + "), got [" +
                            std::to_string(b) + ", " + std::to_string(e) + ")");
    rs.push_back({b, e, std::get<2>(r), std::get<3>(r)});
    last = e;
  }
  return rs;
}

int64_t decode_sgd(py::handle wire, int64_t rows, int64_t stride, py::handle weight, py::handle mom, int64_t n,
                   float threshold, const std::vector<std::tuple<int64_t, int64_t, float, float>>& runs,
                   float momentum, float rescale, float clip, int threads) {
  check_threshold(threshold);
  View w = view("wire", kWord32, wire, false), wt = view("weight", kFloat32, weight, true);
  View m;
  const bool has_mom = !mom.is_none();
  if (has_mom) m = view("mom", kFloat32, mom, true);
  const int64_t words = cdsgd::packed_words(n);
  if (n < 0 || n > wt.size)
    throw py::value_error("n must be in [0, weight.size = " + std::to_string(wt.size) + "], got " + std::to_string(n));
  if (has_mom && m.size < n)
    throw py::value_error("mom has " + std::to_string(m.size) + " elements, fewer than n = " + std::to_string(n));
  if (rows < 0) throw py::value_error("rows must be >= 0, got " + std::to_string(rows));
  if (stride == 0) stride = words;
  if (stride < words)
    throw py::value_error("stride must be >= ceil(n / 16) = " + std::to_string(words) + ", got " + std::to_string(stride));
  check_size("wire", w, rows * stride, "rows * stride");
  check_no_overlap("wire", w, w.size * 4, "weight", wt, n * 4);
  if (has_mom) {
    check_no_overlap("wire", w, w.size * 4, "mom", m, n * 4);
    check_no_overlap("weight", wt, n * 4, "mom", m, n * 4);
  }
  if (w.gpu || wt.gpu || (has_mom && m.gpu))
    throw py::value_error("decode_sgd runs on the CPU (the server's side); got GPU arrays");
  const std::vector<cdsgd::SgdRun> rs = sgd_runs(runs, n);
  const cdsgd::SgdHyper h{momentum, rescale, clip};
  auto* wp = static_cast<const uint32_t*>(w.data);
  auto* wtp = static_cast<float*>(wt.data);
  auto* mp = has_mom ? static_cast<float*>(m.data) : nullptr;
  py::gil_scoped_release nogil;
  return cdsgd::decode_sgd(wp, rows, words, stride, wtp, mp, n, threshold, rs.data(),
                           static_cast<int64_t>(rs.size()), h, threads);
}

void sgd(py::handle grad, py::handle weight, py::handle mom,
         const std::vector<std::tuple<int64_t, int64_t, float, float>>& runs, float momentum, float rescale,
         float clip, int threads) {
  View g = view("grad", kFloat32, grad, false), wt = view("weight", kFloat32, weight, true);
  View m;
  const bool has_mom = !mom.is_none();
  if (has_mom) m = view("mom", kFloat32, mom, true);
  check_size("grad", g, wt.size, "weight.size");
  if (has_mom && m.size < wt.size)  // a bucket's momentum may run on over its proof region
    throw py::value_error("mom has " + std::to_string(m.size) + " elements, fewer than weight.size = " +
                          std::to_string(wt.size));
  check_no_overlap("grad", g, g.size * 4, "weight", wt, wt.size * 4);
  if (has_mom) {
    check_no_overlap("grad", g, g.size * 4, "mom", m, wt.size * 4);
    check_no_overlap("weight", wt, wt.size * 4, "mom", m, wt.size * 4);
  }
  if (g.gpu || wt.gpu || (has_mom && m.gpu))
    throw py::value_error("sgd runs on the CPU (the server's side); got GPU arrays");
  const std::vector<cdsgd::SgdRun> rs = sgd_runs(runs, wt.size);
  const cdsgd::SgdHyper h{momentum, rescale, clip};
  auto* gp = static_cast<const float*>(g.data);
  auto* wp = static_cast<float*>(wt.data);
  auto* mp = has_mom ? static_cast<float*>(m.data) : nullptr;
  py::gil_scoped_release nogil;
  cdsgd::sgd(gp, wp, mp, wt.size, rs.data(), static_cast<int64_t>(rs.size()), h, threads);
}

// A 2-bit pull's step for a piece is finite and > 0 (the server's floor is 1 where W - V is 0).
inline bool valid_step(float s) { return s > 0.0f && std::isfinite(s); }

// Pieces of a 2-bit pull: sorted, disjoint ranges inside [0, n); with scales, each a valid_step.
std::vector<cdsgd::Piece> pieces_of(const std::vector<std::pair<int64_t, int64_t>>& ranges, const float* scales,
                                    int64_t n) {
  std::vector<cdsgd::Piece> ps;
  int64_t last = 0;
  for (size_t k = 0; k < ranges.size(); ++k) {
    const int64_t b = ranges[k].first, e = ranges[k].second;
    const float s = scales == nullptr ? 1.0f : scales[k];
    if (b < last || e < b || e > n)
      throw py::value_error("pieces must be sorted, disjoint ranges inside [0, n = " + std::to_string(n) + "), got [" +
                            std::to_string(b) + ", " + std::to_string(e) + ")");
    if (!valid_step(s))
      throw py::value_error("a piece's scale must be a finite number > 0, got " + std::to_string(s));
    ps.push_back({b, e, s});
    last = e;
  }
  return ps;
}

std::pair<View, View> pull_inputs(py::handle w, py::handle v, bool write_v) {
  View wv = view("w", kFloat32, w, false), vv = view("v", kFloat32, v, write_v);
  check_size("w", wv, vv.size, "same as v");
  check_no_overlap("w", wv, wv.size * 4, "v", vv, vv.size * 4);
  if (wv.gpu || vv.gpu) throw py::value_error("2-bit pulls are encoded on the CPU (the server's side); got GPU arrays");
  return {wv, vv};
}

std::vector<float> pull_scales(py::handle w, py::handle v, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  auto [wv, vv] = pull_inputs(w, v, false);
  auto ps = pieces_of(ranges, nullptr, vv.size);
  std::vector<float> scales(ps.size());
  cdsgd::pull_scales(static_cast<const float*>(wv.data), static_cast<const float*>(vv.data), ps.data(),
                     static_cast<int64_t>(ps.size()), scales.data());
  return scales;
}

// Returns the scales; where one is not finite (W is not), nothing else is done: v and wire are
// left as they were, and the caller refuses the round.
std::vector<float> pull_encode(py::handle w, py::handle v, const std::vector<std::pair<int64_t, int64_t>>& ranges,
                               py::handle wire, int threads) {
  auto [wv, vv] = pull_inputs(w, v, true);
  View out = view("wire", kWord32, wire, true);
  check_size("wire", out, cdsgd::packed_words(vv.size), "ceil(v.size / 16)");
  check_no_overlap("v", vv, vv.size * 4, "wire", out, out.size * 4);
  check_no_overlap("w", wv, wv.size * 4, "wire", out, out.size * 4);
  if (out.gpu) throw py::value_error("wire: 2-bit pulls are encoded on the CPU; got a GPU array");
  auto ps = pieces_of(ranges, nullptr, vv.size);
  std::vector<float> scales(ps.size());
  auto* wp = static_cast<const float*>(wv.data);
  auto* vp = static_cast<float*>(vv.data);
  {
    py::gil_scoped_release nogil;
    cdsgd::pull_scales(wp, vp, ps.data(), static_cast<int64_t>(ps.size()), scales.data());
  }
  for (size_t k = 0; k < ps.size(); ++k) {
    if (!std::isfinite(scales[k])) return scales;
    ps[k].scale = scales[k];
  }
  auto* op = static_cast<uint32_t*>(out.data);
  py::gil_scoped_release nogil;
  cdsgd::pull_encode(wp, vp, vv.size, ps.data(), static_cast<int64_t>(ps.size()), op, threads);
  return scales;
}

std::pair<double, double> pull_norms(py::handle w, py::handle v) {
  auto [wv, vv] = pull_inputs(w, v, false);
  double norms[2];
  {
    py::gil_scoped_release nogil;
    cdsgd::pull_norms(static_cast<const float*>(wv.data), static_cast<const float*>(vv.data), vv.size, norms);
  }
  return {norms[0], norms[1]};
}

void pull_target(py::handle w, py::handle prev, py::handle target, float lookahead, int threads) {
  View wv = view("w", kFloat32, w, false), pv = view("prev", kFloat32, prev, true),
       tv = view("target", kFloat32, target, true);
  check_size("prev", pv, wv.size, "same as w");
  check_size("target", tv, wv.size, "same as w");
  check_no_overlap("w", wv, wv.size * 4, "prev", pv, pv.size * 4);
  check_no_overlap("w", wv, wv.size * 4, "target", tv, tv.size * 4);
  check_no_overlap("prev", pv, pv.size * 4, "target", tv, tv.size * 4);
  if (wv.gpu || pv.gpu || tv.gpu) throw py::value_error("pull_target runs on the CPU; got GPU arrays");
  auto* wp = static_cast<const float*>(wv.data);
  auto* pp = static_cast<float*>(pv.data);
  auto* tp = static_cast<float*>(tv.data);
  py::gil_scoped_release nogil;
  cdsgd::pull_target(wp, pp, tp, wv.size, lookahead, threads);
}

int64_t pull_decode(py::handle wire, py::handle v, py::handle out,
                    const std::vector<std::pair<int64_t, int64_t>>& ranges, const std::vector<float>& scales,
                    int threads) {
  View w = view("wire", kWord32, wire, false), vv = view("v", kFloat32, v, true);
  View o;
  const bool has_out = !out.is_none();
  if (has_out) o = view("out", kFloat32, out, true);
  check_size("wire", w, cdsgd::packed_words(vv.size), "ceil(v.size / 16)");
  check_no_overlap("wire", w, w.size * 4, "v", vv, vv.size * 4);
  if (has_out) {
    check_size("out", o, vv.size, "same as v");
    check_no_overlap("wire", w, w.size * 4, "out", o, o.size * 4);
    check_no_overlap("v", vv, vv.size * 4, "out", o, o.size * 4);
  }
  if (w.gpu || vv.gpu || (has_out && o.gpu)) throw py::value_error("pull_decode runs on the CPU; got GPU arrays");
  if (scales.size() != ranges.size())
    throw py::value_error("scales has " + std::to_string(scales.size()) + " values for " + std::to_string(ranges.size()) +
                          " pieces");
  auto ps = pieces_of(ranges, scales.data(), vv.size);
  auto* wp = static_cast<const uint32_t*>(w.data);
  auto* vp = static_cast<float*>(vv.data);
  auto* op = has_out ? static_cast<float*>(o.data) : nullptr;
  py::gil_scoped_release nogil;
  return cdsgd::pull_decode(wp, vp, op, vv.size, ps.data(), static_cast<int64_t>(ps.size()), threads);
}

// Proof tags (auth.py): a 128-bit MAC travels as eight float32 values, each one of its
// big-endian 16-bit halves. True when x[starts[j] + i] holds the i-th half of the j-th MAC in
// `macs` for every j and i. Every value is compared (no early exit): the time does not say
// how much of a forged tag was right.
bool tags_match(py::handle x, const std::vector<int64_t>& starts, py::bytes macs) {
  View v = view("x", kFloat32, x, false);
  if (v.gpu) throw py::value_error("x: proof tags are checked on the CPU");
  std::string m = macs;
  constexpr int64_t kTag = 8;
  if (static_cast<int64_t>(m.size()) != 2 * kTag * static_cast<int64_t>(starts.size()))
    throw py::value_error("macs must hold 16 bytes per start, got " + std::to_string(m.size()) + " for " +
                          std::to_string(starts.size()));
  for (int64_t s : starts)
    if (s < 0 || s + kTag > v.size)
      throw py::value_error("a tag at " + std::to_string(s) + " does not fit x of " + std::to_string(v.size) +
                            " elements");
  auto* xp = static_cast<const float*>(v.data);
  auto* bp = reinterpret_cast<const unsigned char*>(m.data());
  bool same = true;
  for (size_t j = 0; j < starts.size(); ++j)
    for (int64_t i = 0; i < kTag; ++i) {
      const float want = static_cast<float>((bp[2 * (j * kTag + i)] << 8) | bp[2 * (j * kTag + i) + 1]);
      same &= xp[starts[j] + i] == want;
    }
  return same;
}

// x[index] = value, in place: the server's round count after a bucket's weights, written once
// the update is done, through a capsule kept for the job's life (no engine op on the round's path).
void set_value(py::handle x, int64_t index, float value) {
  View v = view("x", kFloat32, x, true);
  if (v.gpu) throw py::value_error("x: set_value writes CPU arrays only");
  if (index < 0 || index >= v.size)
    throw py::value_error("index " + std::to_string(index) + " is outside x of " + std::to_string(v.size) +
                          " elements");
  static_cast<float*>(v.data)[index] = value;
}

int64_t count_nonfinite(py::handle x, int threads) {
  View v = view("x", kFloat32, x, false);
  auto* xp = static_cast<const float*>(v.data);
  py::gil_scoped_release nogil;
#ifdef CDSGD_WITH_CUDA
  if (v.gpu) return cdsgd::cuda::count_nonfinite(xp, v.size, v.device);
#else
  if (v.gpu) {
    py::gil_scoped_acquire gil;
    throw py::value_error("x is a GPU array but cdsgd_mx was built without CUDA");
  }
#endif
  return cdsgd::count_nonfinite(xp, v.size, threads);
}

// dst = src, element for element (4-byte elements; the bits are copied), between any two of
// host and device memory: the device part of a round moves codes to the host and weights back.
void copy(py::handle src, py::handle dst) {
  View s = view("src", kWord32, src, false), d = view("dst", kWord32, dst, true);
  check_size("dst", d, s.size, "same as src");
  if (s.gpu && d.gpu && s.device != d.device)
    throw py::value_error("src is on GPU " + std::to_string(s.device) + " and dst on GPU " + std::to_string(d.device) +
                          ": copies between two GPUs are not supported");
  check_no_overlap("src", s, s.size * 4, "dst", d, d.size * 4);
  const int64_t bytes = s.size * 4;
  if (!s.gpu && !d.gpu) {
    py::gil_scoped_release nogil;
    if (bytes > 0) std::memcpy(d.data, s.data, static_cast<size_t>(bytes));
    return;
  }
#ifdef CDSGD_WITH_CUDA
  py::gil_scoped_release nogil;
  cdsgd::cuda::copy(d.data, s.data, bytes, s.gpu ? s.device : d.device);
#else
  throw py::value_error(std::string(s.gpu ? "src" : "dst") + " is a GPU array but cdsgd_mx was built without CUDA");
#endif
}

// Host memory for what crosses between a device and the host, made once and reused: page-locked
// where a CUDA device is usable (copies then run at the link's full speed), ordinary otherwise.
class HostBuffer {
 public:
  HostBuffer(int64_t n, const std::string& format) : n_(n), format_(format) {
    if (n < 0) throw py::value_error("n must be >= 0, got " + std::to_string(n));
    if (format != "f" && format != "I")
      throw py::value_error("format must be 'f' (float32) or 'I' (uint32), got '" + format + "'");
    const int64_t bytes = (n > 0 ? n : 1) * 4;
#ifdef CDSGD_WITH_CUDA
    data_ = cdsgd::cuda::alloc_host(bytes);
    pinned_ = data_ != nullptr;
#endif
    if (data_ == nullptr) data_ = std::calloc(static_cast<size_t>(bytes), 1);
    else std::memset(data_, 0, static_cast<size_t>(bytes));
    if (data_ == nullptr) throw std::bad_alloc();
  }
  ~HostBuffer() {
#ifdef CDSGD_WITH_CUDA
    if (pinned_) { cdsgd::cuda::free_host(data_); return; }
#endif
    std::free(data_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  py::buffer_info info() { return py::buffer_info(data_, 4, format_, 1, {n_}, {int64_t{4}}); }
  bool pinned() const { return pinned_; }

 private:
  int64_t n_;
  std::string format_;
  void* data_ = nullptr;
  bool pinned_ = false;
};

// A worker's decode of one bucket's 2-bit pull as an operation on MXNet's engine
// (pull_compression.WorkerCopy): pushed through MXEnginePushSyncND right behind the pull, reading
// the bucket's down payload and writing its comm_buf part, so the engine runs it once the pull
// has landed and orders the copies of W(t+1) into the parameters after it; no Python thread
// waits in between. The arrays are resolved once (DLPack capsules made when nothing is pending
// on them) and kept alive here; every operation of one decoder writes the same comm_buf, so the
// engine runs them one at a time, in the order pushed.
//
// The payload: [code words | a scale per piece | ||W - V||^2, ||W||^2 | proof region, the
// server's round count first]. A round the server dropped leaves its count where it was: the
// operation then changes nothing (the worker sends the round again and pushes another one),
// since V must take each round's codes exactly once.
class PullDecoder {
 public:
  PullDecoder(py::handle wire, py::handle v, py::handle out, const std::vector<std::pair<int64_t, int64_t>>& ranges,
              int64_t count_at)
      : wire_(view("wire", kWord32, wire, false)), v_(view("v", kFloat32, v, true)),
        out_(view("out", kFloat32, out, true)), count_at_(count_at) {
    words_ = cdsgd::packed_words(v_.size);
    ps_ = pieces_of(ranges, nullptr, v_.size);
    const int64_t needed = words_ + static_cast<int64_t>(ps_.size()) + 2;
    if (wire_.size < needed || (count_at_ >= 0 && count_at_ < needed) || count_at_ >= wire_.size)
      throw py::value_error("wire has " + std::to_string(wire_.size) + " elements: too few for " +
                            std::to_string(v_.size) + " values in " + std::to_string(ps_.size()) +
                            " pieces with the round count at " + std::to_string(count_at_));
    check_size("out", out_, v_.size, "same as v");
    check_no_overlap("wire", wire_, wire_.size * 4, "v", v_, v_.size * 4);
    check_no_overlap("wire", wire_, wire_.size * 4, "out", out_, out_.size * 4);
    check_no_overlap("v", v_, v_.size * 4, "out", out_, out_.size * 4);
    if (wire_.gpu || v_.gpu || out_.gpu) throw py::value_error("PullDecoder runs on the CPU; got GPU arrays");
  }

  // On an engine thread: the round whose count the server should have reached is `round`.
  void run(float round) {
    const auto* w = static_cast<const float*>(wire_.data);
    if (count_at_ >= 0 && w[count_at_] != round) return;  // dropped: nothing to apply
    const int64_t np = static_cast<int64_t>(ps_.size());
    int64_t bad_scales = 0;  // a step that is not valid: a corrupt payload
    for (int64_t k = 0; k < np; ++k) {
      ps_[k].scale = w[words_ + k];
      bad_scales += !valid_step(ps_[k].scale);
    }
    if (bad_scales) {  // refused before V changes
      bad_.store(-bad_scales);
      decoded_.store(round);
      return;
    }
    const int64_t bad = cdsgd::pull_decode(static_cast<const uint32_t*>(wire_.data), static_cast<float*>(v_.data),
                                           static_cast<float*>(out_.data), v_.size, ps_.data(), np, 0);
    norms_[0] = w[words_ + np];
    norms_[1] = w[words_ + np + 1];
    bad_.store(bad);
    decoded_.store(round);
  }

  // After the engine ran the operations pushed so far (the caller waits for comm_buf): (the
  // last round decoded, 0 before any; invalid code words in the last payload decoded or
  // refused, or minus its steps that are not finite and > 0; ||W - V||^2 and ||W||^2 that
  // payload carried).
  std::tuple<float, int64_t, float, float> last() const { return {decoded_.load(), bad_.load(), norms_[0], norms_[1]}; }

 private:
  View wire_, v_, out_;
  int64_t count_at_, words_ = 0;
  std::vector<cdsgd::Piece> ps_;
  std::atomic<float> decoded_{0.0f};
  std::atomic<int64_t> bad_{0};
  float norms_[2] = {0.0f, 0.0f};
};

// One pushed operation: its decoder and round (freed by MXNet once the operation is done).
struct PullDecodeCall {
  PullDecoder* decoder;
  float round;
};

int cuda_device_count() {
#ifdef CDSGD_WITH_CUDA
  return cdsgd::cuda::device_count();
#else
  return 0;
#endif
}

}  // namespace

// An engine operation that does nothing: pushed through MXNet's MXEnginePushSyncND with the
// arrays it should order (its reads and writes), it chains one engine op after another without
// a Python callback on the engine's thread.
extern "C" void engine_noop(void*, void*) {}

// An engine operation that writes the time it runs (seconds of CLOCK_MONOTONIC, the clock of
// Python's time.perf_counter on Linux) to the double at `param`. A trace span pushes it behind
// the arrays it waits for: the span then ends when the engine saw them written, not when a
// Python thread got the GIL back to look (up to the interpreter's switch interval later).
extern "C" void engine_stamp(void*, void* param) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  *static_cast<double*>(param) = static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// The engine's entry to PullDecoder::run (MXEnginePushSyncND's sync function: run context,
// parameter) and the parameter's deleter.
extern "C" void pull_decode_op(void*, void* call) {
  auto* c = static_cast<PullDecodeCall*>(call);
  c->decoder->run(c->round);
}
extern "C" void pull_decode_release(void* call) { delete static_cast<PullDecodeCall*>(call); }

PYBIND11_MODULE(_native, m) {
  m.doc() = "cdsgd_mx native codec kernels (use cdsgd_mx.codec, which checks and converts arrays)";
  m.def("quantize_2bit", &quantize, py::arg("grad"), py::arg("residual"), py::arg("packed"),
        py::arg("threshold"), py::arg("threads") = 0, py::arg("codes_to") = py::none());
  m.def("dequantize_2bit", &dequantize, py::arg("packed"), py::arg("out"), py::arg("threshold"),
        py::arg("accumulate") = false, py::arg("threads") = 0);
  m.def("wire_encode", &wire_encode, py::arg("packed"), py::arg("wire"), py::arg("threads") = 0);
  m.def("wire_decode", &wire_decode, py::arg("wire"), py::arg("packed"), py::arg("threads") = 0);
  m.def("decode_sum", &decode_sum, py::arg("wire"), py::arg("rows"), py::arg("out"), py::arg("threshold"),
        py::arg("threads") = 0, py::arg("stride") = 0);
  m.def("decode_sgd", &decode_sgd, py::arg("wire"), py::arg("rows"), py::arg("stride"), py::arg("weight"),
        py::arg("mom"), py::arg("n"), py::arg("threshold"), py::arg("runs"), py::arg("momentum"),
        py::arg("rescale"), py::arg("clip"), py::arg("threads") = 0);
  m.def("sgd", &sgd, py::arg("grad"), py::arg("weight"), py::arg("mom"), py::arg("runs"), py::arg("momentum"),
        py::arg("rescale"), py::arg("clip"), py::arg("threads") = 0);
  m.def("pull_scales", &pull_scales, py::arg("w"), py::arg("v"), py::arg("pieces"));
  m.def("pull_encode", &pull_encode, py::arg("w"), py::arg("v"), py::arg("pieces"), py::arg("wire"),
        py::arg("threads") = 0);
  m.def("pull_norms", &pull_norms, py::arg("w"), py::arg("v"));
  m.def("pull_target", &pull_target, py::arg("w"), py::arg("prev"), py::arg("target"), py::arg("lookahead"),
        py::arg("threads"));
  m.def("pull_decode", &pull_decode, py::arg("wire"), py::arg("v"), py::arg("out"), py::arg("pieces"),
        py::arg("scales"), py::arg("threads") = 0);
  m.def("tags_match", &tags_match, py::arg("x"), py::arg("starts"), py::arg("macs"));
  m.def("set_value", &set_value, py::arg("x"), py::arg("index"), py::arg("value"));
  m.def("count_nonfinite", &count_nonfinite, py::arg("x"), py::arg("threads") = 0);
  py::class_<PullDecoder>(m, "PullDecoder")
      .def(py::init<py::handle, py::handle, py::handle, const std::vector<std::pair<int64_t, int64_t>>&, int64_t>(),
           py::arg("wire"), py::arg("v"), py::arg("out"), py::arg("pieces"), py::arg("count_at"))
      .def("call", [](PullDecoder& d, float round) {
             return reinterpret_cast<uintptr_t>(new PullDecodeCall{&d, round});
           }, py::arg("round"))
      .def("last", &PullDecoder::last);
  m.def("pull_decode_op_address", []() { return reinterpret_cast<uintptr_t>(&pull_decode_op); });
  m.def("pull_decode_release_address", []() { return reinterpret_cast<uintptr_t>(&pull_decode_release); });
  m.def("engine_noop_address", []() { return reinterpret_cast<uintptr_t>(&engine_noop); });
  m.def("engine_stamp_address", []() { return reinterpret_cast<uintptr_t>(&engine_stamp); });
  m.def("set_num_threads", &cdsgd::set_default_threads);
  m.def("get_num_threads", &cdsgd::default_threads);
  m.def("cuda_device_count", &cuda_device_count);
  m.def("copy", &copy, py::arg("src"), py::arg("dst"));
  py::class_<HostBuffer>(m, "HostBuffer", py::buffer_protocol())
      .def(py::init<int64_t, const std::string&>(), py::arg("n"), py::arg("format"))
      .def_property_readonly("pinned", &HostBuffer::pinned)
      .def_buffer(&HostBuffer::info);
  m.attr("PULL_LEVEL") = cdsgd::kPullLevel;
  m.attr("PULL_THRESHOLD") = static_cast<double>(cdsgd::kPullThreshold);
#ifdef CDSGD_WITH_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
}
