#include "gradmesh/bench/gemm_bench.h"

#include <algorithm>
#include <vector>

#include "gradmesh/core/clock.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/core/tensor.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/obs/json_object.h"

namespace gradmesh::bench {

GemmBenchResult bench_sgemm(int64_t n, int threads, int repeats) {
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
    kernels::gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    if (r > 0) times.push_back(now_seconds() - start);  // the first call warms caches and BLAS threads
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  return {n, kernels::num_threads(), median, 2.0 * static_cast<double>(n) * n * n / median / 1e9};
}

std::string format_gemm_json(const GemmBenchResult& result) {
  return obs::JsonObject()
             .add("n", result.n)
             .add("threads", result.threads)
             .add("seconds", result.seconds_median)
             .add("gflops", result.gflops)
             .str() +
         "\n";
}

}  // namespace gradmesh::bench
