// Matrix multiply through OpenBLAS, and the plain reference it is tested against.
//
// All matrices are row-major. Transposes are passed to BLAS as flags rather
// than materialised, so backward passes (dW = dY^T X, dX = dY W) never copy.
#pragma once

#include <cstdint>

namespace gradmesh::kernels {

// C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C.
// op(A) = A^T when trans_a (A stored [k, m]); same for B. beta == 0 ignores C's contents (may be NaN).
// The model's products (Linear, convolution): multiplied in the current
// matmul_precision() (below).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The same always in float32 (OpenBLAS), for products that are not the
// model's and must not change with train.precision (PowerSGD's factors).
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// gemm() on operands already rounded to bf16 (bf16 bits), for a caller that
// uses one operand in several products (Linear keeps its input's and
// weight's bf16 copies from forward for backward): the same bits as gemm()
// on the float32 originals under kBf16, counted alike.
void gemm_rounded(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                  int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

// What gemm() multiplies in. kFp32: OpenBLAS sgemm. kBf16: operands rounded
// to bf16, products summed in float32 (gemm_bf16.h), as under PyTorch's CPU
// autocast. Process-wide: the trainer sets it from train.precision.
enum class MatmulPrecision { kFp32, kBf16 };
void set_matmul_precision(MatmulPrecision precision);
MatmulPrecision matmul_precision();

// Serving may choose speed where training may not: with this on, gemm()
// sends float32 products of 2 to 64 rows to oneDNN's matmul
// (gemm_f32_onednn in gemm_bf16.h), faster than sgemm for a batch of a few
// requests or generated sequences but with other bits. Process-wide, off by
// default; `gradmesh serve` turns it on unless --training-products; the
// trainer never does (a resumed run must repeat its bits).
void set_fast_small_batches(bool on);
bool fast_small_batches();

// Same contract, triple loop in double precision: the oracle for tests.
void gemm_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Floating-point operations (2*m*n*k per call) issued through gemm() by this
// process so far: the numerator of a step's achieved GFLOP/s.
uint64_t gemm_flops();

// Threads used by BLAS and by gradmesh's own kernels. 0 (train.threads = 0)
// means GRADMESH_NUM_THREADS when it is set, else all cores; a value there
// that is not an integer from 1 to 1024 is Error(kUsage) naming the variable.
void set_num_threads(int threads);
int num_threads();

}  // namespace gradmesh::kernels
