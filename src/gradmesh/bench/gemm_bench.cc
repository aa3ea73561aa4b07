#include "gradmesh/bench/gemm_bench.h"

#include "gradmesh/kernels/gemm.h"
#include "gradmesh/kernels/gemm_bf16.h"
#include "gradmesh/kernels/gemm_timing.h"
#include "gradmesh/obs/json_object.h"

namespace gradmesh::bench {

namespace {

GemmBenchResult timed(kernels::MatmulPrecision precision, int64_t n, int threads, int repeats) {
  kernels::set_num_threads(threads);
  const kernels::GemmTiming t = kernels::time_square_gemm(precision, n, repeats);
  GemmBenchResult result;
  result.n = n;
  result.threads = kernels::num_threads();
  result.seconds_median = t.seconds_median;
  result.gflops = t.gflops;
  return result;
}

}  // namespace

GemmBenchResult bench_sgemm(int64_t n, int threads, int repeats) {
  return timed(kernels::MatmulPrecision::kFp32, n, threads, repeats);
}

GemmBenchResult bench_bf16_gemm(int64_t n, int threads, int repeats) {
  GemmBenchResult r = timed(kernels::MatmulPrecision::kBf16, n, threads, repeats);
  r.dtype = "bf16";
  const kernels::Bf16Support support = kernels::bf16_support();
  r.isa = support.onednn ? "oneDNN " + support.isa : "OpenBLAS on bf16 values, no bf16 dot products (" + support.isa + ")";
  return r;
}

std::string format_gemm_json(const GemmBenchResult& result) {
  obs::JsonObject json;
  json.add("n", result.n).add("threads", result.threads).add("seconds", result.seconds_median).add("gflops", result.gflops);
  json.add("dtype", result.dtype);
  if (!result.isa.empty()) json.add("isa", result.isa);
  return json.str() + "\n";
}

}  // namespace gradmesh::bench
