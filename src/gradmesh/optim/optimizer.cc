#include "gradmesh/optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "gradmesh/core/error.h"
#include "gradmesh/core/thread_pool.h"

namespace gradmesh::optim {

namespace {

// Steps are counted in a float32 tensor (as PyTorch does); above 2^24 an
// increment would be lost and the bias corrections would stall.
constexpr int64_t kMaxExactStep = int64_t{1} << 24;

std::string group_where(size_t index, const ParamGroup& group) {
  return "optimizer param group " + std::to_string(index) + " {offset " + std::to_string(group.offset) +
         ", count " + std::to_string(group.count) + "}";
}

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  for (size_t i = 0; i < groups_.size(); ++i) {
    const ParamGroup& g = groups_[i];
    if (g.offset < 0 || g.count < 0)
      throw_error(ErrorKind::kConfig, group_where(i, g),
                  "offset and count must be >= 0; build groups from the parameter layout");
    if (!std::isfinite(g.weight_decay) || g.weight_decay < 0)
      throw_error(ErrorKind::kConfig, group_where(i, g) + " (optim.weight_decay)",
                  "weight_decay must be finite and >= 0, got " + std::to_string(g.weight_decay));
    state_offsets_.push_back(state_numel_);
    state_numel_ += g.count;
    span_end_ = std::max(span_end_, g.offset + g.count);
  }
  // Overlapping groups would update the shared elements twice per step.
  // Empty groups own no elements and are skipped.
  std::vector<size_t> order;
  for (size_t i = 0; i < groups_.size(); ++i)
    if (groups_[i].count > 0) order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return groups_[a].offset < groups_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const ParamGroup& prev = groups_[order[k - 1]];
    const ParamGroup& next = groups_[order[k]];
    if (prev.offset + prev.count > next.offset)
      throw_error(ErrorKind::kConfig, group_where(order[k], next),
                  "overlaps " + group_where(order[k - 1], prev) +
                      "; each element of the parameter buffer may belong to one group only");
  }
  step_ = Tensor::zeros({1});
}

int64_t Optimizer::steps_taken() const { return static_cast<int64_t>(step_.data()[0]); }

int64_t Optimizer::begin_step(float lr) const {
  if (!std::isfinite(lr) || lr < 0)
    throw_error(ErrorKind::kConfig, "optim.lr",
                "learning rate must be finite and >= 0, got " + std::to_string(lr) +
                    "; check optim.lr and the schedule settings");
  const int64_t taken = steps_taken();
  if (taken >= kMaxExactStep)
    throw_error(ErrorKind::kInternal, name() + " optimizer",
                "step counter reached 2^24, which the float32 step tensor cannot count past");
  return taken + 1;
}

void Optimizer::finish_step() { step_.data()[0] += 1.0f; }

void Optimizer::for_chunks(int64_t count, const std::function<void(int64_t, int64_t)>& fn) {
  if (count <= 0) return;
  if (count < 2 * kGrain) {
    fn(0, count);  // not worth waking the pool
    return;
  }
  compute_pool().parallel_for(0, count, kGrain, [&](int, int64_t lo, int64_t hi) { fn(lo, hi); });
}

}  // namespace gradmesh::optim
