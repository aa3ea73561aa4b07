// A small fixed pool for data-parallel loops inside one process.
//
// parallel_for splits [begin, end) into one contiguous chunk per thread; the
// split depends only on the range and the thread count, so every reduction
// that combines per-chunk partial results in chunk order is deterministic.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gradmesh {

class ThreadPool {
 public:
  // `threads` counts the caller: a pool of 1 runs everything inline.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(chunk, lo, hi) for each chunk; chunk in [0, chunks). Ranges
  // smaller than `grain` elements per thread use fewer chunks.
  // Several threads may call it at once: while one call has the workers,
  // another runs all of its chunks on its own thread (the same split, so the
  // same results). REQUIRES: not called from inside fn (no nesting).
  void parallel_for(int64_t begin, int64_t end, int64_t grain,
                    const std::function<void(int chunk, int64_t lo, int64_t hi)>& fn);

  // How many chunks parallel_for would use for this range (to size partial results).
  int chunks_for(int64_t count, int64_t grain) const;

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int, int64_t, int64_t)>* job_ = nullptr;
  int64_t begin_ = 0, end_ = 0;
  int chunks_ = 0;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

// The process-wide compute pool used by kernels (kernels::set_num_threads
// sizes it together with BLAS).
ThreadPool& compute_pool();
void resize_compute_pool(int threads);

}  // namespace gradmesh
