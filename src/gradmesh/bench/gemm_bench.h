// `gradmesh bench gemm`: OpenBLAS sgemm throughput on square matrices, the
// physical ceiling that a training step's achieved GFLOP/s is reported against.
#pragma once

#include <cstdint>
#include <string>

namespace gradmesh::bench {

struct GemmBenchResult {
  int64_t n;
  int threads;
  double seconds_median;  // one n x n x n sgemm
  double gflops;          // 2 n^3 / seconds_median / 1e9
};

// Times `repeats` multiplies after one warm-up and returns the median.
GemmBenchResult bench_sgemm(int64_t n, int threads, int repeats);

// `bench gemm --json`: one JSON object (n, threads, seconds, gflops) and a newline.
std::string format_gemm_json(const GemmBenchResult& result);

}  // namespace gradmesh::bench
