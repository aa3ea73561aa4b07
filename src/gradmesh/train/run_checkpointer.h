// When a training run saves checkpoints, and how long the step loop waits
// for it. While the state is replicated (data parallel), rank 0 alone writes;
// the other ranks only take part in the decisions that need every rank.
// Under ZeRO every rank writes its optimizer shard and rank 0 commits
// (checkpoint_writer.h): every rank is a writer, rank 0 the committer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gradmesh/checkpoint/async_checkpoint_writer.h"
#include "gradmesh/checkpoint/checkpoint_writer.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/train/config.h"

namespace gradmesh::train {

class RunCheckpointer {
 public:
  // `writer`: this rank writes; `committer`: it commits (writers that are
  // not save parts for it). Creates `dir` on a writer. `parts_timeout_s`:
  // how long the committer waits for the other ranks' parts.
  RunCheckpointer(const CheckpointConfig& config, std::string dir, bool writer, double now, bool committer = true,
                  double parts_timeout_s = 600);
  ~RunCheckpointer();

  // After completing `step`: checkpoint.every_steps divides it, or
  // checkpoint.every_seconds passed since the last save (or the start).
  bool due(int64_t step, double now) const { return due_by_steps(step) || due_by_time(now); }
  bool due_by_steps(int64_t step) const;
  bool due_by_time(double now) const;

  // Persists the snapshot `take` builds (called only on the writer):
  // async = copied now, written in the background; else written before this
  // returns. Failures are logged and counted, never thrown. Returns the seconds the loop stalled.
  template <class TakeSnapshot>
  double save(TakeSnapshot take, bool force_sync, double now);

  // A checkpoint was taken at `now` by the ranks that write it: restarts the
  // time-based interval on a rank that does not write (it votes on the next
  // time-based save and must see the interval this one began).
  void note_save(double now) { last_save_ = now; }

  // Waits for the write in flight.
  void finish();

  bool writer() const { return writer_; }
  const std::string& dir() const { return dir_; }
  int64_t saves() const { return saves_; }
  double stall_seconds() const { return stall_seconds_; }
  checkpoint::CheckpointStats stats() const;

 private:
  double persist(checkpoint::Snapshot snapshot, bool sync, double start);

  CheckpointConfig config_;
  std::string dir_;
  bool writer_;
  double last_save_;
  int64_t saves_ = 0;
  double stall_seconds_ = 0;
  std::unique_ptr<checkpoint::CheckpointWriter> sync_;
  std::unique_ptr<checkpoint::AsyncCheckpointWriter> async_;
  checkpoint::CheckpointStats sync_stats_;
};

template <class TakeSnapshot>
double RunCheckpointer::save(TakeSnapshot take, bool force_sync, double now) {
  last_save_ = now;
  const double start = now_seconds();  // copying the state is part of the stall
  return persist(take(), force_sync || !config_.async, start);
}

}  // namespace gradmesh::train
