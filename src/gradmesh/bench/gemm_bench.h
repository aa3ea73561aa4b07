// `gradmesh bench gemm`: GEMM throughput on square matrices, the physical
// ceiling that a training step's achieved GFLOP/s is reported against:
// OpenBLAS sgemm (--dtype f32), or bf16 operands with float32 accumulation
// through oneDNN (--dtype bf16, kernels/gemm_bf16.h).
#pragma once

#include <cstdint>
#include <string>

namespace gradmesh::bench {

struct GemmBenchResult {
  int64_t n;
  int threads;
  double seconds_median;  // one n x n x n product
  double gflops;          // 2 n^3 / seconds_median / 1e9
  std::string dtype = "f32";  // "f32" or "bf16"
  std::string isa;            // for bf16: what runs the products, e.g. "oneDNN avx512_core_amx"
};

// Times `repeats` multiplies after one warm-up and returns the median.
GemmBenchResult bench_sgemm(int64_t n, int threads, int repeats);
// The same in bf16: operands converted once before timing, as weights held in bf16 are.
GemmBenchResult bench_bf16_gemm(int64_t n, int threads, int repeats);

// `bench gemm --json`: one JSON object (n, threads, seconds, gflops, dtype[, isa]) and a newline.
std::string format_gemm_json(const GemmBenchResult& result);

}  // namespace gradmesh::bench
