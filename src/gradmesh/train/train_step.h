// One optimizer step on this rank: micro-batches forward and backward, the
// gradient exchange across ranks (GradientSync: one implementation per
// data-parallel strategy), clipping and the update, with the time of each
// phase accounted and optionally traced. Every strategy follows the same step
// protocol, so the step below is one code path.
#pragma once

#include "gradmesh/data/batch_loader.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/obs/chrome_trace.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/parallel/pipeline_schedule.h"
#include "gradmesh/parallel/step_phases.h"
#include "gradmesh/parallel/whole_model_view.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/gradient_sync.h"

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
  // `sync`: how the ranks exchange gradients (make_gradient_sync; its
  // param_groups() are what `optimizer` steps over). All references outlive the runner.
  // `whole` (tensor parallelism): the split model's view, whose gradient norm spans the group.
  // `pipeline`: this rank is a pipeline stage (its micro-batches follow the schedule).
  StepRunner(nn::Model& model, optim::Optimizer& optimizer, const Config& config, GradientSync& sync,
             const parallel::WholeModelView* whole = nullptr, const PipelineSetup* pipeline = nullptr)
      : model_(model), optimizer_(optimizer), config_(config), sync_(sync), whole_(whole), pipeline_(pipeline) {}

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
  // Under local SGD (sync.averages_locally()) each rank's loss is the mean
  // over its own samples, the gradient its optimizer steps on alone; run()
  // still returns and records this rank's share of the batch loss.
  double run(const data::Batch& batch, float lr, int64_t step, parallel::PhaseTimes& times,
             obs::ChromeTrace* trace);

 private:
  // The pipeline's forward and backward passes; returns this stage's loss (0 but on the last).
  double run_pipeline(const data::Batch& batch, parallel::PhaseTimes& times, obs::ChromeTrace* trace);
  void stop_unless_finite(int64_t step, double loss);
  // Clipping (optim.clip_grad_norm), the update and what the strategy does
  // after it (ZeRO's parameter all-gather, counted as communication).
  void update(float lr, parallel::PhaseTimes& times, obs::ChromeTrace* trace);

  nn::Model& model_;
  optim::Optimizer& optimizer_;
  const Config& config_;
  GradientSync& sync_;
  const parallel::WholeModelView* whole_;
  const PipelineSetup* pipeline_;
};

}  // namespace gradmesh::train
