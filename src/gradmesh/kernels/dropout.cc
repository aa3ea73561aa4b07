#include "gradmesh/kernels/dropout.h"

#include "gradmesh/core/rng.h"

namespace gradmesh::kernels {

void dropout_forward(const float* x, float* y, uint8_t* mask, int64_t rows, int64_t features, float p, uint64_t seed,
                     uint64_t step_key, int64_t first_sample) {
  const CounterRng rng(seed, RngPurpose::kDropout, step_key);
  const float scale = 1.0f / (1.0f - p);
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t base = static_cast<uint64_t>(first_sample + r) * static_cast<uint64_t>(features);
    for (int64_t i = 0; i < features; ++i) {
      const int64_t j = r * features + i;
      const bool keep = rng.uniform(base + static_cast<uint64_t>(i)) >= p;
      mask[j] = keep ? 1 : 0;
      y[j] = keep ? x[j] * scale : 0.0f;
    }
  }
}

void dropout_backward(const float* dy, const uint8_t* mask, int64_t n, float p, float* dx, bool accumulate) {
  const float scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; ++i) {
    const float g = mask[i] ? dy[i] * scale : 0.0f;
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

}  // namespace gradmesh::kernels
