#include "gradmesh/core/thread_pool.h"

#include <algorithm>
#include <memory>

namespace gradmesh {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(threads, 1); ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

int ThreadPool::chunks_for(int64_t count, int64_t grain) const {
  if (count <= 0) return 0;
  const int64_t by_grain = std::max<int64_t>(1, count / std::max<int64_t>(grain, 1));
  return static_cast<int>(std::min<int64_t>(threads(), by_grain));
}

static void chunk_range(int64_t begin, int64_t end, int chunks, int chunk, int64_t& lo, int64_t& hi) {
  const int64_t count = end - begin;
  lo = begin + count * chunk / chunks;
  hi = begin + count * (chunk + 1) / chunks;
}

void ThreadPool::parallel_for(int64_t begin, int64_t end, int64_t grain,
                              const std::function<void(int, int64_t, int64_t)>& fn) {
  const int chunks = chunks_for(end - begin, grain);
  if (chunks == 0) return;
  if (chunks == 1) {
    fn(0, begin, end);
    return;
  }
  bool pool_busy = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_busy = job_ != nullptr;
    if (!pool_busy) {
      job_ = &fn;
      begin_ = begin;
      end_ = end;
      chunks_ = chunks;
      pending_ = chunks - 1;
      ++generation_;
    }
  }
  if (pool_busy) {
    // Another thread's loop holds the workers (a server runs several
    // batches at once): this one runs on its caller alone, chunk by chunk
    // with the same split, so its results do not depend on which ran where.
    for (int chunk = 0; chunk < chunks; ++chunk) {
      int64_t lo, hi;
      chunk_range(begin, end, chunks, chunk, lo, hi);
      fn(chunk, lo, hi);
    }
    return;
  }
  wake_.notify_all();
  // Even when the caller's chunk throws, the workers finish theirs (they
  // still use `fn`) and the pool is handed back before the error leaves.
  struct Release {
    ThreadPool& pool;
    ~Release() {
      std::unique_lock<std::mutex> lock(pool.mutex_);
      pool.done_.wait(lock, [this] { return pool.pending_ == 0; });
      pool.job_ = nullptr;
    }
  } release{*this};
  int64_t lo, hi;
  chunk_range(begin, end, chunks, 0, lo, hi);
  fn(0, lo, hi);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    if (index >= chunks_) continue;  // this job needs fewer threads
    const auto* job = job_;
    int64_t lo, hi;
    chunk_range(begin_, end_, chunks_, index, lo, hi);
    lock.unlock();
    (*job)(index, lo, hi);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

namespace {
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
std::mutex& pool_mutex() {
  static std::mutex mutex;
  return mutex;
}
int g_threads = 1;
}  // namespace

// Several threads may ask for the pool first (a server's, or ranks running as
// threads): one of them creates it.
ThreadPool& compute_pool() {
  std::lock_guard<std::mutex> lock(pool_mutex());
  auto& slot = pool_slot();
  if (!slot) slot = std::make_unique<ThreadPool>(g_threads);
  return *slot;
}

void resize_compute_pool(int threads) {
  std::lock_guard<std::mutex> lock(pool_mutex());
  g_threads = std::max(threads, 1);
  pool_slot().reset();
}

}  // namespace gradmesh
