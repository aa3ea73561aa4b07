// Stopping a run cleanly on SIGTERM (what Kubernetes and spot instances send,
// and what gradmesh launch forwards): the step in progress finishes, a
// checkpoint is written synchronously, and the process exits 0.
//
// The ranks must stop after the SAME step, or the ones that go on wait in an
// all-reduce for ranks that left. A signal reaches the ranks at slightly
// different moments, so each step starts with a one-element all-reduce of
// "this rank was asked to stop" (queued before the gradient buckets, so it
// overlaps with forward); after the step every rank reads the same verdict.
#pragma once

#include <memory>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/comm/work.h"
#include "gradmesh/core/tensor.h"

namespace gradmesh::train {

// Installs a SIGTERM handler that only records the request (idempotent).
void catch_stop_signal();
// True once SIGTERM arrived after catch_stop_signal().
bool stop_signal_received();
// Forgets a received SIGTERM (tests).
void clear_stop_signal();

// The same one-element vote also carries a second flag when asked: "a
// checkpoint is due by time on this rank". Sharded checkpoints (ZeRO) need
// every rank to save after the same step, and checkpoint.every_seconds is
// measured on each rank's own clock.
class StopVote {
 public:
  // `group` null or of size 1: the local flag is the verdict.
  explicit StopVote(comm::ProcessGroup* group) : group_(group) {}
  // Starts the vote with this rank's flags; call at the start of every step on every rank.
  void begin_step(bool want_save = false);
  // True when some rank asked to stop before the step began. Throws
  // Error(kTimeout) when the vote did not complete.
  bool finish_step();
  // After finish_step(): true when some rank passed want_save.
  bool save_agreed() const { return save_; }

 private:
  comm::ProcessGroup* group_;
  Tensor flag_;  // [stop, save]
  std::shared_ptr<comm::Work> work_;
  bool local_ = false;
  bool save_ = false;
};

}  // namespace gradmesh::train
