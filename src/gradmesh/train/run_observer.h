// What a training run reports as it goes: one interface the loop calls on
// every rank, in the order things happen. Rank 0's observer
// (make_metrics_observer) turns each call into a line of metrics.jsonl,
// meters the run's usage and cost, and at the end writes the summary line
// and report.html; the other ranks get RunObserver itself, which records
// nothing. The loop computes the figures (collectives included, on every
// rank); the observer only decides how they are written.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gradmesh/checkpoint/trainer_state.h"
#include "gradmesh/elastic/restart_record.h"
#include "gradmesh/obs/json_object.h"
#include "gradmesh/parallel/step_phases.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/trainer.h"
#include "gradmesh/train/usage_meter.h"

namespace gradmesh::train {

// The run line at the start: what the report and the dashboard title a run with.
struct RunStart {
  std::string run_id, model, backend;
  int64_t parameters = 0, batch_size = 0, epochs = 0, steps_per_epoch = 0;
  int world_size = 1, generation = 0;
  obs::JsonObject memory;  // the memory estimate's line (memory_budget.h)
};

// One log interval: the global loss and every rank's phase times.
struct IntervalRecord {
  int64_t step = 0, epoch = 0;
  double loss = 0, lr = 0, samples_per_s = 0, wall_time = 0;
  const std::vector<parallel::PhaseTimes>* ranks = nullptr;  // in rank order
};

// This process's checkpoint writes, for the summary line (none: saves = 0).
struct CheckpointFigures {
  int64_t saves = 0;
  int64_t bytes = 0;
  double write_seconds = 0, stall_seconds = 0;
};

class RunObserver {
 public:
  virtual ~RunObserver() = default;
  RunObserver() = default;
  RunObserver(const RunObserver&) = delete;
  RunObserver& operator=(const RunObserver&) = delete;

  // Whether anything is recorded (rank 0's observer).
  virtual bool records() const { return false; }
  virtual void started(const RunStart& /*run*/) {}
  virtual void resumed(const checkpoint::TrainerState& /*state*/, const std::string& /*from*/, int /*world_size*/,
                       int /*generation*/, const std::vector<std::string>& /*skipped_checkpoints*/) {}
  // A generation after a failure took its first step at `resumed_at_step`.
  virtual void restarted(const elastic::RestartRecord& /*record*/, bool /*in_process*/, int64_t /*resumed_at_step*/) {}
  virtual void interval(const IntervalRecord& /*record*/) {}
  virtual void slow_rank(int64_t /*step*/, int /*rank*/, const std::string& /*message*/,
                         const std::optional<std::string>& /*phase*/) {}
  virtual void rebalanced(int64_t /*step*/, const std::vector<double>& /*shares*/) {}
  // Every rank's usage since the start; `metering_ms`: what gathering it cost.
  virtual void usage(int64_t /*step*/, const std::vector<RankUsage>& /*ranks*/, double /*metering_ms*/) {}
  virtual void evaluated(int64_t /*epoch*/, int64_t /*step*/, double /*test_loss*/, double /*test_accuracy*/,
                         double /*wall_time*/) {}
  virtual void checkpoint_saved(int64_t /*step*/, bool /*sync*/, double /*stall_seconds*/) {}
  virtual void stopped(int64_t /*step*/) {}
  // The run's end: the summary line, then report.html in `summary.run_dir` when `report` is set.
  virtual void finished(const TrainSummary& /*summary*/, const CheckpointFigures& /*checkpoints*/, bool /*report*/) {}
};

// Rank 0's observer: metrics.jsonl at `path` (`append`: after the lines
// earlier processes of the run wrote, whose last usage line the meter
// continues from), usage priced by `metering`, storage measured in `checkpoints_dir`.
std::unique_ptr<RunObserver> make_metrics_observer(const std::string& path, bool append,
                                                   const MeteringConfig& metering, const std::string& checkpoints_dir,
                                                   double now);

}  // namespace gradmesh::train
