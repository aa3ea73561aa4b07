// Work: the handle an asynchronous collective returns (as c10d's Work).
//
// The backend finishes it exactly once, with or without an error; any thread
// may wait on it. wait() rethrows the operation's error, so a failure that
// happened on the communication thread surfaces where the caller looks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "gradmesh/comm/store.h"

namespace gradmesh::comm {

class Work {
 public:
  explicit Work(std::string description) : description_(std::move(description)) {}

  // Blocks until the operation finished or `timeout` passed. Returns true when
  // it completed; throws its error (Error kComm/kTimeout) if it failed; returns
  // false on timeout (the operation may still complete later).
  bool wait(Millis timeout = kDefaultTimeout);
  // wait(), with a timeout an error too: Error(kTimeout) naming the operation.
  void wait_or_throw(Millis timeout = kDefaultTimeout);
  bool completed() const;
  std::exception_ptr error() const;
  // Seconds between start() and finish() (0 until finished).
  double duration_s() const;
  // When it started and finished, on now_seconds()'s clock (0 until then), for traces.
  double start_time_s() const;
  double finish_time_s() const;
  // "allreduce #12 (f32 x 1048576, sum)", for messages.
  const std::string& description() const { return description_; }

  // Calls `callback` once the operation has finished, with or without an
  // error: at once on this thread if it already has, otherwise on the thread
  // that finishes it, after waiters were woken. Callbacks must not throw.
  void on_finish(std::function<void()> callback);

  // For backends: the operation began executing / ended (error null = success).
  void start();
  void finish(std::exception_ptr error = nullptr);

 private:
  std::string description_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::vector<std::function<void()>> on_finish_;
  std::chrono::steady_clock::time_point started_{}, finished_{};
};

}  // namespace gradmesh::comm
