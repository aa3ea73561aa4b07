#include "gradmesh/train/run_resilience.h"

#include "gradmesh/core/clock.h"
#include "gradmesh/core/log.h"
#include "gradmesh/elastic/metrics_feed.h"
#include "gradmesh/obs/json_object.h"
#include "gradmesh/train/rank_setup.h"

namespace gradmesh::train {

RunResilience::RunResilience(const Config& config, const RunOptions& options) : config_(config) {
  generation_ = options.generation;
  if (!comm::launched_as_worker()) return;
  env_ = comm::read_worker_environment();
  if (env_.store_endpoint.empty() || env_.run_id.empty()) return;  // mpirun: no launcher to talk to
  launched_ = true;
  generation_ = env_.generation;
  store_ = comm::open_store(env_.store_endpoint);
  if (config_.elastic.recovery == "in-process" && env_.world_size > 1) {
    comm::ProcessGroupOptions group_options;
    group_options.backend = config_.parallel.backend;
    group_options.timeout = collective_timeout(config_.parallel);
    recovery_ = std::make_unique<InProcessRecovery>(env_, group_options, store_);
  }
}

RunResilience::~RunResilience() = default;

std::unique_ptr<elastic::HeartbeatPublisher> RunResilience::publisher() const {
  return std::make_unique<elastic::HeartbeatPublisher>(store_, env_.run_id, generation_, env_.rank,
                                                       elastic::heartbeat_interval_from_environment());
}

bool RunResilience::can_recover(const Error& failure) const {
  return recovery_ && (failure.kind() == ErrorKind::kComm || failure.kind() == ErrorKind::kTimeout);
}

std::shared_ptr<comm::ProcessGroup> RunResilience::rejoin() {
  GRADMESH_CHECK(recovery_ != nullptr, "in-process recovery is not enabled");
  // Alive while waiting (a lost node is only noticed after the launchers' timeout).
  std::shared_ptr<comm::ProcessGroup> group = recovery_->rejoin([this] {
    if (heartbeat_) heartbeat_->touch();
  });
  heartbeat_.reset();  // the failed generation's key; the next step publishes under the new one
  generation_ = recovery_->generation();
  env_.rank = group->rank();
  env_.world_size = group->size();
  return group;
}

int RunResilience::hand_over(comm::ProcessGroup& group, bool have_state, nn::Model& model,
                             optim::Optimizer& optimizer, checkpoint::TrainerState& state, std::string& run_dir) {
  if (!recovery_)
    throw_error(ErrorKind::kConfig, "GRADMESH_REPLACEMENT",
                "set, but this run does not recover in process (elastic.recovery = \"in-process\")");
  return recovery_->hand_over(group, have_state, model, optimizer, state, run_dir);
}

void RunResilience::started(int64_t step, RunObserver& observer) {
  observer_ = &observer;
  restart_step_ = step;
  pending_.reset();
  if (!launched_ || generation_ == 0 || !observer.records()) return;
  try {
    pending_ = elastic::read_restart_record(*store_, env_.run_id, generation_);
  } catch (const Error& e) {
    log_warn(std::string("cannot read why this generation started: ") + e.what());
  }
}

void RunResilience::publish_metrics_path(const std::string& path) {
  if (!launched_) return;
  metrics_path_ = path;
  try {
    elastic::publish_metrics_path(*store_, env_.run_id, path);
  } catch (const Error& e) {
    log_warn(std::string("the dashboard will not show this run's metrics: ") + e.what());
  }
}

void RunResilience::stepped(int64_t step) {
  // The first beat comes with the first step: loading data and meeting the
  // other ranks take as long as they take (collective timeouts bound them),
  // while the launcher judges silence only after a worker's first beat.
  if (!heartbeat_ && launched_) {
    heartbeat_ = publisher();
    if (!metrics_path_.empty()) heartbeat_->keep_published(elastic::metrics_path_key(env_.run_id), metrics_path_);
  }
  if (heartbeat_) heartbeat_->set_step(step);
  report_restart();
}

void RunResilience::finished() { report_restart(); }

void RunResilience::report_restart() {
  if (!pending_ || observer_ == nullptr) return;
  const elastic::RestartRecord r = *pending_;
  pending_.reset();
  observer_->restarted(r, recovery_ != nullptr, restart_step_);
}

void RunResilience::touch() {
  if (heartbeat_) heartbeat_->touch();
}

}  // namespace gradmesh::train
