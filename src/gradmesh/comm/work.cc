#include "gradmesh/comm/work.h"

#include "gradmesh/core/error.h"

namespace gradmesh::comm {

void Work::wait_or_throw(Millis timeout) {
  if (!wait(timeout)) throw_error(ErrorKind::kTimeout, description_, "did not complete within its timeout");
}

bool Work::wait(Millis timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [this] { return done_; })) return false;
  if (error_) std::rethrow_exception(error_);
  return true;
}

bool Work::completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

std::exception_ptr Work::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

double Work::duration_s() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_ ? std::chrono::duration<double>(finished_ - started_).count() : 0.0;
}

namespace {
double seconds_of(std::chrono::steady_clock::time_point t) {
  return t == std::chrono::steady_clock::time_point{} ? 0.0
                                                       : std::chrono::duration<double>(t.time_since_epoch()).count();
}
}  // namespace

double Work::start_time_s() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seconds_of(started_);
}

double Work::finish_time_s() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_ ? seconds_of(finished_) : 0.0;
}

void Work::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  started_ = std::chrono::steady_clock::now();
}

void Work::on_finish(std::function<void()> callback) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_) {
      on_finish_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

void Work::finish(std::exception_ptr error) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    callbacks.swap(on_finish_);
    if (started_ == std::chrono::steady_clock::time_point{}) started_ = std::chrono::steady_clock::now();
    finished_ = std::chrono::steady_clock::now();
    error_ = std::move(error);
    done_ = true;
  }
  done_cv_.notify_all();
  for (auto& callback : callbacks) callback();
}

}  // namespace gradmesh::comm
