#include "gradmesh/kernels/layer_norm.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gradmesh/kernels/isa.h"
#include "gradmesh/kernels/simd.h"

namespace gradmesh::kernels {
namespace {

using simd::madd;
using simd::splat;
using simd::Vec16;

// Portable numerics: row sums in double, one element at a time (the
// arithmetic of gradmesh before fused kernels; slow, scalar).
void forward_portable(const float* x, const float* gamma, const float* beta, int64_t rows, int64_t cols, float eps,
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

void backward_portable(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                       int64_t rows, int64_t cols, float* dx, bool accumulate_dx, float* dgamma, float* dbeta) {
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

// Default numerics (the lambdas below are always inlined: a call operator
// compiled for the baseline would pass 64-byte vectors to an AVX-512 copy
// through a different calling convention): sixteen float lanes per row, fused multiply-adds, the
// lanes summed in a fixed order, then the cols % 16 tail. Null gamma/beta
// (and dgamma/dbeta) arrive here as ones, zeros and scratch.
struct Row {
  int64_t cols, full;  // full: cols rounded down to 16
};

template <class F>
[[gnu::always_inline]] inline float row_sum(const Row& w, F term) {
  Vec16 acc = splat<Vec16>(0.0f);
  for (int64_t c = 0; c < w.full; c += 16) acc = term(c, acc);
  float s = simd::lane_sum(acc);
  for (int64_t c = w.full; c < w.cols; ++c) s = term(c, s);
  return s;
}

[[gnu::always_inline]] inline void forward_fused_body(const float* x, const float* gamma, const float* beta,
                                                      int64_t rows, int64_t cols, float eps, float* y, float* mean,
                                                      float* rstd) {
  const Row w{cols, cols / 16 * 16};
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    const float mu = row_sum(w, [&]<class V>(int64_t c, V acc) __attribute__((always_inline)) { return acc + simd::load<V>(row + c); }) / cols;
    const float var = row_sum(w, [&]<class V>(int64_t c, V acc) __attribute__((always_inline)) {
                        const V d = simd::load<V>(row + c) - mu;
                        return madd<true>(d, d, acc);
                      }) / cols;
    const float inv = 1.0f / std::sqrt(var + eps);
    mean[r] = mu;
    rstd[r] = inv;
    float* out = y + r * cols;
    const auto apply = [&]<class V>(int64_t c) __attribute__((always_inline)) {
      const V xhat = (simd::load<V>(row + c) - mu) * inv;
      simd::store(out + c, madd<true>(xhat, simd::load<V>(gamma + c), simd::load<V>(beta + c)));
    };
    for (int64_t c = 0; c < w.full; c += 16) apply.template operator()<Vec16>(c);
    for (int64_t c = w.full; c < cols; ++c) apply.template operator()<float>(c);
  }
}

[[gnu::always_inline]] inline void backward_fused_body(const float* x, const float* gamma, const float* mean,
                                                       const float* rstd, const float* dy, int64_t rows, int64_t cols,
                                                       float* dx, bool accumulate_dx, float* dgamma, float* dbeta) {
  const Row w{cols, cols / 16 * 16};
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    const float* g = dy + r * cols;
    const float mu = mean[r], rs = rstd[r];
    // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * gamma.
    Vec16 s1 = splat<Vec16>(0.0f), s2 = s1;
    float t1 = 0.0f, t2 = 0.0f;
    const auto sums = [&]<class V>(int64_t c, V& a1, V& a2) __attribute__((always_inline)) {
      const V xhat = (simd::load<V>(row + c) - mu) * rs, gc = simd::load<V>(g + c);
      const V dxhat = gc * simd::load<V>(gamma + c);
      a1 += dxhat;
      a2 = madd<true>(dxhat, xhat, a2);
      simd::store(dgamma + c, madd<true>(gc, xhat, simd::load<V>(dgamma + c)));
      simd::store(dbeta + c, simd::load<V>(dbeta + c) + gc);
    };
    for (int64_t c = 0; c < w.full; c += 16) sums.template operator()<Vec16>(c, s1, s2);
    for (int64_t c = w.full; c < cols; ++c) sums.template operator()<float>(c, t1, t2);
    if (!dx) continue;
    const float m1 = (simd::lane_sum(s1) + t1) / cols, m2 = (simd::lane_sum(s2) + t2) / cols;
    float* out = dx + r * cols;
    // Accumulating or not is a template argument: GCC 12 turned a runtime
    // `if (accumulate) v += ...` in the AVX-512 copy into an add masked by
    // the bool itself, lane 0 only.
    const auto write = [&]<class V, bool kAccumulate>(int64_t c) __attribute__((always_inline)) {
      const V xhat = (simd::load<V>(row + c) - mu) * rs;
      const V dxhat = simd::load<V>(g + c) * simd::load<V>(gamma + c);
      V v = rs * madd<true>(-xhat, splat<V>(m2), dxhat - m1);
      if constexpr (kAccumulate) v += simd::load<V>(out + c);
      simd::store(out + c, v);
    };
    if (accumulate_dx) {
      for (int64_t c = 0; c < w.full; c += 16) write.template operator()<Vec16, true>(c);
      for (int64_t c = w.full; c < cols; ++c) write.template operator()<float, true>(c);
    } else {
      for (int64_t c = 0; c < w.full; c += 16) write.template operator()<Vec16, false>(c);
      for (int64_t c = w.full; c < cols; ++c) write.template operator()<float, false>(c);
    }
  }
}

GRADMESH_ISA_VARIANTS(forward_fused,
                      (const float* x, const float* gamma, const float* beta, int64_t rows, int64_t cols, float eps,
                       float* y, float* mean, float* rstd),
                      (x, gamma, beta, rows, cols, eps, y, mean, rstd))
GRADMESH_ISA_VARIANTS(backward_fused,
                      (const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                       int64_t rows, int64_t cols, float* dx, bool accumulate_dx, float* dgamma, float* dbeta),
                      (x, gamma, mean, rstd, dy, rows, cols, dx, accumulate_dx, dgamma, dbeta))

// Ones or zeros standing in for a missing gamma or beta, and scratch for a
// parameter gradient nobody asked for.
float* filled(std::vector<float>& buffer, int64_t cols, float value) {
  buffer.assign(static_cast<size_t>(cols), value);
  return buffer.data();
}

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, int64_t rows, int64_t cols, float eps,
                        float* y, float* mean, float* rstd) {
  if (portable_numerics()) return forward_portable(x, gamma, beta, rows, cols, eps, y, mean, rstd);
  std::vector<float> ones, zeros;
  forward_fused(x, gamma ? gamma : filled(ones, cols, 1.0f), beta ? beta : filled(zeros, cols, 0.0f), rows, cols, eps,
                y, mean, rstd);
}

void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                         int64_t rows, int64_t cols, float* dx, bool accumulate_dx, float* dgamma, float* dbeta,
                         bool accumulate_params) {
  if (!accumulate_params) {
    if (dgamma) std::memset(dgamma, 0, static_cast<size_t>(cols) * sizeof(float));
    if (dbeta) std::memset(dbeta, 0, static_cast<size_t>(cols) * sizeof(float));
  }
  if (portable_numerics())
    return backward_portable(x, gamma, mean, rstd, dy, rows, cols, dx, accumulate_dx, dgamma, dbeta);
  std::vector<float> ones, scratch_gamma, scratch_beta;
  backward_fused(x, gamma ? gamma : filled(ones, cols, 1.0f), mean, rstd, dy, rows, cols, dx, accumulate_dx,
                 dgamma ? dgamma : filled(scratch_gamma, cols, 0.0f),
                 dbeta ? dbeta : filled(scratch_beta, cols, 0.0f));
}

}  // namespace gradmesh::kernels
