#include "gradmesh/train/run_checkpointer.h"

#include "gradmesh/core/clock.h"
#include "gradmesh/core/log.h"

namespace gradmesh::train {

RunCheckpointer::RunCheckpointer(const CheckpointConfig& config, std::string dir, bool writer, double now,
                                 bool committer, double parts_timeout_s)
    : config_(config), dir_(std::move(dir)), writer_(writer), last_save_(now) {
  if (!writer_) return;
  const checkpoint::CheckpointOptions options{dir_, static_cast<int>(config_.keep_last), committer, parts_timeout_s};
  sync_ = std::make_unique<checkpoint::CheckpointWriter>(options);
  if (config_.async) async_ = std::make_unique<checkpoint::AsyncCheckpointWriter>(options);
}

RunCheckpointer::~RunCheckpointer() = default;

bool RunCheckpointer::due_by_steps(int64_t step) const {
  return config_.every_steps > 0 && step % config_.every_steps == 0;
}

bool RunCheckpointer::due_by_time(double now) const {
  return config_.every_seconds > 0 && now - last_save_ >= config_.every_seconds;
}

double RunCheckpointer::persist(checkpoint::Snapshot snapshot, bool sync, double start) {
  ++saves_;
  if (sync) {
    if (async_) async_->wait();  // one writer at a time: the latest pointer must end at this save
    const checkpoint::SaveResult r = sync_->save(snapshot);
    if (r.ok) {
      ++sync_stats_.saved;
      sync_stats_.bytes += r.bytes;
      sync_stats_.write_seconds += r.seconds;
      sync_stats_.last_path = r.path;
    } else {
      ++sync_stats_.failed;
      sync_stats_.last_error = r.error;
      log_warn("checkpoint of step " + std::to_string(snapshot.step) + " failed: " + r.error +
               "; training goes on, earlier checkpoints are intact");
    }
  } else {
    async_->save(std::move(snapshot));
  }
  const double stalled = now_seconds() - start;
  stall_seconds_ += stalled;
  return stalled;
}

void RunCheckpointer::finish() {
  if (async_) async_->wait();
}

checkpoint::CheckpointStats RunCheckpointer::stats() const {
  checkpoint::CheckpointStats total = sync_stats_;
  if (!async_) return total;
  const checkpoint::CheckpointStats a = async_->stats();
  total.saved += a.saved;
  total.failed += a.failed;
  total.bytes += a.bytes;
  total.write_seconds += a.write_seconds;
  if (!a.last_error.empty()) total.last_error = a.last_error;
  if (!a.last_path.empty() && sync_stats_.last_path.empty()) total.last_path = a.last_path;
  return total;
}

}  // namespace gradmesh::train
