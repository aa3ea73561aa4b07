// In-process recovery (elastic.recovery = "in-process"): when a
// data-parallel worker dies, the survivors keep their memory. The launcher
// starts a replacement for the failed rank and publishes the next
// generation; the survivors drop the broken group, form the group of that
// generation with the replacement, and the replica that completed the most
// steps hands its whole state (weights, optimizer, position in the data) to
// every other rank over the group. Every DP replica holds the full state, so
// no step is lost and nothing is read from disk.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "gradmesh/checkpoint/trainer_state.h"
#include "gradmesh/comm/environment.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/comm/store.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/optim/optimizer.h"

namespace gradmesh::train {

class InProcessRecovery {
 public:
  // `env`: how this worker was started; `store`: the run's store (not
  // namespaced). Announces the mode to the launcher.
  InProcessRecovery(comm::WorkerEnvironment env, comm::ProcessGroupOptions options, std::shared_ptr<comm::Store> store);

  int generation() const { return env_.generation; }

  // After the group of the current generation broke: waits (at most the
  // group's timeout, calling `waiting` at every poll) until the launcher
  // published a newer generation, then forms its group: with the same ranks
  // after a replacement, or renumbered after a node was lost (the surviving
  // ranks, in order). Error(kComm) when none comes or this rank is not among
  // the survivors.
  std::shared_ptr<comm::ProcessGroup> rejoin(const std::function<void()>& waiting);

  // Collective on the new group, for survivors and the replacement alike:
  // the rank whose `state.step` is highest (the lowest such rank) sends its
  // weights, optimizer state, trainer state and `run_dir`; `have_state` is
  // false on a replacement. Returns the sending rank.
  int hand_over(comm::ProcessGroup& group, bool have_state, nn::Model& model, optim::Optimizer& optimizer,
                checkpoint::TrainerState& state, std::string& run_dir);

 private:
  comm::WorkerEnvironment env_;
  comm::ProcessGroupOptions options_;
  std::shared_ptr<comm::Store> store_;
};

}  // namespace gradmesh::train
