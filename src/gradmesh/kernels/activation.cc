#include "gradmesh/kernels/activation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace gradmesh::kernels {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// GELU in four lanes at a time, with exp and erf written out in GCC vector
// arithmetic (selects instead of branches, no library calls): the libm calls
// kept these loops scalar, a sixth of a GPT step. The same operations run at
// every instruction-set level, so results do not depend on the CPU.
typedef float F4 __attribute__((vector_size(16)));
typedef int32_t I4 __attribute__((vector_size(16)));

inline F4 splat(float v) { return F4{v, v, v, v}; }

// exp: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by Cephes' degree-6
// polynomial (relative error ~1e-7), 2^n put into the exponent bits.
inline F4 exp4(F4 x) {
  x = x < splat(-87.3f) ? splat(-87.3f) : x;
  x = x > splat(88.7f) ? splat(88.7f) : x;
  // Round to nearest by adding and subtracting 1.5 * 2^23 (|n| < 2^22 here).
  const F4 n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const F4 r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 split in two for the subtraction
  F4 p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const F4 e = p * r * r + r + 1.0f;
  const I4 bits = (__builtin_convertvector(n, I4) + 127) << 23;
  F4 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return e * scale;
}

// erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), the
// formula PyTorch's vectorised CPU erf uses.
inline F4 erf4(F4 x) {
  const F4 a = x < 0.0f ? -x : x;
  const F4 t = 1.0f / (1.0f + 0.3275911f * a);
  F4 p = splat(1.061405429f);
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const F4 y = 1.0f - p * t * exp4(-a * a);
  return x < 0.0f ? -y : y;
}

inline F4 gelu4(F4 x) { return 0.5f * x * (1.0f + erf4(x * kInvSqrt2)); }
inline F4 gelu_grad4(F4 x) {
  return 0.5f * (1.0f + erf4(x * kInvSqrt2)) + x * kInvSqrt2Pi * exp4(-0.5f * x * x);
}

// One group of four: out = f(x), times dy when kScaled, added to out when kAdd.
template <bool kScaled, bool kAdd, class F>
inline void group4(const float* x, const float* dy, float* out, F f) {
  F4 xv, v;
  std::memcpy(&xv, x, sizeof xv);
  v = f(xv);
  if constexpr (kScaled) {
    F4 dv;
    std::memcpy(&dv, dy, sizeof dv);
    v = dv * v;
  }
  if constexpr (kAdd) {
    F4 ov;
    std::memcpy(&ov, out, sizeof ov);
    v = ov + v;
  }
  std::memcpy(out, &v, sizeof v);
}

// out[i] = f(x[i]) (kScaled: dy[i] * f(x[i]); kAdd: added to out[i]) in
// groups of four; the last partial group goes through zero-padded copies.
template <bool kScaled, bool kAdd, class F>
void map4(const float* x, const float* dy, float* out, int64_t n, F f) {
  const int64_t full = n / 4 * 4;
  for (int64_t i = 0; i < full; i += 4) group4<kScaled, kAdd>(x + i, dy + (kScaled ? i : 0), out + i, f);
  if (full == n) return;
  float xs[4] = {}, ds[4] = {}, os[4] = {};
  const auto rest = static_cast<size_t>(n - full);
  std::memcpy(xs, x + full, rest * sizeof(float));
  if (kScaled) std::memcpy(ds, dy + full, rest * sizeof(float));
  if (kAdd) std::memcpy(os, out + full, rest * sizeof(float));
  group4<kScaled, kAdd>(xs, ds, os, f);
  std::memcpy(out + full, os, rest * sizeof(float));
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
      map4<false, false>(x, nullptr, y, n, gelu4);
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
      if (accumulate) map4<true, true>(x, dy, dx, n, gelu_grad4);
      else map4<true, false>(x, dy, dx, n, gelu_grad4);
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
