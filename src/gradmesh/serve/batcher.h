// Dynamic batching: requests are queued and run together, up to `max_batch`
// rows or until the oldest has waited `max_delay_us`, whichever comes first,
// on a pool of inference threads. Only rows of one shape and one context
// share a batch (a GPT's sequences of one length; a model version, so a
// request queued before a hot reload runs on the version it arrived for). The queue is bounded: a full one refuses
// at once (the server answers 503 with Retry-After) instead of growing.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gradmesh/core/tensor.h"

namespace gradmesh::serve {

struct BatchOptions {
  int64_t max_batch = 32;       // rows per forward pass (a larger request runs alone)
  int64_t max_delay_us = 1000;  // how long the first request of a batch waits for others
  int threads = 1;              // inference threads
  int64_t max_queue = 256;      // requests waiting; more are refused
};

struct BatchResult {
  Tensor output;            // this request's rows of the batch's output
  double queue_seconds = 0;   // from submit to the batch's start
  double compute_seconds = 0;  // the batch's forward pass
  int64_t batch_rows = 0;      // rows in the batch it ran in
};

// Thrown by submit when the queue is full or the batcher is stopping.
class QueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class DynamicBatcher {
 public:
  // `run` maps rows [n, ...] to outputs [n, ...] with the batch's context
  // (what submit was given); it is called from the inference threads,
  // several at once when threads > 1. `on_batch` (may be empty) sees each
  // batch's row count and compute seconds.
  using Run = std::function<Tensor(const Tensor& rows, const void* context)>;
  DynamicBatcher(Run run, BatchOptions options, std::function<void(int64_t rows, double seconds)> on_batch = {});
  ~DynamicBatcher();  // stop()
  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // Queues `rows` (a request's, [n >= 1, ...]); the future holds its output
  // or the exception `run` threw. Throws QueueFull when max_queue requests
  // are waiting or after stop().
  // `context` (may be null) is kept alive until the request has run.
  std::future<BatchResult> submit(Tensor rows, std::shared_ptr<const void> context = nullptr);
  // The same without a thread waiting on a future: `done` runs on the
  // inference thread once the batch has run, with its result or with the
  // exception `run` threw (`result` null then). It must not throw. Throws
  // QueueFull as above (and `done` is then never called).
  using Done = std::function<void(BatchResult* result, std::exception_ptr failure)>;
  void submit(Tensor rows, std::shared_ptr<const void> context, Done done);
  // Requests waiting (not yet in a batch).
  int64_t queue_depth() const;
  // Refuses new requests, runs every queued one, joins the threads.
  void stop();

 private:
  struct Pending {
    Tensor rows;
    std::shared_ptr<const void> context;
    double submitted;
    Done done;
  };
  void serve_loop();
  std::vector<Pending> take_batch(std::unique_lock<std::mutex>& lock);
  void run_batch(std::vector<Pending> batch);

  Run run_;
  BatchOptions options_;
  std::function<void(int64_t, double)> on_batch_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace gradmesh::serve
