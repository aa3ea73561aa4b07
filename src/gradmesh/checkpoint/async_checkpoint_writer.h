// AsyncCheckpointWriter: checkpoints written by one background thread, so a
// training step waits only for the snapshot copy, not for the disk.
//
// At most one save is in flight: save() called while one is still being
// written first waits for it, so snapshots are never dropped and memory holds
// at most two (the one being written and the one being queued). Failures are
// logged (log_warn, naming the path and the error) and counted in stats();
// they never throw into the training loop.
// Thread-safety: every member may be called from any thread.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "gradmesh/checkpoint/checkpoint_writer.h"

namespace gradmesh::checkpoint {

struct CheckpointStats {
  int64_t saved = 0, failed = 0;
  int64_t bytes = 0;         // written by successful saves
  double write_seconds = 0;  // spent in the background writing, all saves
  std::string last_error;    // of the most recent failure
  std::string last_path;     // of the most recent successful save
};

class AsyncCheckpointWriter {
 public:
  // Constructs the CheckpointWriter on the calling thread, so its errors
  // (Error(kIo) for an impossible dir, kConfig for a bad knob) throw here.
  explicit AsyncCheckpointWriter(CheckpointOptions options);
  ~AsyncCheckpointWriter();  // waits for the save in flight
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // Queues `snapshot` and returns; waits first while a previous save is in flight.
  void save(Snapshot snapshot);
  // Returns once nothing is queued or being written.
  void wait();
  CheckpointStats stats() const;

 private:
  void run();

  CheckpointWriter writer_;  // used only by thread_
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Snapshot> queued_;  // guarded by mutex_
  bool writing_ = false;            // guarded by mutex_
  bool stopping_ = false;           // guarded by mutex_
  CheckpointStats stats_;           // guarded by mutex_
  std::thread thread_;              // last: starts after everything above exists
};

}  // namespace gradmesh::checkpoint
