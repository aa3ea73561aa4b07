// The physical GEMM ceiling of this machine: how fast one square product
// runs in each precision. `gradmesh bench gemm` prints it, and a training
// run reports its achieved GFLOP/s against it (train/gemm_roofs.h).
#pragma once

#include <cstdint>

#include "gradmesh/kernels/gemm.h"

namespace gradmesh::kernels {

struct GemmTiming {
  double seconds_median;  // one n x n x n product
  double gflops;          // 2 n^3 / seconds_median / 1e9
};

// `repeats` products of n x n operands (uniform in [-0.5, 0.5)) after one
// warm-up, at the current thread count. kFp32: OpenBLAS sgemm. kBf16: bf16
// operands converted once before timing (as weights held in bf16 are), sums
// in float32 through oneDNN (gemm_bf16.h).
GemmTiming time_square_gemm(MatmulPrecision precision, int64_t n, int repeats);

}  // namespace gradmesh::kernels
