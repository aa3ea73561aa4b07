// The training run of run_training() (trainer.h), for the files that define
// it: trainer.cc (setup, the step loop, checkpoints, recovery) and
// training_run_report.cc (progress, log intervals, rebalancing, evaluation,
// the summary and the report). Not for other includes: it pulls in most of
// the training stack.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <optional>
#include <utility>

#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/config.h"
#include "gradmesh/core/atomic_file.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/data/batch_loader.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/obs/chrome_trace.h"
#include "gradmesh/obs/progress.h"
#include "gradmesh/obs/run_log.h"
#include "gradmesh/optim/schedule.h"
#include "gradmesh/parallel/split_balancer.h"
#include "gradmesh/parallel/mesh.h"
#include "gradmesh/train/gradient_sync.h"
#include "gradmesh/train/split_checkpoint.h"
#include "gradmesh/train/optimizer_setup.h"
#include "gradmesh/train/run_checkpointer.h"
#include "gradmesh/train/run_dir.h"
#include "gradmesh/train/run_observer.h"
#include "gradmesh/train/phase_totals.h"
#include "gradmesh/train/run_resilience.h"
#include "gradmesh/train/stop_request.h"
#include "gradmesh/train/training_state.h"
#include "gradmesh/train/usage_meter.h"
#include "gradmesh/train/train_step.h"
#include "gradmesh/core/private_files.h"

#include "gradmesh/train/trainer.h"

namespace gradmesh::train::detail {

using parallel::Phase;
using parallel::PhaseTimes;

// What a rank knows about the step loop so far; rank 0 turns it into metrics,
// progress and the report.
struct LoopState {
  int64_t step = 0, samples = 0;
  int64_t epoch = 0, step_in_epoch = 0;  // where the next step comes from (epoch, batches of it done)
  double start = 0, excluded = 0;  // evaluation time is kept out of the throughput
  PhaseTimes window;               // this rank's times since the last log line
  PhaseTimes balance_window;       // since the last rebalance (parallel.straggler = "rebalance")
  int64_t window_samples = 0;
  double window_start = 0;
  double last_loss = 0;            // global mean loss of the last log interval
};

// One training run on this rank, in the order it happens: setup (constructor:
// data, model, optimizer, reducer, step plan; nothing written yet), then
// run(): outputs opened, epochs of steps with an evaluation after each, the
// summary, and rank 0's final files.
class TrainingRun {
 public:
  TrainingRun(const Config& config, std::FILE* progress_stream, std::shared_ptr<comm::ProcessGroup> group,
              RunOptions options);
  TrainSummary run();

 private:
  nn::Model& model() { return *prepared_.model; }
  void build_step_machinery();
  void open_outputs();
  void start_from(const checkpoint::TrainerState& state, const std::string& how,
                  const std::vector<std::string>& skipped = {});
  checkpoint::TrainerState current_state() const;
  // How long rank 0 waits for the other ranks' checkpoint shards: the collective timeout, or 10 minutes.
  double parts_timeout_s() const { return config_.parallel.timeout_s > 0 ? config_.parallel.timeout_s : 600; }
  void announce();
  void run_epochs();
  void recover(const std::string& failure);
  void run_epoch(int64_t epoch);
  void save_checkpoint(bool sync);
  void stop_here();
  void train_step(const data::Batch& batch, int64_t epoch, double data_start, double data_end);
  void show_progress(int64_t epoch, int64_t step_in_epoch);
  void log_interval(float lr, int64_t epoch);
  void rebalance();
  void evaluate_epoch(int64_t epoch);
  // `usage`: every rank's, from the last meter_usage().
  void summarize(const std::vector<RankUsage>& usage);
  // Rank 0: records the run from here on (metrics.jsonl; `append`: after what earlier processes of the run wrote).
  void open_metrics(bool append);
  // Collective: every rank's usage, reported to the observer.
  std::vector<RankUsage> meter_usage();

  const Config& config_;
  const TrainConfig& tc_;
  const RunOptions options_;
  std::shared_ptr<comm::ProcessGroup> group_;
  comm::ProcessGroup* world_;  // null on a single process
  int rank_, world_size_;
  // Data parallelism's group (the world, or the mesh's dp group): the loader's
  // split, the gradient reduction, evaluation. Null on a single process.
  std::shared_ptr<comm::ProcessGroup> dp_group_;
  comm::ProcessGroup* dp_ = nullptr;
  int dp_rank_ = 0, dp_size_ = 1;
  void adopt_dp_group(std::shared_ptr<comm::ProcessGroup> dp);
  PipelineSetup pipeline_;  // pp > 1: this rank's stage (pipeline_.forward null otherwise)
  std::vector<double> bubble_busy_;  // per rank: forward + backward seconds over the logged intervals
  double bubble_window_ = 0;         // the longest stage's pipeline seconds, summed over the intervals
  void set_up_pipeline();
  // Checkpoints every rank takes part in (ZeRO shards, tensor-parallel
  // pieces, the strategy's own state such as PowerSGD's errors, or local SGD
  // synchronising the ranks before one): time-based saves are voted on.
  bool collective_checkpoints() const {
    return sync_->shards_optimizer() || prepared_.whole != nullptr || sync_->has_state();
  }
  struct {
    bool writes = false;  // this rank writes pieces of a split model's checkpoints
    SplitSave save;
  } splits_;
  bool leader_;
  PreparedRank prepared_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<GradientSync> sync_;  // the data-parallel strategy (gradient_sync.h)
  std::unique_ptr<data::BatchLoader> loader_;
  optim::ScheduleOptions schedule_;
  float base_lr_ = 0;
  std::unique_ptr<StepRunner> runner_;
  std::unique_ptr<StopVote> stop_vote_;
  std::unique_ptr<RunCheckpointer> checkpointer_;
  RunResilience resilience_;
  bool stopping_ = false;

  TrainSummary summary_;
  checkpoint::TrainerState before_;  // the run before this process: samples and checkpoints (trainer_state.h)
  std::unique_ptr<RunObserver> observer_ = std::make_unique<RunObserver>();  // rank 0: metrics.jsonl, cost, report
  PhaseTotals phase_totals_;
  obs::Progress progress_;
  parallel::SlowRankDetector detector_;
  std::unique_ptr<parallel::SplitBalancer> balancer_;  // parallel.straggler = "rebalance" with several ranks
  LoopState s_;
  std::unique_ptr<obs::ChromeTrace> trace_;
  uint64_t flops_start_ = 0, flops_excluded_ = 0;
  int64_t epochs_run_ = 0;
};

}  // namespace gradmesh::train::detail
