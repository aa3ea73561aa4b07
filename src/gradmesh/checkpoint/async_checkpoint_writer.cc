#include "gradmesh/checkpoint/async_checkpoint_writer.h"

#include <exception>

#include "gradmesh/core/log.h"

namespace gradmesh::checkpoint {

AsyncCheckpointWriter::AsyncCheckpointWriter(CheckpointOptions options)
    : writer_(std::move(options)), thread_([this] { run(); }) {}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !queued_ && !writing_; });
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void AsyncCheckpointWriter::save(Snapshot snapshot) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !queued_ && !writing_; });
    queued_ = std::move(snapshot);
  }
  changed_.notify_all();
}

void AsyncCheckpointWriter::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !queued_ && !writing_; });
}

CheckpointStats AsyncCheckpointWriter::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void AsyncCheckpointWriter::run() {
  for (;;) {
    Snapshot snapshot;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return queued_.has_value() || stopping_; });
      if (!queued_) return;  // stopping, nothing left
      snapshot = std::move(*queued_);
      queued_.reset();
      writing_ = true;
    }
    SaveResult result;
    try {
      result = writer_.save(snapshot);
    } catch (const std::exception& e) {  // save() does not throw; belt and braces for the thread
      result.error = e.what();
    }
    snapshot = Snapshot();  // free the tensors before anyone can queue the next one
    if (!result.ok) log_warn("checkpoint: saving '" + result.path + "' failed: " + result.error);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (result.ok) {
        ++stats_.saved;
        stats_.bytes += result.bytes;
        stats_.last_path = result.path;
      } else {
        ++stats_.failed;
        stats_.last_error = result.error;
      }
      stats_.write_seconds += result.seconds;
      writing_ = false;
    }
    changed_.notify_all();
  }
}

}  // namespace gradmesh::checkpoint
