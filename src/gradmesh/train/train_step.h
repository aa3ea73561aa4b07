// One optimizer step on this rank: micro-batches forward and backward, the
// gradient reduction across ranks (when there are several), clipping and the
// update, with the time of each phase accounted and optionally traced.
#pragma once

#include "gradmesh/data/batch_loader.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/obs/chrome_trace.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/parallel/gradient_reducer.h"
#include "gradmesh/parallel/step_phases.h"
#include "gradmesh/train/config.h"

namespace gradmesh::train {

class StepRunner {
 public:
  // `reducer` is null on a single process. All references outlive the runner.
  StepRunner(nn::Model& model, optim::Optimizer& optimizer, const Config& config, parallel::GradientReducer* reducer)
      : model_(model), optimizer_(optimizer), config_(config), reducer_(reducer) {}

  // Trains on this rank's slice of a global batch at learning rate `lr`.
  // Every loss is divided by the global batch length, so summing gradients
  // (and losses) over ranks and micro-batches gives exact batch means. Adds
  // the phase times to `times` and spans to `trace` (may be null). Returns
  // this rank's share of the batch loss (the sum over ranks is the batch loss).
  //
  // A loss that is not finite on any rank stops the step before the
  // optimizer touches the weights: every rank throws the same Error
  // (kInternal) "step <step>: the loss is not finite on rank R (nan); ..."
  // (without "on rank R" on a single process). `step` only names the step.
  double run(const data::Batch& batch, float lr, int64_t step, parallel::PhaseTimes& times,
             obs::ChromeTrace* trace);

 private:
  void stop_unless_finite(int64_t step, double loss);

  nn::Model& model_;
  optim::Optimizer& optimizer_;
  const Config& config_;
  parallel::GradientReducer* reducer_;
};

}  // namespace gradmesh::train
