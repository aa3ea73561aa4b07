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
#include "gradmesh/obs/jsonl_writer.h"
#include "gradmesh/obs/progress.h"
#include "gradmesh/obs/run_log.h"
#include "gradmesh/obs/run_report_page.h"
#include "gradmesh/optim/schedule.h"
#include "gradmesh/parallel/local_sgd.h"
#include "gradmesh/parallel/split_balancer.h"
#include "gradmesh/parallel/mesh.h"
#include "gradmesh/parallel/zero_param_shards.h"
#include "gradmesh/train/communication_state.h"
#include "gradmesh/train/split_checkpoint.h"
#include "gradmesh/train/optimizer_setup.h"
#include "gradmesh/train/run_checkpointer.h"
#include "gradmesh/train/run_dir.h"
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
  void write_step_line(const std::vector<PhaseTimes>& ranks, float lr, int64_t epoch, double rate, double now);
  void evaluate_epoch(int64_t epoch);
  // `usage`: every rank's, from the last meter_usage().
  void summarize(const std::vector<RankUsage>& usage);
  void write_summary_line();
  void write_report();
  // Rank 0: opens metrics.jsonl (`append`: after what earlier processes of the run wrote) and its meter.
  void open_metrics(bool append);
  // Collective: every rank's usage; rank 0 writes the usage line.
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
  // Checkpoints every rank takes part in (ZeRO shards, tensor-parallel pieces): time-based saves are voted on.
  // PowerSGD's per-rank errors are gathered into each checkpoint, and local
  // SGD synchronises the ranks before one: every rank takes part in those too.
  bool collective_checkpoints() const {
    return zero_ != nullptr || prepared_.whole != nullptr || communication_state();
  }
  bool communication_state() const { return local_sgd_ != nullptr || powersgd() != nullptr; }
  parallel::PowerSgdCompressor* powersgd() const { return reducer_ ? reducer_->powersgd() : nullptr; }
  // parallel.local_steps: after `s_.step` steps, average the parameters when a
  // period ends, an epoch or the run ends, or a checkpoint (`for_checkpoint`,
  // which also averages the inner optimizer state) follows.
  void synchronize_local_steps(bool for_checkpoint);
  struct {
    bool writes = false;  // this rank writes pieces of a split model's checkpoints
    SplitSave save;
  } splits_;
  bool leader_;
  PreparedRank prepared_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<parallel::GradientReducer> reducer_;  // several ranks, parallel.zero = 0
  std::unique_ptr<parallel::ZeroReducer> zero_;          // several ranks, parallel.zero >= 1
  std::unique_ptr<parallel::ZeroParamShards> param_shards_;  // parallel.zero = 3: the model's unit hooks
  std::unique_ptr<parallel::LocalSgd> local_sgd_;  // several ranks, parallel.local_steps > 1 (no reducer then)
  void gather_full_parameters();   // stage 3, collective: every rank holds the whole parameters
  void release_full_parameters();
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
  std::unique_ptr<obs::JsonlWriter> metrics_;  // rank 0 only
  std::unique_ptr<UsageMeter> usage_meter_;    // rank 0 only
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
