// One optimizer step on this rank: micro-batches forward and backward, the
// gradient reduction across ranks (when there are several), clipping and the
// update, with the time of each phase accounted and optionally traced.
//
// With several ranks the reduction is plain data parallelism
// (GradientReducer: every rank gets the whole summed gradient and updates
// every parameter) or ZeRO stage 1/2 (ZeroReducer: every rank gets its
// shard of the sum, clips with the global norm, updates its shard with an
// optimizer built over zero.param_groups(), and the shards are all-gathered
// so every rank holds the full parameters again). Both follow the same step
// protocol, so the step below is one code path.
#pragma once

#include "gradmesh/data/batch_loader.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/obs/chrome_trace.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/parallel/gradient_reducer.h"
#include "gradmesh/parallel/pipeline_schedule.h"
#include "gradmesh/parallel/step_phases.h"
#include "gradmesh/parallel/whole_model_view.h"
#include "gradmesh/parallel/zero_reducer.h"
#include "gradmesh/train/config.h"

namespace gradmesh::train {

// Pipeline parallelism (parallel.mesh pp > 1): this rank is one stage.
struct PipelineSetup {
  comm::ProcessGroup* forward = nullptr;   // the pp group (rank = stage): activations to the next stage
  comm::ProcessGroup* backward = nullptr;  // the same ranks on their own thread: gradients to the previous stage
  comm::ProcessGroup* tied = nullptr;      // the first and last stage when the head is tied, else null
  parallel::PipelineSchedule schedule = parallel::PipelineSchedule::k1F1B;
  int micro_batches = 1;
  int64_t width = 0;                       // n_embd: activations are [rows, T, width]
  int64_t tied_offset = -1, tied_numel = 0;  // the token table in this stage's flat buffers (tied only)
};

class StepRunner {
 public:
  // `reducer` and `zero` are null on a single process; with several ranks
  // exactly one is set (`zero`: `optimizer` holds only this rank's shard).
  // All references outlive the runner.
  // `whole` (tensor parallelism): the split model's view, whose gradient norm spans the group.
  // `pipeline`: this rank is a pipeline stage (its micro-batches follow the schedule).
  StepRunner(nn::Model& model, optim::Optimizer& optimizer, const Config& config, parallel::GradientReducer* reducer,
             parallel::ZeroReducer* zero = nullptr, const parallel::WholeModelView* whole = nullptr,
             const PipelineSetup* pipeline = nullptr)
      : model_(model), optimizer_(optimizer), config_(config), reducer_(reducer), zero_(zero), whole_(whole),
        pipeline_(pipeline) {}

  // Trains on this rank's slice of a global batch at learning rate `lr`.
  // Every loss is divided by the global batch length, so summing gradients
  // (and losses) over ranks and micro-batches gives exact batch means. Adds
  // the phase times to `times` and spans to `trace` (may be null). Returns
  // this rank's share of the batch loss (the sum over ranks is the batch loss;
  // a pipeline stage before step train.log_every: the step's whole loss, shared by the stages).
  //
  // A loss that is not finite on any rank stops the step before the
  // optimizer touches the weights: every rank throws the same Error
  // (kInternal) "step <step>: the loss is not finite on rank R (nan); ..."
  // (without "on rank R" on a single process). `step` only names the step.
  double run(const data::Batch& batch, float lr, int64_t step, parallel::PhaseTimes& times,
             obs::ChromeTrace* trace);

  // Local SGD (parallel.local_steps > 1): the ranks do not sum their
  // gradients, so each one's loss is the mean over its own samples (the
  // gradient its optimizer steps on alone); run() still returns and records
  // this rank's share of the batch loss, so the logs add up as before.
  void use_local_mean() { local_mean_ = true; }

 private:
  // The pipeline's forward and backward passes; returns this stage's loss (0 but on the last).
  double run_pipeline(const data::Batch& batch, parallel::PhaseTimes& times, obs::ChromeTrace* trace);
  void stop_unless_finite(int64_t step, double loss);
  bool reduces() const { return reducer_ || zero_; }
  autograd::GradReadyHook begin_reduction(int64_t step);
  void set_step_loss(double loss);
  // Waits for the reduction; adds its time and (with `trace`) its spans.
  void finish_reduction(parallel::PhaseTimes& times, obs::ChromeTrace* trace);
  // Clipping (optim.clip_grad_norm), the update and, under ZeRO, the
  // parameter all-gather (counted as communication).
  void update(float lr, parallel::PhaseTimes& times, obs::ChromeTrace* trace);

  nn::Model& model_;
  optim::Optimizer& optimizer_;
  const Config& config_;
  parallel::GradientReducer* reducer_;
  parallel::ZeroReducer* zero_;
  const parallel::WholeModelView* whole_;
  const PipelineSetup* pipeline_;
  bool local_mean_ = false;
};

}  // namespace gradmesh::train
