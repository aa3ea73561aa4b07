#include "gradmesh/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "gradmesh/core/error.h"

namespace gradmesh::optim {

namespace {

[[noreturn]] void reject(const std::string& key, const std::string& what) {
  throw_error(ErrorKind::kConfig, "schedule." + key, what);
}

}  // namespace

void validate_schedule(const ScheduleOptions& o, float base_lr) {
  if (!std::isfinite(base_lr) || base_lr < 0)
    throw_error(ErrorKind::kConfig, "optim.lr", "must be finite and >= 0, got " + std::to_string(base_lr));
  if (o.kind != "constant" && o.kind != "step" && o.kind != "cosine")
    reject("kind", "expected one of constant, step, cosine; got \"" + o.kind + "\"");
  if (o.warmup_steps < 0)
    reject("warmup_steps", "must be >= 0, got " + std::to_string(o.warmup_steps) + "; 0 disables warmup");
  if (o.kind == "step") {
    if (o.step_size <= 0)
      reject("step_size", "the step schedule needs step_size > 0 (steps between decays), got " +
                              std::to_string(o.step_size));
    if (!std::isfinite(o.gamma) || o.gamma <= 0)
      reject("gamma", "must be finite and > 0 (the decay factor, e.g. 0.1), got " + std::to_string(o.gamma));
  }
  if (o.kind == "cosine") {
    // The run's step count is derived (train.epochs x steps per epoch), not a key.
    if (o.total_steps <= o.warmup_steps)
      reject("warmup_steps", "the cosine schedule decays over the run's " + std::to_string(o.total_steps) +
                                 " steps (train.epochs x steps per epoch), which must be more than its " +
                                 std::to_string(o.warmup_steps) +
                                 " warmup steps; lower schedule.warmup_steps or raise train.epochs");
    if (!std::isfinite(o.min_lr) || o.min_lr < 0 || o.min_lr > base_lr)
      reject("min_lr", "must be in [0, base lr " + std::to_string(base_lr) + "], got " + std::to_string(o.min_lr));
  }
}

float lr_at(const ScheduleOptions& o, float base_lr, int64_t step) {
  validate_schedule(o, base_lr);
  if (step < 0) throw_error(ErrorKind::kInternal, "lr_at", "negative step " + std::to_string(step));
  const double base = base_lr;
  if (step < o.warmup_steps)
    return static_cast<float>(base * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps));
  const int64_t since = step - o.warmup_steps;
  if (o.kind == "step") {
    const auto decays = static_cast<double>(since / o.step_size);
    return static_cast<float>(base * std::pow(static_cast<double>(o.gamma), decays));
  }
  if (o.kind == "cosine") {
    const double span = static_cast<double>(o.total_steps - o.warmup_steps);
    const double progress = std::clamp(static_cast<double>(since) / span, 0.0, 1.0);
    const double min_lr = o.min_lr;
    return static_cast<float>(min_lr + (base - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
  }
  return base_lr;
}

}  // namespace gradmesh::optim
