// How one step's gradients become the same update on every data-parallel
// rank: the one interface the step (train_step.h) and the training run
// (trainer.cc) drive, with one implementation per strategy, chosen once by
// make_gradient_sync() from the [parallel] section:
//
//   GradientSync     itself, on one rank: nothing to exchange
//   BucketSync       several ranks, parallel.zero = 0: DDP's gradient buckets
//                    all-reduced during backward (GradientReducer), with
//                    compression = "powersgd" its low-rank form and its
//                    error feedback in every checkpoint
//   ZeroSync         parallel.zero >= 1: buckets reduce-scattered, this
//                    rank's optimizer shard updated, the shards all-gathered
//                    (ZeroReducer); stage 3 also installs the model's unit
//                    hooks that gather each unit's parameters around its use
//   LocalSgdSync     parallel.local_steps > 1: no per-step exchange; the
//                    parameters are averaged when a period ends
//
// The step calls, in order: begin_step (the hook backward calls as each
// parameter's gradient becomes final), set_step_loss (before the backward
// that launches the first bucket), finish (waits for the exchange),
// step_finite, clip_grad_norm, the optimizer, after_update; the run calls
// after_step once the step is counted.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/snapshot.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/obs/chrome_trace.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/parallel/step_phases.h"
#include "gradmesh/parallel/whole_model_view.h"
#include "gradmesh/train/config.h"

namespace gradmesh::train {

// Where a step ends, for strategies that exchange at period ends (local SGD).
struct StepEnd {
  int64_t step = 0;           // steps done, this one included
  bool epoch_ends = false;    // the epoch's last step, or the run's
  bool checkpoint_follows = false;  // a save (or a stop that saves) comes right after this step
  bool traced = false;        // the step is within output.trace_steps
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  GradientSync() = default;
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // What the start-up line adds, e.g. ", ZeRO stage 2" ("" for plain data parallelism).
  virtual std::string describe() const { return ""; }

  // --- The optimizer and the parameters it owns ---
  // The groups this rank's optimizer steps over: the whole flat buffer, or under ZeRO this rank's shard.
  virtual std::vector<optim::ParamGroup> param_groups(const Config& config, const nn::Model& model) const;
  // ZeRO stage 3 with deferred initialisation: initialises only this rank's pieces.
  virtual void initialize_owned(nn::Model& model) const;
  virtual int zero_stage() const { return 0; }
  // Every rank's optimizer holds a shard: every rank writes a piece of each checkpoint.
  bool shards_optimizer() const { return zero_stage() > 0; }

  // --- One step ---
  virtual autograd::GradReadyHook begin_step(int64_t /*step*/) { return {}; }
  virtual void set_step_loss(double loss) { loss_ = loss; }
  // Waits for the exchange; adds its time to `times` and its spans to `trace` (may be null).
  virtual void finish(parallel::PhaseTimes& /*times*/, obs::ChromeTrace* /*trace*/) {}
  // After finish(): false when some rank's loss (or the summed gradient) is not finite; the same on every rank.
  virtual bool step_finite() const;
  // Every rank's step loss, in rank order (collective where there are several).
  virtual std::vector<float> gather_step_losses() { return {static_cast<float>(loss_)}; }
  // optim.clip_grad_norm over the gradient the optimizer steps on. `whole`: a split model's view (may be null).
  virtual void clip_grad_norm(float max_norm, nn::Model& model, const parallel::WholeModelView* whole);
  // After the optimizer: ZeRO all-gathers the updated shards.
  virtual void after_update(parallel::PhaseTimes& /*times*/, obs::ChromeTrace* /*trace*/) {}
  // True when a rank's loss is the mean over its own samples (its optimizer
  // steps alone), not its share of the global batch's mean.
  virtual bool averages_locally() const { return false; }
  // Once the step is counted: local SGD averages the ranks when its period ends.
  virtual void after_step(const StepEnd& /*end*/, optim::Optimizer& /*optimizer*/, parallel::PhaseTimes& /*times*/,
                          obs::ChromeTrace* /*trace*/) {}

  // --- Checkpoints ---
  // State beyond the weights and the optimizer that a checkpoint must hold
  // (PowerSGD's error feedback, local SGD's outer momentum): every rank
  // takes part in each save.
  virtual bool has_state() const { return false; }
  // Collective when has_state(): the file on rank 0, nothing elsewhere.
  virtual std::optional<checkpoint::TensorFile> gather_state() { return std::nullopt; }
  // Collective when has_state(): restores from `loaded`; "" or why the state starts fresh.
  virtual std::string restore_state(const std::optional<checkpoint::LoadedCheckpoint>& /*loaded*/) { return ""; }
  // A run that starts from scratch (local SGD takes the current parameters as its outer ones).
  virtual void start_fresh() {}

  // --- The whole parameters (ZeRO stage 3 keeps only pieces between uses) ---
  // From here on a rank holds only its pieces, gathered around each use.
  virtual void shard_parameters(const Config& /*config*/) {}
  // Collective: every rank holds the whole parameters until release_full_parameters().
  virtual void gather_full_parameters() {}
  virtual void release_full_parameters() {}

 protected:
  double loss_ = 0;
};

// The strategy `config`'s [parallel] section asks for over `dp` (the
// data-parallel group; null or a single rank: NoSync). Several ranks with
// parallel.zero >= 1 build the ZeRO shard layout, which decides which
// elements this rank's optimizer owns: construct the optimizer after this.
std::unique_ptr<GradientSync> make_gradient_sync(const Config& config, nn::Model& model,
                                                 const std::shared_ptr<comm::ProcessGroup>& dp);

}  // namespace gradmesh::train
