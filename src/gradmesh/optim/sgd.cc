// torch.optim.SGD over flat parameter ranges.
//
// PyTorch's per-step branches (weight decay or not, momentum or not, first
// step or not, nesterov or not) are hoisted out of the element loop into
// template parameters, so each instantiation is one branch-free loop that
// reads p, g (and the momentum buffer) once and writes them once.
#include <cmath>

#include "gradmesh/core/error.h"
#include "gradmesh/optim/optimizer.h"

namespace gradmesh::optim {

namespace {

enum class SgdRule {
  kPlain,     // p -= lr * g
  kMomentum,  // heavy ball: p -= lr * buf
  kNesterov,  // p -= lr * (g + momentum * buf)
};

// One group's update over n elements. `keep` is 1 - dampening.
// p, g, buf: (n,); buf is unused for kPlain.
template <bool kDecay, SgdRule kRule, bool kFirst>
void sgd_kernel(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n, float lr,
                float wd, float momentum, float keep) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if constexpr (kDecay) d = d + wd * p[i];
    if constexpr (kRule != SgdRule::kPlain) {
      // PyTorch starts the buffer as a copy of the first gradient, without dampening.
      const float b = kFirst ? d : buf[i] * momentum + keep * d;
      buf[i] = b;
      d = kRule == SgdRule::kNesterov ? d + momentum * b : b;
    }
    p[i] = p[i] - lr * d;
  }
}

using SgdKernel = void (*)(float*, const float*, float*, int64_t, float, float, float, float);

template <bool kDecay>
SgdKernel pick_kernel(SgdRule rule, bool first) {
  switch (rule) {
    case SgdRule::kPlain:
      return &sgd_kernel<kDecay, SgdRule::kPlain, false>;
    case SgdRule::kMomentum:
      return first ? &sgd_kernel<kDecay, SgdRule::kMomentum, true>
                   : &sgd_kernel<kDecay, SgdRule::kMomentum, false>;
    case SgdRule::kNesterov:
      return first ? &sgd_kernel<kDecay, SgdRule::kNesterov, true>
                   : &sgd_kernel<kDecay, SgdRule::kNesterov, false>;
  }
  return nullptr;
}

void validate(const SgdOptions& o) {
  if (!std::isfinite(o.momentum) || o.momentum < 0)
    throw_error(ErrorKind::kConfig, "optim.momentum",
                "must be finite and >= 0, got " + std::to_string(o.momentum) + "; 0 disables momentum");
  if (!std::isfinite(o.dampening))
    throw_error(ErrorKind::kConfig, "optim.dampening", "must be finite, got " + std::to_string(o.dampening));
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw_error(ErrorKind::kConfig, "optim.nesterov",
                "Nesterov momentum requires momentum > 0 and dampening = 0, got momentum " +
                    std::to_string(o.momentum) + " and dampening " + std::to_string(o.dampening) +
                    "; set optim.momentum (e.g. 0.9) and optim.dampening = 0, or nesterov = false");
}

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<ParamGroup> groups, SgdOptions options) : Optimizer(std::move(groups)), options_(options) {
    validate(options_);
    if (options_.momentum != 0) momentum_ = Tensor::zeros({state_numel()});
  }

  void step(float* params, const float* grads, float lr) override {
    const int64_t t = begin_step(lr);
    const SgdRule rule = options_.momentum == 0 ? SgdRule::kPlain
                         : options_.nesterov    ? SgdRule::kNesterov
                                                : SgdRule::kMomentum;
    // 1 - dampening in double, rounded once: PyTorch passes it as a Python float.
    const float keep = static_cast<float>(1.0 - static_cast<double>(options_.dampening));
    for (size_t k = 0; k < groups().size(); ++k) {
      const ParamGroup& group = groups()[k];
      const SgdKernel kernel = group.weight_decay != 0 ? pick_kernel<true>(rule, t == 1)
                                                       : pick_kernel<false>(rule, t == 1);
      float* p = params + group.offset;
      const float* g = grads + group.offset;
      float* buf = momentum_.defined() ? momentum_.data() + state_offset(k) : nullptr;
      const float wd = group.weight_decay;
      const float momentum = options_.momentum;
      for_chunks(group.count, [&](int64_t lo, int64_t hi) {
        kernel(p + lo, g + lo, buf ? buf + lo : nullptr, hi - lo, lr, wd, momentum, keep);
      });
    }
    finish_step();
  }

  std::string name() const override { return "sgd"; }

  std::vector<std::pair<std::string, Tensor>> state() override {
    std::vector<std::pair<std::string, Tensor>> named = {{"step", step_tensor()}};
    if (momentum_.defined()) named.emplace_back("momentum", momentum_);
    return named;
  }

 private:
  SgdOptions options_;
  Tensor momentum_;  // (state_numel(),) PyTorch's momentum_buffer; undefined without momentum
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(std::vector<ParamGroup> groups, SgdOptions options) {
  return std::make_unique<Sgd>(std::move(groups), options);
}

}  // namespace gradmesh::optim
