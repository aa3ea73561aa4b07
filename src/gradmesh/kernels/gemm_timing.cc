#include "gradmesh/kernels/gemm_timing.h"

#include <algorithm>
#include <vector>

#include "gradmesh/core/bf16.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/kernels/gemm_bf16.h"

namespace gradmesh::kernels {

GemmTiming time_square_gemm(MatmulPrecision precision, int64_t n, int repeats) {
  const auto size = static_cast<size_t>(n * n);
  std::vector<float> a(size), b(size), c(size);
  const CounterRng rng(0, RngPurpose::kTest, 0);
  for (size_t i = 0; i < size; ++i) {
    a[i] = rng.uniform(i) - 0.5f;
    b[i] = rng.uniform(size + i) - 0.5f;
  }
  std::vector<uint16_t> a16, b16;
  if (precision == MatmulPrecision::kBf16) {
    for (size_t i = 0; i < size; ++i) {
      a16.push_back(float_to_bf16(a[i]));
      b16.push_back(float_to_bf16(b[i]));
    }
  }
  std::vector<double> times;
  for (int r = 0; r <= repeats; ++r) {
    const double start = now_seconds();
    if (precision == MatmulPrecision::kBf16)
      gemm_bf16(false, false, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c.data(), n);
    else
      sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    if (r > 0) times.push_back(now_seconds() - start);  // the first call warms caches and threads
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  return {median, 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / median / 1e9};
}

}  // namespace gradmesh::kernels
