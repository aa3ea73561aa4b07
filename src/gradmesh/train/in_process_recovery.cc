#include "gradmesh/train/in_process_recovery.h"

#include <algorithm>
#include <thread>

#include "gradmesh/core/clock.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/text_format.h"
#include "gradmesh/elastic/restart_record.h"
#include "gradmesh/parallel/rank_agreement.h"
#include "gradmesh/train/stop_request.h"
#include "gradmesh/train/training_state.h"

namespace gradmesh::train {
namespace {

constexpr std::chrono::milliseconds kPollInterval{20};

}  // namespace

InProcessRecovery::InProcessRecovery(comm::WorkerEnvironment env, comm::ProcessGroupOptions options,
                                     std::shared_ptr<comm::Store> store)
    : env_(std::move(env)), options_(std::move(options)), store_(std::move(store)) {
  GRADMESH_CHECK(!env_.run_id.empty(), "in-process recovery needs the run id gradmesh launch sets");
  elastic::announce_in_process_recovery(*store_, env_.run_id);
}

std::shared_ptr<comm::ProcessGroup> InProcessRecovery::rejoin(const std::function<void()>& waiting) {
  const comm::Millis timeout = options_.timeout.value_or(env_comm_timeout());
  const double deadline = now_seconds() + std::chrono::duration<double>(timeout).count();
  int next = env_.generation;
  while ((next = elastic::read_current_generation(*store_, env_.run_id)) <= env_.generation) {
    if (stop_signal_received())
      throw_error(ErrorKind::kComm, "in-process recovery of generation " + std::to_string(env_.generation),
                  "SIGTERM arrived while waiting for the replacement; giving up");
    if (now_seconds() > deadline)
      throw_error(ErrorKind::kComm, "in-process recovery of generation " + std::to_string(env_.generation),
                  "the launcher published no new generation within " + seconds_text(timeout) +
                      " (is this worker running under gradmesh launch?)");
    if (waiting) waiting();
    std::this_thread::sleep_for(kPollInterval);
  }
  if (const std::optional<std::vector<int>> survivors = elastic::read_surviving_ranks(*store_, env_.run_id, next)) {
    const auto at = std::find(survivors->begin(), survivors->end(), env_.rank);
    if (at == survivors->end())
      throw_error(ErrorKind::kComm, "in-process recovery of generation " + std::to_string(next),
                  "rank " + std::to_string(env_.rank) + " is not among the ranks that go on");
    const int old_rank = env_.rank;
    env_.rank = static_cast<int>(at - survivors->begin());
    env_.world_size = static_cast<int>(survivors->size());
    log_info("a node was lost: rank " + std::to_string(old_rank) + " goes on as rank " + std::to_string(env_.rank) +
             " of " + std::to_string(env_.world_size));
  }
  env_.generation = next;
  log_info("rejoining the job as rank " + std::to_string(env_.rank) + " of generation " + std::to_string(next));
  return comm::init_process_group(env_, options_);
}

int InProcessRecovery::hand_over(comm::ProcessGroup& group, bool have_state, nn::Model& model,
                                 optim::Optimizer& optimizer, checkpoint::TrainerState& state, std::string& run_dir) {
  const std::vector<std::string> steps =
      parallel::allgather_strings(group, have_state ? std::to_string(state.step) : std::string("-1"));
  int source = -1;
  int64_t best = -1;
  for (size_t r = 0; r < steps.size(); ++r) {
    const int64_t s = std::stoll(steps[r]);
    if (s > best) best = s, source = static_cast<int>(r);
  }
  if (source < 0)
    throw_error(ErrorKind::kComm, "in-process recovery", "no rank of the new group holds the training state");
  broadcast_training_state(group, source, model, &optimizer, state);
  run_dir = parallel::broadcast_string(group, run_dir, source);
  return source;
}

}  // namespace gradmesh::train
