// Matrix multiply in bf16 with float32 accumulation, through oneDNN's matmul
// on the CPU's bf16 dot products (AVX512_BF16, AMX tiles) where it has them,
// and where it does not (oneDNN's emulation is 4x slower than sgemm, and
// below AVX-512 there is none) as OpenBLAS sgemm on operands rounded to bf16
// values (bf16_support() says which).
//
// This is the product under train.precision = "bf16" (kernels::gemm sends
// its calls here while the matmul precision is kBf16): operands rounded to
// bf16 (nearest even), products summed in float32, the result in float32 —
// what PyTorch's CPU autocast does for a matmul. Results are a pure function
// of the operands, the shapes and the thread count.
#pragma once

#include <cstdint>
#include <string>

namespace gradmesh::kernels {

// C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C, as gemm() (row
// major; op(A) = A^T when trans_a, A stored [k, m]); A and B hold bf16 bits.
// beta == 0 ignores C's contents.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same on float32 operands, each rounded to bf16 first (into per-thread
// scratch) — gemm()'s path under MatmulPrecision::kBf16.
void gemm_f32_in_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// out[i] = the bf16 bits of in[i], rounded to nearest even (core/bf16.h),
// vectorised at the CPU's level: the operands gemm_f32_in_bf16 multiplies.
void round_to_bf16(const float* in, int64_t n, uint16_t* out);

// Whether bf16 products go through oneDNN here: only on a CPU with bf16 dot
// products (elsewhere oneDNN's emulation is slower than sgemm). Convolutions
// take the same decision (conv_bf16.h).
bool onednn_has_bf16_matmul();

// gemm() in float32 through oneDNN's matmul (its brgemm kernels), for
// serving's batches of a few rows (set_fast_small_batches in gemm.h): for 2
// to 64 rows against a Linear layer's weights it is 1.3-1.8x OpenBLAS's
// sgemm, which packs the weights on every call. Its sums run in another
// order than sgemm's, so its bits differ by rounding.
void gemm_f32_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// How many products gemm_f32_onednn has run in this process (tests check the switch with it).
uint64_t onednn_f32_products();

// What runs the bf16 products on this CPU.
struct Bf16Support {
  bool native = false;  // the CPU has bf16 dot products (AVX512_BF16 or AMX)
  bool onednn = true;   // the products go through oneDNN (native only); false: OpenBLAS on bf16 values
  std::string isa;      // oneDNN's name of the instruction set it uses, e.g. "avx512_core_amx"
  // One sentence for the start of a run, e.g. "bf16 products: oneDNN on
  // avx512_core_amx (the CPU's bf16 dot products)" or "bf16 products: this
  // CPU has no bf16 dot products ..., so operands are rounded to bf16 and
  // multiplied by OpenBLAS".
  std::string describe() const;
};
Bf16Support bf16_support();

}  // namespace gradmesh::kernels
