#include "gradmesh/kernels/layer_norm.h"

#include <cmath>
#include <cstring>

namespace gradmesh::kernels {

void layer_norm_forward(const float* x, const float* gamma, const float* beta, int64_t rows, int64_t cols, float eps,
                        float* y, float* mean, float* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    double sum = 0, sum_sq = 0;
    for (int64_t c = 0; c < cols; ++c) sum += row[c];
    const double mu = sum / cols;
    for (int64_t c = 0; c < cols; ++c) sum_sq += (row[c] - mu) * (row[c] - mu);  // two-pass: no cancellation
    const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / cols + eps));
    mean[r] = static_cast<float>(mu);
    rstd[r] = inv;
    float* out = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const float xhat = (row[c] - mean[r]) * inv;
      out[c] = xhat * (gamma ? gamma[c] : 1.0f) + (beta ? beta[c] : 0.0f);
    }
  }
}

void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                         int64_t rows, int64_t cols, float* dx, bool accumulate_dx, float* dgamma, float* dbeta,
                         bool accumulate_params) {
  if (!accumulate_params) {
    if (dgamma) std::memset(dgamma, 0, static_cast<size_t>(cols) * sizeof(float));
    if (dbeta) std::memset(dbeta, 0, static_cast<size_t>(cols) * sizeof(float));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    const float* g = dy + r * cols;
    // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * gamma.
    double sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const float xhat = (row[c] - mean[r]) * rstd[r];
      const float dxhat = g[c] * (gamma ? gamma[c] : 1.0f);
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
      if (dgamma) dgamma[c] += g[c] * xhat;
      if (dbeta) dbeta[c] += g[c];
    }
    if (!dx) continue;
    const float m1 = static_cast<float>(sum_dxhat / cols), m2 = static_cast<float>(sum_dxhat_xhat / cols);
    float* out = dx + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const float xhat = (row[c] - mean[r]) * rstd[r];
      const float v = rstd[r] * (g[c] * (gamma ? gamma[c] : 1.0f) - m1 - xhat * m2);
      out[c] = accumulate_dx ? out[c] + v : v;
    }
  }
}

}  // namespace gradmesh::kernels
