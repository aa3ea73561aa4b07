// Worker heartbeats: how the launcher tells a slow worker from a hung one.
//
// A worker started by `gradmesh launch` creates one HeartbeatPublisher. Its
// background thread writes store key "<run_id>/<generation>/heartbeat/<rank>"
// = "<step> <beat> <progress>" every interval: `beat` counts the writes (the
// process is alive), `progress` counts set_step/touch calls (the training loop
// is moving). The launcher (elastic/heartbeat_monitor.h) declares the worker
// hung when the value stops changing (the process is stopped or frozen), or
// when beats continue but progress does not (stuck in a collective), for
// --heartbeat-timeout. A worker that never publishes is never judged.
//
// Thread-safe: set_step/touch may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gradmesh/comm/store.h"

namespace gradmesh::elastic {

// The heartbeat value and its parts.
struct Heartbeat {
  int64_t step = -1;
  int64_t beat = 0;
  int64_t progress = 0;
};
std::string heartbeat_key(const std::string& run_id, int generation, int rank);
std::string format_heartbeat(const Heartbeat& beat);
// nullopt for anything but three integers separated by single spaces.
std::optional<Heartbeat> parse_heartbeat(const std::string& text);

class HeartbeatPublisher {
 public:
  // Writes the first beat before returning, then one every `interval`.
  HeartbeatPublisher(std::shared_ptr<comm::Store> store, std::string run_id, int generation, int rank,
                     std::chrono::milliseconds interval);
  // Stops the thread; the key stays (the launcher stops judging exited workers).
  ~HeartbeatPublisher();
  HeartbeatPublisher(const HeartbeatPublisher&) = delete;
  HeartbeatPublisher& operator=(const HeartbeatPublisher&) = delete;

  // A new training step was reached: records it and counts as progress.
  void set_step(int64_t step);
  // Alive and progressing without a new step (evaluation, checkpointing).
  void touch();
  // Writes `key` = `value` again, every tenth beat, whenever the store lost it
  // (a store restarted without its data): what this worker published once.
  void keep_published(const std::string& key, const std::string& value);

  // A publisher for this worker when it was started by `gradmesh launch`
  // (GRADMESH_RUN_ID set), else nullptr. Reads GRADMESH_GENERATION, RANK and
  // GRADMESH_HEARTBEAT_INTERVAL (seconds, default 1); a malformed value is
  // Error(kUsage) naming the variable.
  static std::unique_ptr<HeartbeatPublisher> from_environment(std::shared_ptr<comm::Store> store);

 private:
  void run();
  void publish();

  std::shared_ptr<comm::Store> store_;
  std::string key_;
  std::chrono::milliseconds interval_;
  std::atomic<int64_t> step_{-1};
  std::atomic<int64_t> progress_{0};
  int64_t beat_ = 0;
  bool warned_ = false;
  std::mutex mutex_;
  std::vector<std::pair<std::string, std::string>> kept_;  // guarded by mutex_
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

// GRADMESH_HEARTBEAT_INTERVAL (seconds, default 1) as milliseconds; a
// malformed value is Error(kUsage) naming the variable.
std::chrono::milliseconds heartbeat_interval_from_environment();

}  // namespace gradmesh::elastic
