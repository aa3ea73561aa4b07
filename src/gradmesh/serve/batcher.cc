#include "gradmesh/serve/batcher.h"

#include <chrono>
#include <cstring>

#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"

namespace gradmesh::serve {
namespace {

bool same_rows(const Tensor& a, const Tensor& b) {
  const Shape& x = a.shape();
  const Shape& y = b.shape();
  return x.size() == y.size() && std::equal(x.begin() + 1, x.end(), y.begin() + 1);
}

template <class P>
bool may_share(const P& a, const P& b) {
  return a.context == b.context && same_rows(a.rows, b.rows);
}

}  // namespace

DynamicBatcher::DynamicBatcher(Run run, BatchOptions options, std::function<void(int64_t, double)> on_batch)
    : run_(std::move(run)), options_(options), on_batch_(std::move(on_batch)) {
  GRADMESH_CHECK(options_.max_batch >= 1 && options_.threads >= 1 && options_.max_queue >= 1 &&
                     options_.max_delay_us >= 0,
                 "batch options out of range");
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { serve_loop(); });
}

DynamicBatcher::~DynamicBatcher() { stop(); }

std::future<BatchResult> DynamicBatcher::submit(Tensor rows, std::shared_ptr<const void> context) {
  auto promise = std::make_shared<std::promise<BatchResult>>();
  std::future<BatchResult> result = promise->get_future();
  submit(std::move(rows), std::move(context), [promise](BatchResult* r, std::exception_ptr failure) {
    if (failure)
      promise->set_exception(failure);
    else
      promise->set_value(std::move(*r));
  });
  return result;
}

void DynamicBatcher::submit(Tensor rows, std::shared_ptr<const void> context, Done done) {
  GRADMESH_CHECK(rows.shape().size() >= 1 && rows.dim(0) >= 1, "a request has at least one row");
  Pending p{std::move(rows), std::move(context), now_seconds(), std::move(done)};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw QueueFull("the server is shutting down");
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue)
      throw QueueFull(std::to_string(queue_.size()) + " requests are already waiting (the queue's limit)");
    queue_.push_back(std::move(p));
  }
  arrived_.notify_all();
}

int64_t DynamicBatcher::queue_depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

void DynamicBatcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  arrived_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void DynamicBatcher::serve_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    arrived_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and every queued request has run
    std::vector<Pending> batch = take_batch(lock);
    if (batch.empty()) continue;
    lock.unlock();
    run_batch(std::move(batch));
    lock.lock();
  }
}

std::vector<DynamicBatcher::Pending> DynamicBatcher::take_batch(std::unique_lock<std::mutex>& lock) {
  // Wait for a full batch of the oldest request's shape, its deadline, or the end.
  auto ready_rows = [&] {
    int64_t rows = 0;
    for (const Pending& p : queue_)
      if (may_share(p, queue_.front())) rows += p.rows.dim(0);
    return rows;
  };
  while (!stopping_ && !queue_.empty() && ready_rows() < options_.max_batch) {
    const double deadline = queue_.front().submitted + static_cast<double>(options_.max_delay_us) * 1e-6;
    const double left = deadline - now_seconds();
    if (left <= 0) break;
    arrived_.wait_for(lock, std::chrono::duration<double>(left));
  }
  std::vector<Pending> batch;
  if (queue_.empty()) return batch;  // another thread took them
  int64_t rows = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    const bool fits = batch.empty() || (may_share(*it, batch.front()) && rows + it->rows.dim(0) <= options_.max_batch);
    if (!fits) {
      ++it;
      continue;
    }
    rows += it->rows.dim(0);
    batch.push_back(std::move(*it));
    it = queue_.erase(it);
    if (rows >= options_.max_batch) break;
  }
  return batch;
}

void DynamicBatcher::run_batch(std::vector<Pending> batch) {
  const double start = now_seconds();
  int64_t rows = 0;
  for (const Pending& p : batch) rows += p.rows.dim(0);
  Shape shape = batch.front().rows.shape();
  shape[0] = rows;
  Tensor input = batch.size() == 1 ? batch.front().rows : Tensor::empty(shape);
  if (batch.size() > 1) {
    float* to = input.data();
    for (const Pending& p : batch) {
      std::memcpy(to, p.rows.data(), static_cast<size_t>(p.rows.numel()) * sizeof(float));
      to += p.rows.numel();
    }
  }
  Tensor output;
  std::exception_ptr failure;
  try {
    output = run_(input, batch.front().context.get());
    if (output.shape().empty() || output.dim(0) != rows)
      throw Error(ErrorKind::kInternal, "the model returned " + std::to_string(output.shape().empty() ? 0 : output.dim(0)) +
                                            " rows for a batch of " + std::to_string(rows));
  } catch (...) {
    failure = std::current_exception();
  }
  const double seconds = now_seconds() - start;
  if (on_batch_) on_batch_(rows, seconds);
  int64_t at = 0;
  for (Pending& p : batch) {
    if (failure) {
      p.done(nullptr, failure);
      continue;
    }
    const int64_t n = p.rows.dim(0), per_row = output.numel() / rows;
    Shape out_shape = output.shape();
    out_shape[0] = n;
    Tensor mine = Tensor::empty(out_shape);
    std::memcpy(mine.data(), output.data() + at * per_row, static_cast<size_t>(n * per_row) * sizeof(float));
    at += n;
    BatchResult result{std::move(mine), start - p.submitted, seconds, rows};
    p.done(&result, nullptr);
  }
}

}  // namespace gradmesh::serve
