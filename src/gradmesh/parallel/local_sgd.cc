#include "gradmesh/parallel/local_sgd.h"

#include <cstring>

#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/parallel/step_collectives.h"

namespace gradmesh::parallel {

LocalSgd::LocalSgd(nn::Model& model, std::shared_ptr<comm::ProcessGroup> group, LocalSgdOptions options)
    : model_(model), group_(std::move(group)), options_(options) {
  if (options_.local_steps < 1)
    throw_error(ErrorKind::kConfig, "parallel.local_steps",
                "expected at least 1, got " + std::to_string(options_.local_steps));
  if (!(options_.outer_lr > 0))
    throw_error(ErrorKind::kConfig, "parallel.outer_lr", "expected a number > 0, got " + std::to_string(options_.outer_lr));
  if (!(options_.outer_momentum >= 0 && options_.outer_momentum < 1))
    throw_error(ErrorKind::kConfig, "parallel.outer_momentum",
                "expected a number in [0, 1), got " + std::to_string(options_.outer_momentum));
  const int64_t n = model_.num_parameters();
  outer_ = Tensor::empty({n});
  if (options_.outer_momentum > 0) velocity_ = Tensor::zeros({n});
  reset_outer();
}

double LocalSgd::synchronize(optim::Optimizer* average) {
  const double start = now_seconds();
  const int64_t n = model_.num_parameters();
  std::vector<Tensor> inner;  // per-element state buffers to average ("step" is the same everywhere)
  int64_t total = n;
  if (average != nullptr)
    for (auto& [name, t] : average->state())
      if (name != "step") {
        inner.push_back(t);
        total += t.numel();
      }
  if (wire_.numel() != total) wire_ = Tensor::empty({total});
  float* w = wire_.data();
  const float* params = model_.flat_params().data();
  const float* outer = outer_.data();
  for (int64_t i = 0; i < n; ++i) w[i] = outer[i] - params[i];
  int64_t at = n;
  for (const Tensor& t : inner) {
    std::memcpy(w + at, t.data(), static_cast<size_t>(t.numel()) * sizeof(float));
    at += t.numel();
  }
  comm::AllreduceOptions o;
  o.op = comm::ReduceOp::kSum;
  o.timeout = options_.timeout;
  wait_for_collective(*group_->allreduce(wire_, o), options_.timeout,
                      "the local-SGD synchronisation was not reduced within the timeout");
  last_bytes_ = static_cast<int64_t>(wire_.nbytes());
  const float inverse_world = 1.0f / static_cast<float>(group_->size());
  float* out = outer_.data();
  const float lr = options_.outer_lr, mu = options_.outer_momentum;
  float* v = velocity_.numel() > 0 ? velocity_.data() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    float delta = w[i] * inverse_world;
    if (v != nullptr) {
      v[i] = mu * v[i] + delta;
      delta += mu * v[i];
    }
    out[i] -= lr * delta;
  }
  std::memcpy(model_.flat_params().data(), out, static_cast<size_t>(n) * sizeof(float));
  at = n;
  for (Tensor& t : inner) {
    float* dst = t.data();
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = w[at + i] * inverse_world;
    at += t.numel();
  }
  return now_seconds() - start;
}

std::vector<std::pair<std::string, Tensor>> LocalSgd::state() const {
  if (velocity_.numel() == 0) return {};
  return {{"outer_momentum", velocity_}};
}

void LocalSgd::reset_outer() {
  std::memcpy(outer_.data(), model_.flat_params().data(), static_cast<size_t>(outer_.numel()) * sizeof(float));
  if (velocity_.numel() > 0) velocity_.zero();
}

void LocalSgd::load_state(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::memcpy(outer_.data(), model_.flat_params().data(), static_cast<size_t>(outer_.numel()) * sizeof(float));
  if (velocity_.numel() == 0) return;
  for (const auto& [name, t] : named)
    if (name == "outer_momentum") {
      if (t.dtype() != DType::kF32 || t.numel() != velocity_.numel())
        throw_error(ErrorKind::kFormat, name,
                    "expected float32 " + shape_str(velocity_.shape()) + ", got " + shape_str(t.shape()));
      std::memcpy(velocity_.data(), t.data(), static_cast<size_t>(t.numel()) * sizeof(float));
      return;
    }
  throw_error(ErrorKind::kFormat, "outer_momentum", "missing from the local-SGD state");
}

}  // namespace gradmesh::parallel
