// OpWatchdog: enforces the running operation's deadline from the outside.
//
// Gloo's bound-buffer algorithms (the tuned all-reduces) time out per pair,
// with a timeout fixed when the pairs connect, so they cannot honour a
// per-operation timeout by themselves. The group arms the watchdog with each
// operation's deadline; if it passes first, the watchdog calls `on_expire`
// (which shuts the group's connections down, failing the operation at once)
// and the operation's error is reported as a timeout.
//
// Cost per operation: two uncontended mutex acquisitions. The thread is only
// woken when a deadline is earlier than the one it already sleeps towards, so
// back-to-back operations with the same timeout do not wake it at all.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace gradmesh::comm::gloo_backend {

class OpWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // `on_expire` runs on the watchdog's thread and must be safe to call while
  // the operation is still running (and after it finished).
  explicit OpWatchdog(std::function<void()> on_expire);
  ~OpWatchdog();
  OpWatchdog(const OpWatchdog&) = delete;
  OpWatchdog& operator=(const OpWatchdog&) = delete;

  // Starts watching one operation.
  void arm(Clock::time_point deadline);
  // Stops watching; returns whether the deadline passed (on_expire ran or is running).
  bool disarm();

 private:
  void run();

  std::function<void()> on_expire_;
  std::mutex mutex_;
  std::condition_variable wake_;
  uint64_t generation_ = 0;  // bumped by every arm()
  bool armed_ = false;
  bool fired_ = false;
  bool stopping_ = false;
  Clock::time_point deadline_{};
  Clock::time_point sleeping_until_ = Clock::time_point::max();
  std::thread thread_;
};

}  // namespace gradmesh::comm::gloo_backend
