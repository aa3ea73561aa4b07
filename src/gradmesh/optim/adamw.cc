// torch.optim.AdamW over flat parameter ranges.
//
// Per element, in PyTorch's operation order (_single_tensor_adam with
// decoupled weight decay):
//   p = p * decay                          decay = 1 - lr*wd
//   m = lerp(m, g, w1)                     w1 = 1 - beta1
//   v = v * beta2 + (w2 * g) * g           w2 = 1 - beta2
//   p = p + (neg_step * m) / (sqrt(v) / bc2_sqrt + eps)
// with neg_step = -lr / (1 - beta1^t) and bc2_sqrt = sqrt(1 - beta2^t)
// computed in double once per step. PyTorch's lerp switches formula at
// weight 0.5 for accuracy; that choice depends only on beta1, so it is a
// template parameter rather than a branch in the loop.
//
// The loop is written with SSE2 intrinsics where available: GCC does not
// vectorise sqrtf unless -fno-math-errno is set for the whole build. The
// vector body and the scalar tail perform the same IEEE operations in the
// same order, so every element gets the same bits wherever it falls.
#include <cmath>

#include "gradmesh/core/error.h"
#include "gradmesh/optim/optimizer.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gradmesh::optim {

namespace {

struct AdamWScalars {
  float decay;     // 1 - lr*wd
  float w1;        // lerp weight 1 - beta1
  float w1_rest;   // 1 - w1, for the large-weight lerp formula
  float beta2;
  float w2;        // 1 - beta2
  float neg_step;  // -lr / bias_correction1
  float bc2_sqrt;  // sqrt(bias_correction2)
  float eps;
};

template <bool kSmallWeight>
inline float lerp(float from, float to, const AdamWScalars& s) {
  if constexpr (kSmallWeight) return from + s.w1 * (to - from);
  return to - (to - from) * s.w1_rest;
}

// p, g, m, v: (n,). Updates p, m and v in place in one pass.
template <bool kSmallWeight>
void adamw_kernel(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                  int64_t n, const AdamWScalars& s) {
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128 decay = _mm_set1_ps(s.decay), w1 = _mm_set1_ps(s.w1), w1_rest = _mm_set1_ps(s.w1_rest);
  const __m128 beta2 = _mm_set1_ps(s.beta2), w2 = _mm_set1_ps(s.w2), neg_step = _mm_set1_ps(s.neg_step);
  const __m128 bc2_sqrt = _mm_set1_ps(s.bc2_sqrt), eps = _mm_set1_ps(s.eps);
  for (; i + 4 <= n; i += 4) {
    const __m128 gi = _mm_loadu_ps(g + i);
    const __m128 m_old = _mm_loadu_ps(m + i);
    const __m128 mi = kSmallWeight ? _mm_add_ps(m_old, _mm_mul_ps(w1, _mm_sub_ps(gi, m_old)))
                                   : _mm_sub_ps(gi, _mm_mul_ps(_mm_sub_ps(gi, m_old), w1_rest));
    const __m128 vi = _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(v + i), beta2), _mm_mul_ps(_mm_mul_ps(w2, gi), gi));
    const __m128 denom = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vi), bc2_sqrt), eps);
    const __m128 pi = _mm_mul_ps(_mm_loadu_ps(p + i), decay);
    _mm_storeu_ps(m + i, mi);
    _mm_storeu_ps(v + i, vi);
    _mm_storeu_ps(p + i, _mm_add_ps(pi, _mm_div_ps(_mm_mul_ps(neg_step, mi), denom)));
  }
#endif
  for (; i < n; ++i) {
    const float gi = g[i];
    const float mi = lerp<kSmallWeight>(m[i], gi, s);
    const float vi = v[i] * s.beta2 + (s.w2 * gi) * gi;
    const float denom = std::sqrt(vi) / s.bc2_sqrt + s.eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * s.decay + (s.neg_step * mi) / denom;
  }
}

void validate(const AdamWOptions& o) {
  const auto check_beta = [](float beta, const char* key) {
    if (!(beta >= 0 && beta < 1))
      throw_error(ErrorKind::kConfig, key,
                  "must be in [0, 1), got " + std::to_string(beta) + "; typical values are 0.9 and 0.999");
  };
  check_beta(o.beta1, "optim.beta1");
  check_beta(o.beta2, "optim.beta2");
  if (!std::isfinite(o.eps) || o.eps < 0)
    throw_error(ErrorKind::kConfig, "optim.eps", "must be finite and >= 0, got " + std::to_string(o.eps));
}

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
      : Optimizer(std::move(groups)), options_(options) {
    validate(options_);
    exp_avg_ = Tensor::zeros({state_numel()});
    exp_avg_sq_ = Tensor::zeros({state_numel()});
  }

  void step(float* params, const float* grads, float lr) override {
    const double t = static_cast<double>(begin_step(lr));
    const double beta1 = options_.beta1, beta2 = options_.beta2;
    AdamWScalars s{};
    s.w1 = static_cast<float>(1.0 - beta1);
    s.w1_rest = 1.0f - s.w1;
    s.beta2 = options_.beta2;
    s.w2 = static_cast<float>(1.0 - beta2);
    s.neg_step = static_cast<float>(-(static_cast<double>(lr) / (1.0 - std::pow(beta1, t))));
    s.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, t)));
    s.eps = options_.eps;
    const bool small_weight = std::fabs(s.w1) < 0.5f;
    for (size_t k = 0; k < groups().size(); ++k) {
      const ParamGroup& group = groups()[k];
      s.decay = static_cast<float>(1.0 - static_cast<double>(lr) * group.weight_decay);
      float* p = params + group.offset;
      const float* g = grads + group.offset;
      float* m = exp_avg_.data() + state_offset(k);
      float* v = exp_avg_sq_.data() + state_offset(k);
      for_chunks(group.count, [&](int64_t lo, int64_t hi) {
        if (small_weight)
          adamw_kernel<true>(p + lo, g + lo, m + lo, v + lo, hi - lo, s);
        else
          adamw_kernel<false>(p + lo, g + lo, m + lo, v + lo, hi - lo, s);
      });
    }
    finish_step();
  }

  std::string name() const override { return "adamw"; }

  std::vector<std::pair<std::string, Tensor>> state() override {
    return {{"step", step_tensor()}, {"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
  }

 private:
  AdamWOptions options_;
  Tensor exp_avg_;     // (state_numel(),) first moment m
  Tensor exp_avg_sq_;  // (state_numel(),) second moment v
};

}  // namespace

std::unique_ptr<Optimizer> make_adamw(std::vector<ParamGroup> groups, AdamWOptions options) {
  return std::make_unique<AdamW>(std::move(groups), options);
}

}  // namespace gradmesh::optim
