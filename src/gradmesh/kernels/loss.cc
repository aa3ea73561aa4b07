#include "gradmesh/kernels/loss.h"

#include <cmath>

namespace gradmesh::kernels {

double softmax_xent_forward(const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                            float* probs) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict z = logits + r * classes;
    float* __restrict p = probs + r * classes;
    float max_z = z[0];
    for (int64_t c = 1; c < classes; ++c) max_z = z[c] > max_z ? z[c] : max_z;
    float sum = 0;
    for (int64_t c = 0; c < classes; ++c) {
      p[c] = std::exp(z[c] - max_z);
      sum += p[c];
    }
    const float inv = 1.0f / sum;
    for (int64_t c = 0; c < classes; ++c) p[c] *= inv;
    // -log softmax = log(sum) - (z - max): exact even when p[label] underflows to 0.
    total += std::log(static_cast<double>(sum)) - static_cast<double>(z[labels[r]] - max_z);
  }
  return total;
}

void softmax_xent_backward(const float* probs, const int32_t* labels, int64_t rows, int64_t classes, float scale,
                           float* dlogits, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict p = probs + r * classes;
    float* __restrict d = dlogits + r * classes;
    const int32_t label = labels[r];
    for (int64_t c = 0; c < classes; ++c) {
      const float g = scale * (p[c] - (c == label ? 1.0f : 0.0f));
      d[c] = accumulate ? d[c] + g : g;
    }
  }
}

double squared_error_sum(const float* pred, const float* target, int64_t n) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(pred[i]) - target[i];
    total += d * d;
  }
  return total;
}

void squared_error_backward(const float* pred, const float* target, int64_t n, float scale, float* dpred,
                            bool accumulate) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = 2.0f * scale * (pred[i] - target[i]);
    dpred[i] = accumulate ? dpred[i] + g : g;
  }
}

void argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    int32_t best = 0;
    for (int64_t c = 1; c < cols; ++c)
      if (row[c] > row[best]) best = static_cast<int32_t>(c);
    out[r] = best;
  }
}

}  // namespace gradmesh::kernels
