#include "gradmesh/data/sample_workers.h"

#include <algorithm>

#include "gradmesh/core/error.h"

namespace gradmesh::data {

SampleWorkers::SampleWorkers(int threads) {
  if (threads < 1) throw_error(ErrorKind::kConfig, "data.workers", "must be >= 1, got " + std::to_string(threads));
  for (int t = 1; t < threads; ++t) threads_.emplace_back([this] { work_loop(); });
}

SampleWorkers::~SampleWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void SampleWorkers::drain() {
  for (;;) {
    const int64_t first = next_.fetch_add(chunk_);
    for (int64_t k = first; k < std::min(first + chunk_, n_); ++k) {
      // After a failure only samples below it still run: one of them may
      // fail too, and the lowest failure is the one reported.
      const int64_t failed_at = error_index_.load(std::memory_order_relaxed);
      if (failed_at >= 0 && k > failed_at) return;
      try {
        (*body_)(k);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (error_index_ < 0 || k < error_index_) {
          error_index_ = k;
          error_ = std::current_exception();
        }
      }
    }
    if (first + chunk_ >= n_) return;
  }
}

void SampleWorkers::work_loop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    start_cv_.wait(lock, [&] { return stop_ || round_ != seen; });
    if (stop_) return;
    seen = round_;
    lock.unlock();
    drain();
    lock.lock();
    if (--busy_ == 0) done_cv_.notify_one();
  }
}

void SampleWorkers::run(int64_t n, const std::function<void(int64_t)>& body) {
  if (threads_.empty() || n < 2) {
    for (int64_t k = 0; k < n; ++k) body(k);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    n_ = n;
    // A few samples per claim: one claim per sample had the threads take
    // turns owning the counter's cache line.
    chunk_ = std::max<int64_t>(1, n / (16 * threads()));
    next_ = 0;
    error_index_ = -1;
    error_ = nullptr;
    busy_ = static_cast<int>(threads_.size());
    ++round_;
  }
  start_cv_.notify_all();
  drain();
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return busy_ == 0; });
  body_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace gradmesh::data
