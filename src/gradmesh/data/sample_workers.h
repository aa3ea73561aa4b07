// The loader's decode threads (data.workers): the producer thread hands each
// batch's samples to them and to itself, a few samples per claim (a
// sixteenth of a thread's share), and waits for the batch. Samples are pure
// functions of (epoch, index) written to their own rows, so how they are
// spread over threads never changes a bit. Unlike core/thread_pool.h's fixed
// chunks, small claims even out images that decode slower than others, and
// a sample's exception reaches the caller: the lowest failing sample's,
// whatever the spread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gradmesh::data {

class SampleWorkers {
 public:
  // `threads` >= 1 in all, the caller of run() included (threads - 1 are started).
  explicit SampleWorkers(int threads);
  ~SampleWorkers();
  SampleWorkers(const SampleWorkers&) = delete;
  SampleWorkers& operator=(const SampleWorkers&) = delete;

  // Calls body(k) for every k in [0, n) and returns when all are done. When
  // calls throw, the exception of the lowest k is rethrown (the same one
  // however the samples were spread); the rest of the batch is skipped.
  // One caller at a time.
  void run(int64_t n, const std::function<void(int64_t)>& body);
  int threads() const { return static_cast<int>(threads_.size()) + 1; }

 private:
  void work_loop();
  void drain();  // claims and runs samples of the current round until none is left

  std::mutex mutex_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int64_t)>* body_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;  // samples per claim
  std::atomic<int64_t> next_{0};
  uint64_t round_ = 0;
  int busy_ = 0;  // helpers still in the current round
  bool stop_ = false;
  std::atomic<int64_t> error_index_{-1};  // the lowest failing sample so far (-1: none)
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

}  // namespace gradmesh::data
