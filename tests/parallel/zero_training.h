// Test support for ZeRO: a few training steps of a small MLP on one rank of
// a group, under plain data parallelism (GradientReducer), ZeRO stage 1 or 2
// (ZeroReducer), or alone with the whole batch, so the tests can compare the
// weights the three end with.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gradmesh/autograd/ops.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/models.h"
#include "gradmesh/optim/clip.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/parallel/gradient_reducer.h"
#include "gradmesh/parallel/zero_reducer.h"

namespace gradmesh::parallel::testing {

enum class Optim { kAdamW, kSgdMomentum };

inline const char* optim_name(Optim o) { return o == Optim::kAdamW ? "adamw" : "sgd+momentum"; }

struct TrainSpec {
  int stage = 1;           // 0: GradientReducer; 1, 2: ZeroReducer; -1: no group, the whole batch
  Optim optim = Optim::kAdamW;
  float clip = 0;          // clip_grad_norm's max_norm; 0: none
  int steps = 4;
  int64_t global_batch = 10;  // uneven slices on 3 and 4 ranks
  nn::MlpSpec mlp = [] {
    nn::MlpSpec spec;
    spec.in_features = 8;
    spec.hidden = {16, 12};
    spec.classes = 5;
    return spec;
  }();  // 413 parameters: divisible by none of 2, 3, 4
  int64_t first_bucket_bytes = 64;  // several buckets for a tiny model
  int64_t bucket_bytes = 256;
  bool overlap = true;
};

struct RankResult {
  std::vector<float> params;  // the flat parameters after the last step
  std::vector<float> norms;   // per step, the norm clipping saw (with clip > 0)
  int64_t optimizer_state = 0;  // elements of each per-element state buffer on this rank
};

// Weight decay on matrices only, so ranks' groups carry two different values.
inline float decay_weights_only(const nn::ParameterInfo& p) { return p.shape.size() > 1 ? 0.01f : 0.0f; }

inline std::unique_ptr<optim::Optimizer> make_optimizer(Optim o, std::vector<optim::ParamGroup> groups) {
  if (o == Optim::kAdamW) return optim::make_adamw(std::move(groups), {});
  return optim::make_sgd(std::move(groups), {0.9f, 0.0f, false});
}

inline float learning_rate(Optim o) { return o == Optim::kAdamW ? 0.01f : 0.1f; }

// Sample i of step s: deterministic, different per sample and step.
inline void batch_slice(const TrainSpec& spec, int step, int64_t lo, int64_t hi, Tensor& x, std::vector<int32_t>& y) {
  const int64_t in = spec.mlp.in_features;
  std::vector<float> values(static_cast<size_t>((hi - lo) * in));
  y.clear();
  for (int64_t i = lo; i < hi; ++i) {
    for (int64_t f = 0; f < in; ++f)
      values[static_cast<size_t>((i - lo) * in + f)] = std::sin(0.37f * static_cast<float>(i * in + f) + 1.3f * step);
    y.push_back(static_cast<int32_t>((i * 7 + step) % spec.mlp.classes));
  }
  x = Tensor::from_vector({hi - lo, in}, values);
}

// Trains rank `rank` of `group` (nullptr with stage -1) and returns its result.
// Throws when a step is not finite: these runs never diverge.
inline RankResult train_rank(const TrainSpec& spec, const std::shared_ptr<comm::ProcessGroup>& group) {
  const int world = group ? group->size() : 1, rank = group ? group->rank() : 0;
  nn::Model model(nn::build_mlp(spec.mlp), 11);
  std::unique_ptr<GradientReducer> plain;
  std::unique_ptr<ZeroReducer> zero;
  std::vector<optim::ParamGroup> groups;
  if (spec.stage >= 1) {
    ZeroOptions options;
    options.stage = spec.stage;
    options.first_bucket_bytes = spec.first_bucket_bytes;
    options.bucket_bytes = spec.bucket_bytes;
    options.overlap = spec.overlap;
    zero = std::make_unique<ZeroReducer>(model, group, options);
    groups = zero->param_groups(decay_weights_only);
  } else {
    if (spec.stage == 0) {
      ReducerOptions options;
      options.first_bucket_bytes = spec.first_bucket_bytes;
      options.bucket_bytes = spec.bucket_bytes;
      options.overlap = spec.overlap;
      plain = std::make_unique<GradientReducer>(model, group, options);
    }
    for (const nn::ParameterInfo& p : model.parameters()) groups.push_back({p.offset, p.numel, decay_weights_only(p)});
  }
  auto optimizer = make_optimizer(spec.optim, groups);
  RankResult result;
  result.optimizer_state = optimizer->state_numel();
  const int64_t lo = spec.global_batch * rank / world, hi = spec.global_batch * (rank + 1) / world;
  for (int step = 0; step < spec.steps; ++step) {
    model.zero_grad();
    autograd::GradReadyHook hook = plain ? plain->begin_step() : zero ? zero->begin_step() : autograd::GradReadyHook{};
    double loss = 0;
    if (hi > lo) {
      Tensor x;
      std::vector<int32_t> y;
      batch_slice(spec, step, lo, hi, x, y);
      autograd::Variable out = autograd::cross_entropy(model.forward(autograd::Variable(x)), y,
                                                       static_cast<float>(spec.global_batch));
      loss = out.value().item();
      if (plain) plain->set_step_loss(loss);
      if (zero) zero->set_step_loss(loss);
      model.backward(out, hook);
    } else {
      model.flat_grads().zero();
      if (plain) plain->set_step_loss(0);
      if (zero) zero->set_step_loss(0);
    }
    if (plain) plain->finish_step();
    if (zero) zero->finish_step();
    if ((plain && !plain->step_finite()) || (zero && !zero->step_finite()))
      throw std::runtime_error("step " + std::to_string(step) + " was not finite");
    float* grads = model.flat_grads().data();
    if (spec.clip > 0)
      result.norms.push_back(zero ? zero->clip_grad_norm(spec.clip)
                                  : optim::clip_grad_norm(grads, model.num_parameters(), spec.clip));
    optimizer->step(model.flat_params().data(), grads, learning_rate(spec.optim));
    if (zero) zero->gather_params();
  }
  result.params = model.flat_params().to_vector();
  return result;
}

}  // namespace gradmesh::parallel::testing
