#include "gradmesh/comm/gloo/op_watchdog.h"

namespace gradmesh::comm::gloo_backend {

OpWatchdog::OpWatchdog(std::function<void()> on_expire)
    : on_expire_(std::move(on_expire)), thread_([this] { run(); }) {}

OpWatchdog::~OpWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void OpWatchdog::arm(Clock::time_point deadline) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    armed_ = true;
    fired_ = false;
    deadline_ = deadline;
    // A thread sleeping towards an earlier deadline re-reads ours when it wakes.
    wake = deadline < sleeping_until_;
  }
  if (wake) wake_.notify_one();
}

bool OpWatchdog::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
  const bool fired = fired_;
  fired_ = false;
  return fired;
}

void OpWatchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (!armed_ || fired_) {
      sleeping_until_ = Clock::time_point::max();
      wake_.wait(lock);
      continue;
    }
    const uint64_t generation = generation_;
    const Clock::time_point deadline = deadline_;
    sleeping_until_ = deadline;
    if (wake_.wait_until(lock, deadline, [&] { return stopping_ || generation_ != generation || !armed_; })) continue;
    fired_ = true;
    lock.unlock();
    on_expire_();
    lock.lock();
  }
}

}  // namespace gradmesh::comm::gloo_backend
