#include "gradmesh/kernels/activation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "gradmesh/kernels/isa.h"
#include "gradmesh/kernels/simd.h"

namespace gradmesh::kernels {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// GELU sixteen lanes at a time, with exp and erf written out in vector
// arithmetic (selects instead of branches, no library calls), compiled per
// ISA level (isa.h). kFma fuses the polynomial steps (the default numerics);
// without it the operations are the FMA-free ones of portable numerics.
using simd::Vec16;
using simd::madd;
using simd::splat;
using I16 = int32_t __attribute__((vector_size(64)));

// exp: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by Cephes' degree-6
// polynomial (relative error ~1e-7), 2^n put into the exponent bits.
template <bool kFma>
[[gnu::always_inline]] inline Vec16 exp16(Vec16 x) {
  x = x < -87.3f ? splat<Vec16>(-87.3f) : x;
  x = x > 88.7f ? splat<Vec16>(88.7f) : x;
  // Round to nearest by adding and subtracting 1.5 * 2^23 (|n| < 2^22 here).
  const Vec16 n = madd<kFma>(x, splat<Vec16>(1.44269504088896341f), splat<Vec16>(12582912.0f)) - 12582912.0f;
  // ln2 split in two for the subtraction
  const Vec16 r = madd<kFma>(n, splat<Vec16>(2.12194440e-4f), madd<kFma>(-n, splat<Vec16>(0.693359375f), x));
  Vec16 p = splat<Vec16>(1.9875691500e-4f);
  p = madd<kFma>(p, r, splat<Vec16>(1.3981999507e-3f));
  p = madd<kFma>(p, r, splat<Vec16>(8.3334519073e-3f));
  p = madd<kFma>(p, r, splat<Vec16>(4.1665795894e-2f));
  p = madd<kFma>(p, r, splat<Vec16>(1.6666665459e-1f));
  p = madd<kFma>(p, r, splat<Vec16>(5.0000001201e-1f));
  const Vec16 e = madd<kFma>(p * r, r, r) + 1.0f;
  const I16 bits = (__builtin_convertvector(n, I16) + 127) << 23;
  Vec16 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return e * scale;
}

// erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), the
// formula PyTorch's vectorised CPU erf uses.
// exp_minus_a2: exp(-x^2), when the caller has it already.
template <bool kFma>
[[gnu::always_inline]] inline Vec16 erf16_given_exp(Vec16 x, Vec16 exp_minus_a2) {
  const Vec16 a = x < 0.0f ? -x : x;
  const Vec16 t = 1.0f / madd<kFma>(splat<Vec16>(0.3275911f), a, splat<Vec16>(1.0f));
  Vec16 p = splat<Vec16>(1.061405429f);
  p = madd<kFma>(p, t, splat<Vec16>(-1.453152027f));
  p = madd<kFma>(p, t, splat<Vec16>(1.421413741f));
  p = madd<kFma>(p, t, splat<Vec16>(-0.284496736f));
  p = madd<kFma>(p, t, splat<Vec16>(0.254829592f));
  const Vec16 y = 1.0f - p * t * exp_minus_a2;
  return x < 0.0f ? -y : y;
}
template <bool kFma>
[[gnu::always_inline]] inline Vec16 erf16(Vec16 x) {
  return erf16_given_exp<kFma>(x, exp16<kFma>(-x * x));
}

template <bool kFma>
[[gnu::always_inline]] inline Vec16 gelu16(Vec16 x) {
  return 0.5f * x * (1.0f + erf16<kFma>(x * kInvSqrt2));
}
// Phi(x) + x phi(x). The fused numerics take erf's exp(-(x / sqrt 2)^2) and
// phi's exp(-x^2 / 2) as one exponential; the portable ones compute both.
template <bool kFma>
[[gnu::always_inline]] inline Vec16 gelu_grad16(Vec16 x) {
  if constexpr (kFma) {
    const Vec16 e = exp16<true>(-0.5f * x * x);
    return madd<true>(x * kInvSqrt2Pi, e, 0.5f * (1.0f + erf16_given_exp<true>(x * kInvSqrt2, e)));
  } else {
    return madd<false>(x * kInvSqrt2Pi, exp16<false>(-0.5f * x * x), 0.5f * (1.0f + erf16<false>(x * kInvSqrt2)));
  }
}

// out[i] = f(x[i]) (kScaled: dy[i] * f(x[i]); kAdd: added to out[i]) for
// one group of sixteen.
template <bool kScaled, bool kAdd, class F>
[[gnu::always_inline]] inline void group16(const float* x, const float* dy, float* out, const F& f) {
  Vec16 v = f(simd::load<Vec16>(x));
  if constexpr (kScaled) v = simd::load<Vec16>(dy) * v;
  if constexpr (kAdd) v = simd::load<Vec16>(out) + v;
  simd::store(out, v);
}

// The same over n elements; the last partial group goes through zero-padded copies.
template <bool kScaled, bool kAdd, class F>
[[gnu::always_inline]] inline void map16(const float* x, const float* dy, float* out, int64_t n, const F& f) {
  const int64_t full = n / 16 * 16;
  for (int64_t i = 0; i < full; i += 16) group16<kScaled, kAdd>(x + i, dy + (kScaled ? i : 0), out + i, f);
  if (full == n) return;
  float xs[16] = {}, ds[16] = {}, os[16] = {};
  const auto rest = static_cast<size_t>(n - full);
  std::memcpy(xs, x + full, rest * sizeof(float));
  if (kScaled) std::memcpy(ds, dy + full, rest * sizeof(float));
  if (kAdd) std::memcpy(os, out + full, rest * sizeof(float));
  group16<kScaled, kAdd>(xs, ds, os, f);
  std::memcpy(out + full, os, rest * sizeof(float));
}

// The per-group functions as types, not lambdas: a lambda's call operator
// is compiled for the baseline and would hand a 64-byte vector back to an
// AVX-512 copy through a different calling convention.
template <bool kFma>
struct Gelu {
  [[gnu::always_inline]] Vec16 operator()(const Vec16& v) const { return gelu16<kFma>(v); }
};
template <bool kFma>
struct GeluGrad {
  [[gnu::always_inline]] Vec16 operator()(const Vec16& v) const { return gelu_grad16<kFma>(v); }
};

template <bool kFma>
[[gnu::always_inline]] inline void gelu_forward_numerics(const float* x, float* y, int64_t n) {
  map16<false, false>(x, nullptr, y, n, Gelu<kFma>{});
}
template <bool kFma>
[[gnu::always_inline]] inline void gelu_backward_numerics(const float* x, const float* dy, float* dx, int64_t n,
                                                          bool accumulate) {
  if (accumulate) map16<true, true>(x, dy, dx, n, GeluGrad<kFma>{});
  else map16<true, false>(x, dy, dx, n, GeluGrad<kFma>{});
}

[[gnu::always_inline]] inline void gelu_forward_body(const float* x, float* y, int64_t n, bool fma) {
  if (fma) gelu_forward_numerics<true>(x, y, n);
  else gelu_forward_numerics<false>(x, y, n);
}
[[gnu::always_inline]] inline void gelu_backward_body(const float* x, const float* dy, float* dx, int64_t n,
                                                      bool accumulate, bool fma) {
  if (fma) gelu_backward_numerics<true>(x, dy, dx, n, accumulate);
  else gelu_backward_numerics<false>(x, dy, dx, n, accumulate);
}

GRADMESH_ISA_VARIANTS(gelu_forward, (const float* x, float* y, int64_t n, bool fma), (x, y, n, fma))
GRADMESH_ISA_VARIANTS(gelu_backward, (const float* x, const float* dy, float* dx, int64_t n, bool accumulate, bool fma),
                      (x, dy, dx, n, accumulate, fma))

// The memory-bound loops of Linear and the residual stream, compiled per
// level (isa.h) so they run in the widest vectors: each output is the same
// sequence of operations at every width (column sums add the rows in order).
[[gnu::always_inline]] inline void bias_rows_body(float* y, const float* bias, int64_t rows, int64_t cols, bool relu) {
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict row = y + r * cols;
    if (relu) {
      for (int64_t c = 0; c < cols; ++c) {
        const float v = row[c] + bias[c];
        row[c] = v > 0.0f ? v : 0.0f;
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
    }
  }
}
GRADMESH_ISA_VARIANTS(bias_rows, (float* y, const float* bias, int64_t rows, int64_t cols, bool relu),
                      (y, bias, rows, cols, relu))

[[gnu::always_inline]] inline void column_sums_into_body(const float* x, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict row = x + r * cols;
    float* __restrict o = out;
    for (int64_t c = 0; c < cols; ++c) o[c] += row[c];
  }
}
GRADMESH_ISA_VARIANTS(column_sums_into, (const float* x, int64_t rows, int64_t cols, float* out), (x, rows, cols, out))

// y = a + b; y may be a or b.
[[gnu::always_inline]] inline void add_two_body(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
GRADMESH_ISA_VARIANTS(add_two, (const float* a, const float* b, float* y, int64_t n), (a, b, y, n))

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
      gelu_forward(x, y, n, !portable_numerics());
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
      gelu_backward(x, dy, dx, n, accumulate, !portable_numerics());
      return;
    case Activation::kTanh:
      store_grad(dx, n, accumulate, [&](int64_t i) { return dy[i] * (1.0f - y[i] * y[i]); });
      return;
  }
}

void bias_rows_forward(float* y, const float* bias, int64_t rows, int64_t cols, Activation act) {
  bias_rows(y, bias, rows, cols, act == Activation::kRelu);
}

void relu_mask_inplace(float* dy, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void column_sums(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate) {
  if (!accumulate) std::memset(out, 0, static_cast<size_t>(cols) * sizeof(float));
  column_sums_into(x, rows, cols, out);
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
    add_two(y, x, y, n);
  } else if (x != y) {
    std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
  }
}

void add_sum(const float* a, const float* b, float* y, int64_t n) { add_two(a, b, y, n); }

void scale_inplace(float* y, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

}  // namespace gradmesh::kernels
