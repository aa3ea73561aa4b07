#include "gradmesh/bench/gemm_bench.h"

#include <algorithm>
#include <vector>

#include "gradmesh/core/bf16.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/core/tensor.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/kernels/gemm_bf16.h"
#include "gradmesh/obs/json_object.h"

namespace gradmesh::bench {

namespace {

// Times product(a, b, c) on n x n operands of uniform(-0.5, 0.5): `repeats` calls after one warm-up (caches, threads).
template <typename Product>
GemmBenchResult time_gemm(int64_t n, int threads, int repeats, const Product& product) {
  kernels::set_num_threads(threads);
  Tensor a = Tensor::empty({n, n}), b = Tensor::empty({n, n}), c = Tensor::empty({n, n});
  const CounterRng rng(0, RngPurpose::kTest, 0);
  for (int64_t i = 0; i < n * n; ++i) {
    a.data()[i] = rng.uniform(i) - 0.5f;
    b.data()[i] = rng.uniform(n * n + i) - 0.5f;
  }
  std::vector<double> times;
  for (int r = 0; r <= repeats; ++r) {
    const double start = now_seconds();
    product(a.data(), b.data(), c.data());
    if (r > 0) times.push_back(now_seconds() - start);
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  GemmBenchResult result;
  result.n = n;
  result.threads = kernels::num_threads();
  result.seconds_median = median;
  result.gflops = 2.0 * static_cast<double>(n) * n * n / median / 1e9;
  return result;
}

}  // namespace

GemmBenchResult bench_sgemm(int64_t n, int threads, int repeats) {
  return time_gemm(n, threads, repeats, [n](const float* a, const float* b, float* c) {
    kernels::sgemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  });
}

GemmBenchResult bench_bf16_gemm(int64_t n, int threads, int repeats) {
  std::vector<uint16_t> a16, b16;
  GemmBenchResult r = time_gemm(n, threads, repeats, [&](const float* a, const float* b, float* c) {
    if (a16.empty()) {
      for (int64_t i = 0; i < n * n; ++i) {
        a16.push_back(float_to_bf16(a[i]));
        b16.push_back(float_to_bf16(b[i]));
      }
    }
    kernels::gemm_bf16(false, false, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c, n);
  });
  r.dtype = "bf16";
  r.isa = kernels::bf16_support().isa;
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
