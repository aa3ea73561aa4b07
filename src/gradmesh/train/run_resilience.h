// The training loop's fault-tolerance hooks: what a launched worker does so
// that the job survives failures. Heartbeats
// for the launcher's hang detection, the "restart" event in metrics.jsonl
// (generation, failed rank, cause, steps lost, seconds from the failure to
// the first step trained again), and in-process recovery when
// elastic.recovery = "in-process". Outside gradmesh launch it does nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "gradmesh/comm/environment.h"
#include "gradmesh/core/error.h"
#include "gradmesh/elastic/heartbeat.h"
#include "gradmesh/elastic/restart_record.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/in_process_recovery.h"
#include "gradmesh/train/run_observer.h"
#include "gradmesh/train/run_plan.h"

namespace gradmesh::train {

class RunResilience {
 public:
  RunResilience(const Config& config, const RunOptions& options);
  ~RunResilience();

  int generation() const { return generation_; }

  // A failure the survivors can recover from in process: a collective that
  // failed or timed out because a peer is gone.
  bool can_recover(const Error& failure) const;
  // See InProcessRecovery. REQUIRES: in-process recovery is on (a replacement or can_recover()).
  std::shared_ptr<comm::ProcessGroup> rejoin();
  int hand_over(comm::ProcessGroup& group, bool have_state, nn::Model& model, optim::Optimizer& optimizer,
                checkpoint::TrainerState& state, std::string& run_dir);

  // The run (re)starts training at `step` in the current generation; after
  // the first step `observer` reports the restart (rank 0's records it).
  void started(int64_t step, RunObserver& observer);
  // Rank 0 tells the launchers where the run's metrics.jsonl is, for node 0's
  // dashboard (elastic/metrics_feed.h); nothing without a launcher.
  void publish_metrics_path(const std::string& path);
  // A step completed: heartbeat, and the restart event after the first one.
  void stepped(int64_t step);
  // Alive without a new step (evaluation).
  void touch();
  // The run ends: a restart not reported yet (no step was left to train) is reported now.
  void finished();

 private:
  // A publisher under the current generation (which changes with in-process recovery).
  std::unique_ptr<elastic::HeartbeatPublisher> publisher() const;

  const Config& config_;
  bool launched_ = false;
  comm::WorkerEnvironment env_;
  int generation_ = 0;
  std::shared_ptr<comm::Store> store_;
  std::unique_ptr<elastic::HeartbeatPublisher> heartbeat_;
  std::unique_ptr<InProcessRecovery> recovery_;
  std::optional<elastic::RestartRecord> pending_;  // reported after the first step of this generation
  int64_t restart_step_ = 0;
  RunObserver* observer_ = nullptr;
  std::string metrics_path_;  // rank 0: what publish_metrics_path() published, kept by the heartbeat

  void report_restart();
};

}  // namespace gradmesh::train
