// DataParallel: data parallelism's step protocol in one object, for a
// program that writes its own training loop (docs/library.md,
// examples/custom_model). Every rank holds a whole replica; each step, each
// rank runs forward on its slice of the global batch, and backward() sums the
// gradients over the ranks bucket by bucket while backward still runs
// (GradientReducer), so every replica applies the same update:
//
//   gm::parallel::DataParallel dp(model, *optimizer, group);  // group null: one process
//   for (...) {
//     Variable loss = gm::autograd::cross_entropy(model.forward(x), labels);  // mean over this rank's rows
//     dp.backward(loss, rows, global_rows);
//     dp.step(lr);
//   }
//
// What it owns, so the program does not: starting every replica from rank
// 0's weights, weighting each rank's mean loss by its share of the global
// batch (uneven slices stay exact), the reducer's calls in their order,
// stopping every rank with one message when a loss is not finite, optional
// clipping by the global gradient norm, and zeroing the gradients for the
// next step. `gradmesh train` drives the same reducer (train/gradient_sync.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gradmesh/autograd/variable.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/parallel/gradient_reducer.h"

namespace gradmesh::parallel {

class DataParallel {
 public:
  // `group` null or of one rank: one process, the same calls without
  // communication. Collective: broadcasts rank 0's parameters, so build it on
  // every rank at the same point. `model` and `optimizer` outlive it.
  DataParallel(nn::Model& model, optim::Optimizer& optimizer, std::shared_ptr<comm::ProcessGroup> group,
               ReducerOptions options = {});

  // Backpropagates this rank's `loss`, its mean over `rows` samples of a
  // global batch of `global_rows`, and sums the gradients over the ranks:
  // afterwards every rank holds the global batch's mean gradient. Returns
  // this rank's share of the global mean loss (the ranks' shares sum to it).
  // A loss that is not finite on any rank stops every rank with the same
  // Error (kInternal) naming the rank(s), before any weight changes.
  double backward(const autograd::Variable& loss, int64_t rows, int64_t global_rows);

  // The optimizer's update at `lr` (after clipping the gradient's norm to
  // `max_grad_norm` when it is > 0), then zeroed gradients for the next step.
  void step(float lr, float max_grad_norm = 0);

  // Collective: the element-wise sum of `values` over the ranks, in float32 (log lines).
  std::vector<double> sum_over_ranks(std::vector<double> values);

  int rank() const { return group_ ? group_->rank() : 0; }
  int world_size() const { return group_ ? group_->size() : 1; }
  int64_t steps() const { return steps_; }

 private:
  nn::Model& model_;
  optim::Optimizer& optimizer_;
  std::shared_ptr<comm::ProcessGroup> group_;  // null on one process
  std::unique_ptr<GradientReducer> reducer_;   // null on one process
  int64_t steps_ = 0;
};

}  // namespace gradmesh::parallel
