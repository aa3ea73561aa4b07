// Optimizers over one flat parameter buffer.
//
// All parameters of a model live in ONE flat float32 buffer and their
// gradients in a second flat buffer with the same layout; each parameter is a
// contiguous range of it. An optimizer owns a list of ParamGroups, i.e.
// ranges of that buffer with their own weight decay, and keeps its state
// (momentum, Adam moments) in flat buffers whose length is the sum of the
// group counts. Sharding the optimizer state across ranks (ZeRO) is then just
// giving each rank's optimizer a different range.
//
// Update rules follow PyTorch's torch.optim.SGD and torch.optim.AdamW
// (single-tensor, non-foreach implementation), including the order of the
// floating-point operations, so a run can be compared with a PyTorch run
// step by step. Scalar factors (bias corrections, step sizes) are computed in
// double and rounded to float once, as PyTorch does with Python floats.
//
// Thread-safety: an optimizer is not thread-safe; step() itself may split
// large ranges across gradmesh::compute_pool(). Results are bit-identical for
// any pool size because every update is elementwise.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradmesh/core/tensor.h"

namespace gradmesh::optim {

// A contiguous range [offset, offset + count) of the flat parameter buffer
// with its own hyperparameters. Groups of one optimizer must not overlap.
struct ParamGroup {
  int64_t offset = 0;
  int64_t count = 0;
  float weight_decay = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every group's range of `params` from `grads` at learning
  // rate `lr` (the schedule's value for this step). `params` and `grads` point
  // at the start of the flat buffers, not at the first group.
  // REQUIRES: both buffers hold at least span_end() floats; grads hold the
  // final (averaged, clipped) gradients; lr is finite and >= 0 (else
  // Error(kConfig)).
  virtual void step(float* params, const float* grads, float lr) = 0;

  // "sgd" or "adamw".
  virtual std::string name() const = 0;

  // Named state tensors for checkpoints: views of the internal buffers, so
  // writing into them (when restoring a checkpoint) restores the optimizer.
  // Always includes "step" (shape [1], float32 like PyTorch's step tensor);
  // per-element buffers have shape [state_numel()] with the groups laid out
  // back to back in the order they were given.
  virtual std::vector<std::pair<std::string, Tensor>> state() = 0;

  // Completed step() calls (read from the "step" state tensor). step()
  // throws Error(kInternal) rather than lose count past 2^24 steps.
  int64_t steps_taken() const;

  const std::vector<ParamGroup>& groups() const { return groups_; }
  // One past the last element any group touches.
  int64_t span_end() const { return span_end_; }
  // Sum of the group counts: the length of each per-element state buffer.
  int64_t state_numel() const { return state_numel_; }

 protected:
  // Validates the groups (non-negative offsets and counts, weight decay >= 0,
  // no overlap) and throws Error(kConfig) naming the group otherwise.
  explicit Optimizer(std::vector<ParamGroup> groups);

  // Checks lr (Error(kConfig) when negative or non-finite) and the step
  // counter, and returns the number of the step about to run (1 for the first).
  int64_t begin_step(float lr) const;
  // Records that the step begun by begin_step() completed; called after the
  // update so a throwing step leaves the count unchanged.
  void finish_step();
  // Where group `index` starts inside the per-element state buffers.
  int64_t state_offset(size_t index) const { return state_offsets_[index]; }
  const Tensor& step_tensor() const { return step_; }

  // Runs fn(lo, hi) over [0, count) split into chunks of at least kGrain
  // elements across the compute pool; small ranges run inline on the caller.
  static void for_chunks(int64_t count, const std::function<void(int64_t lo, int64_t hi)>& fn);
  static constexpr int64_t kGrain = 64 * 1024;

 private:
  std::vector<ParamGroup> groups_;
  std::vector<int64_t> state_offsets_;
  int64_t span_end_ = 0;
  int64_t state_numel_ = 0;
  Tensor step_;  // [1] float32: exact up to 2^24 steps, like PyTorch's
};

struct SgdOptions {
  float momentum = 0;   // >= 0
  float dampening = 0;  // applied from the second step on, as in PyTorch
  bool nesterov = false;  // REQUIRES: momentum > 0 and dampening == 0
};

struct AdamWOptions {
  float beta1 = 0.9f;    // in [0, 1)
  float beta2 = 0.999f;  // in [0, 1)
  float eps = 1e-8f;     // >= 0
};

// torch.optim.SGD: g = grad + wd*p; with momentum, buf = g on the first step
// and buf = momentum*buf + (1-dampening)*g afterwards; g = g + momentum*buf
// (nesterov) or g = buf; p -= lr*g. State: "step" and, when momentum != 0,
// "momentum". Throws Error(kConfig) naming the option for invalid options.
std::unique_ptr<Optimizer> make_sgd(std::vector<ParamGroup> groups, SgdOptions options);

// torch.optim.AdamW: p *= 1 - lr*wd; m = lerp(m, g, 1-beta1);
// v = beta2*v + (1-beta2)*g*g; p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)
// with bc_i = 1 - beta_i^t. State: "step", "exp_avg", "exp_avg_sq".
// Throws Error(kConfig) naming the option for invalid options.
std::unique_ptr<Optimizer> make_adamw(std::vector<ParamGroup> groups, AdamWOptions options);

}  // namespace gradmesh::optim
