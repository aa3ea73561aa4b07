#include "gradmesh/optim/clip.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/core/thread_pool.h"

namespace gradmesh::optim {

namespace {

// The unit of the deterministic reduction: partial sums per block do not
// depend on how blocks are spread over threads.
constexpr int64_t kBlock = 64 * 1024;

// Sum of squares of x[0, n) in double with four interleaved accumulators
// (fixed order, so deterministic; independent chains keep the FPU busy).
double sum_squares(const float* x, int64_t n) {
  double acc[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int lane = 0; lane < 4; ++lane) {
      const double v = x[i + lane];
      acc[lane] += v * v;
    }
  for (; i < n; ++i) {
    const double v = x[i];
    acc[0] += v * v;
  }
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

void check_max_norm(float max_norm) {
  if (!std::isfinite(max_norm) || max_norm <= 0)
    throw_error(ErrorKind::kConfig, "clip_grad_norm",
                "max_norm must be finite and > 0, got " + std::to_string(max_norm) +
                    "; use a positive threshold such as 1.0, or disable clipping");
}

}  // namespace

double grad_norm(const float* grads, int64_t count) { return std::sqrt(grad_sq_sum(grads, count)); }

double grad_sq_sum(const float* grads, int64_t count) {
  if (count <= 0) return 0.0;
  const int64_t blocks = (count + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
  const auto sum_blocks = [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t begin = b * kBlock;
      partial[static_cast<size_t>(b)] = sum_squares(grads + begin, std::min(kBlock, count - begin));
    }
  };
  if (blocks < 2)
    sum_blocks(0, blocks);
  else
    compute_pool().parallel_for(0, blocks, 1, [&](int, int64_t lo, int64_t hi) { sum_blocks(lo, hi); });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

float clip_grad_norm(float* grads, int64_t count, float max_norm) {
  check_max_norm(max_norm);
  const double norm = grad_norm(grads, count);
  clip_to_norm(grads, count, norm, max_norm);
  return static_cast<float>(norm);
}

void clip_to_norm(float* grads, int64_t count, double norm, float max_norm) {
  check_max_norm(max_norm);
  if (!std::isfinite(norm)) return;
  const double coef = static_cast<double>(max_norm) / (norm + 1e-6);
  if (coef < 1.0) {
    const float scale = static_cast<float>(coef);
    const auto scale_range = [grads, scale](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) grads[i] *= scale;
    };
    if (count < 2 * kBlock)
      scale_range(0, count);
    else
      compute_pool().parallel_for(0, count, kBlock, [&](int, int64_t lo, int64_t hi) { scale_range(lo, hi); });
  }
}

}  // namespace gradmesh::optim
