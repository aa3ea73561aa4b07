#include "gradmesh/kernels/activation.h"

#include <cmath>
#include <cstring>

namespace gradmesh::kernels {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

inline float gelu(float x) { return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2)); }
inline float gelu_grad(float x) {
  const float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
  return cdf + x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
}

// Writes or adds `value(i)` into dx; the branch on `accumulate` sits outside the loop.
template <typename F>
inline void store_grad(float* __restrict dx, int64_t n, bool accumulate, F value) {
  if (accumulate) {
    for (int64_t i = 0; i < n; ++i) dx[i] += value(i);
  } else {
    for (int64_t i = 0; i < n; ++i) dx[i] = value(i);
  }
}

}  // namespace

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::kNone: return "none";
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
    case Activation::kTanh: return "tanh";
  }
  return "?";
}

void activation_forward(Activation act, const float* x, float* y, int64_t n) {
  switch (act) {
    case Activation::kNone:
      if (x != y) std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
      return;
    case Activation::kGelu:
      for (int64_t i = 0; i < n; ++i) y[i] = gelu(x[i]);
      return;
    case Activation::kTanh:
      for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
      return;
  }
}

void activation_backward(Activation act, const float* x, const float* y, const float* dy, float* dx, int64_t n,
                         bool accumulate) {
  switch (act) {
    case Activation::kNone:
      store_grad(dx, n, accumulate, [&](int64_t i) { return dy[i]; });
      return;
    case Activation::kRelu:
      store_grad(dx, n, accumulate, [&](int64_t i) { return y[i] > 0.0f ? dy[i] : 0.0f; });
      return;
    case Activation::kGelu:
      store_grad(dx, n, accumulate, [&](int64_t i) { return dy[i] * gelu_grad(x[i]); });
      return;
    case Activation::kTanh:
      store_grad(dx, n, accumulate, [&](int64_t i) { return dy[i] * (1.0f - y[i] * y[i]); });
      return;
  }
}

void bias_rows_forward(float* y, const float* bias, int64_t rows, int64_t cols, Activation act) {
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict row = y + r * cols;
    if (act == Activation::kRelu) {
      for (int64_t c = 0; c < cols; ++c) {
        const float v = row[c] + bias[c];
        row[c] = v > 0.0f ? v : 0.0f;
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
    }
  }
}

void relu_mask_inplace(float* dy, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void column_sums(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate) {
  if (!accumulate) std::memset(out, 0, static_cast<size_t>(cols) * sizeof(float));
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict row = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) out[c] += row[c];
  }
}

void row_sums(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate) {
  constexpr int64_t kLanes = 16;
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict row = x + r * cols;
    float lanes[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= cols; i += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += row[i + l];
    float sum = 0;
    for (int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
    for (; i < cols; ++i) sum += row[i];
    out[r] = accumulate ? out[r] + sum : sum;
  }
}

void add_into(float* y, const float* x, int64_t n, bool accumulate) {
  if (accumulate) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
  } else if (x != y) {
    std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
  }
}

void scale_inplace(float* y, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

}  // namespace gradmesh::kernels
