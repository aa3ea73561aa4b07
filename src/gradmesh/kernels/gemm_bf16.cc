// oneDNN behind kernels::gemm_bf16 (gemm_bf16.h). dnnl.hpp stays in this file.
//
// A matmul primitive is compiled for one shape, layout and alpha/beta, and
// building its descriptor costs tens of microseconds, as much as a small
// product: primitives are kept by shape (a training step repeats the same
// few), a bounded map that starts over when full.
#include "gradmesh/kernels/gemm_bf16.h"

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "gradmesh/core/bf16.h"
#include "gradmesh/core/error.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/kernels/isa.h"
#include "gradmesh/kernels/onednn_runtime.h"

namespace gradmesh::kernels {

namespace {

using Dims = dnnl::memory::dims;
using DataType = dnnl::memory::data_type;

// Shape, layout, alpha, beta, the thread count (oneDNN plans a primitive's
// split over the threads there are when it is created), and whether the
// operands are float32 (else bf16).
using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float, int, bool>;
constexpr size_t kMaxPrimitives = 512;
std::atomic<uint64_t> g_f32_products{0};

struct Matmul {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
};

std::shared_ptr<const Matmul> matmul_for(const Key& key) {
  static std::map<Key, std::shared_ptr<const Matmul>> primitives;
  std::lock_guard<std::mutex> lock(onednn::creation_mutex());
  const auto found = primitives.find(key);
  if (found != primitives.end()) return found->second;
  const auto [trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, threads, f32] = key;
  const DataType operands = f32 ? DataType::f32 : DataType::bf16;
  const dnnl::memory::desc a_md({m, k}, operands, trans_a ? Dims{1, lda} : Dims{lda, 1});
  const dnnl::memory::desc b_md({k, n}, operands, trans_b ? Dims{1, ldb} : Dims{ldb, 1});
  const dnnl::memory::desc c_md({m, n}, DataType::f32, Dims{ldc, 1});
  dnnl::primitive_attr attr = onednn::user_scratchpad_attr();
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops sum;
    sum.append_sum(beta);
    attr.set_post_ops(sum);
  }
  const dnnl::matmul::desc desc(a_md, b_md, c_md);
  const dnnl::matmul::primitive_desc pd(desc, attr, onednn::cpu_engine());
  auto primitive = std::make_shared<const Matmul>(Matmul{pd, dnnl::matmul(pd)});
  if (primitives.size() >= kMaxPrimitives) primitives.clear();
  primitives.emplace(key, primitive);
  return primitive;
}

// float_to_bf16 on n values, compiled per ISA level: the compiler vectorises
// the branch-free rounding, the same bits at every level (the CPU's own
// vcvtneps2bf16 would flush subnormals to zero).
[[gnu::always_inline]] inline void round_values_body(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
}
GRADMESH_ISA_VARIANTS(round_values, (const float* in, uint16_t* out, int64_t n), (in, out, n))

// `rows` x `cols` floats with leading dimension `ld`, rounded into `out` packed (leading dimension cols).
void round_matrix_to_bf16(const float* in, int64_t rows, int64_t cols, int64_t ld, std::vector<uint16_t>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  if (ld == cols) {
    round_values(in, out.data(), rows * cols);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) round_values(in + r * ld, out.data() + r * cols, cols);
}

// Whether the CPU has bf16 dot products (oneDNN's AVX512_BF16 or AMX code).
bool native_bf16(dnnl::cpu_isa isa) {
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

// Whether the products go through oneDNN: only where the CPU has bf16 dot
// products. Without them oneDNN emulates bf16 at a quarter of sgemm's speed
// on AVX-512 (measured: 39 against 168 GFLOP/s on one core, docs/engine.md)
// and has no bf16 matmul at all below AVX-512, so the products go through
// sgemm on bf16 values instead.
}  // namespace

bool onednn_has_bf16_matmul() {
  static const bool usable = [] {
    if (!native_bf16(dnnl::get_effective_cpu_isa())) return false;
    try {
      matmul_for(Key{false, false, 16, 16, 16, 16, 16, 16, 1.0f, 0.0f, 1, false});
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return usable;
}

namespace {

// The fallback: bf16 values held in float32, multiplied by OpenBLAS. Each
// product of two bf16 values is exact in float32 and the sums are float32,
// so the numerics are a bf16 matmul's with float32 accumulation (summed in
// OpenBLAS's order); the speed is float32's.
void widen(const uint16_t* in, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(r * cols + c)] = bf16_to_float(in[r * ld + c]);
}

// oneDNN's memory objects take non-const pointers; it only reads A and B.
void run_matmul(const Matmul& matmul, void* a, void* b, float* c) {
  dnnl::memory a_mem(matmul.pd.src_desc(), onednn::cpu_engine(), a);
  dnnl::memory b_mem(matmul.pd.weights_desc(), onednn::cpu_engine(), b);
  dnnl::memory c_mem(matmul.pd.dst_desc(), onednn::cpu_engine(), c);
  onednn::execute(matmul.primitive, matmul.pd, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
}

}  // namespace

void round_to_bf16(const float* in, int64_t n, uint16_t* out) { round_values(in, out, n); }

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: oneDNN refuses zero-sized operands
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  if (!onednn_has_bf16_matmul()) {
    thread_local std::vector<float> a32, b32;
    widen(a, trans_a ? k : m, trans_a ? m : k, lda, a32);
    widen(b, trans_b ? n : k, trans_b ? k : n, ldb, b32);
    return sgemm(trans_a, trans_b, m, n, k, alpha, a32.data(), trans_a ? m : k, b32.data(), trans_b ? k : n, beta, c,
                 ldc);
  }
  const std::shared_ptr<const Matmul> matmul =
      matmul_for(Key{trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, num_threads(), false});
  run_matmul(*matmul, const_cast<uint16_t*>(a), const_cast<uint16_t*>(b), c);
}

void gemm_f32_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);  // oneDNN refuses k = 0
  const std::shared_ptr<const Matmul> matmul =
      matmul_for(Key{trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, num_threads(), true});
  run_matmul(*matmul, const_cast<float*>(a), const_cast<float*>(b), c);
  g_f32_products.fetch_add(1, std::memory_order_relaxed);
}

uint64_t onednn_f32_products() { return g_f32_products.load(std::memory_order_relaxed); }

void gemm_f32_in_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  thread_local std::vector<uint16_t> a16, b16;
  // Stored shapes: A is [m, k] ([k, m] transposed), B is [k, n] ([n, k] transposed).
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  round_matrix_to_bf16(a, a_rows, a_cols, lda, a16);
  round_matrix_to_bf16(b, b_rows, b_cols, ldb, b16);
  gemm_bf16(trans_a, trans_b, m, n, k, alpha, a16.data(), a_cols, b16.data(), b_cols, beta, c, ldc);
}

std::string Bf16Support::describe() const {
  if (!onednn)
    return "bf16 products: this CPU has no bf16 dot products (AVX512_BF16 or AMX; oneDNN's ISA here is " + isa +
           "), so operands are rounded to bf16 and multiplied by OpenBLAS in float32: bf16's numerics at float32's "
           "speed, no faster than train.precision = \"fp32\"";
  return "bf16 products: oneDNN on " + isa + " (the CPU's bf16 dot products)";
}

Bf16Support bf16_support() {
  Bf16Support s;
  s.onednn = onednn_has_bf16_matmul();
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx:
      s.native = true;
      s.isa = "avx512_core_amx";
      break;
    case dnnl::cpu_isa::avx512_core_bf16:
      s.native = true;
      s.isa = "avx512_core_bf16";
      break;
    case dnnl::cpu_isa::avx512_core_vnni:
      s.isa = "avx512_core_vnni";
      break;
    case dnnl::cpu_isa::avx512_core:
      s.isa = "avx512_core";
      break;
    case dnnl::cpu_isa::avx2_vnni:
      s.isa = "avx2_vnni";
      break;
    case dnnl::cpu_isa::avx2:
      s.isa = "avx2";
      break;
    default:
      s.isa = "an older instruction set";
  }
  return s;
}

}  // namespace gradmesh::kernels
