// Dynamic batching: concurrent requests share forward passes up to
// max_batch rows, each gets exactly its own rows back, rows of different
// shapes never share a pass, a full queue refuses at once, a failing pass
// fails its requests only, and stop() runs what was queued.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "gradmesh/serve/batcher.h"

namespace gradmesh::serve {
namespace {

// Rows [n, 2] holding (id, id): the output doubles them.
Tensor rows_of(int id, int n = 1) {
  Tensor rows = Tensor::empty({n, 2});
  for (int i = 0; i < n; ++i) {
    rows.data()[2 * i] = static_cast<float>(id);
    rows.data()[2 * i + 1] = static_cast<float>(id * 10 + i);
  }
  return rows;
}

Tensor doubled(const Tensor& rows, const void* = nullptr) {
  Tensor out = rows.clone();
  for (int64_t i = 0; i < out.numel(); ++i) out.data()[i] *= 2;
  return out;
}

TEST(DynamicBatcher, ConcurrentRequestsShareBatchesAndGetTheirOwnRows) {
  std::mutex mutex;
  std::vector<int64_t> batches;
  BatchOptions o;
  o.max_batch = 8;
  o.max_delay_us = 200'000;  // long enough for every thread below to arrive
  DynamicBatcher batcher(doubled, o, [&](int64_t rows, double) {
    std::lock_guard<std::mutex> lock(mutex);
    batches.push_back(rows);
  });
  std::vector<std::future<BatchResult>> results(20);
  std::vector<std::thread> threads;
  for (int i = 0; i < 20; ++i) threads.emplace_back([&, i] { results[i] = batcher.submit(rows_of(i, 1 + i % 2)); });
  for (std::thread& t : threads) t.join();
  int64_t total = 0;
  for (int i = 0; i < 20; ++i) {
    const BatchResult r = results[i].get();
    EXPECT_EQ(r.output.to_vector(), doubled(rows_of(i, 1 + i % 2)).to_vector()) << "request " << i;
    EXPECT_LE(r.batch_rows, 8);
    total += 1 + i % 2;
  }
  std::lock_guard<std::mutex> lock(mutex);
  int64_t summed = 0;
  for (int64_t b : batches) {
    EXPECT_LE(b, 8);
    summed += b;
  }
  EXPECT_EQ(summed, total);
  EXPECT_LT(batches.size(), 20u) << "requests were batched together";
}

TEST(DynamicBatcher, RequestsOfDifferentContextsNeverShareABatch) {
  BatchOptions o;
  o.max_batch = 16;
  o.max_delay_us = 50'000;
  auto v1 = std::make_shared<int>(1), v2 = std::make_shared<int>(2);
  DynamicBatcher batcher(
      [](const Tensor& rows, const void* context) {
        Tensor out = rows.clone();
        for (int64_t i = 0; i < out.numel(); ++i) out.data()[i] += static_cast<float>(*static_cast<const int*>(context));
        return out;
      },
      o);
  auto a = batcher.submit(Tensor::full({1, 2}, 10), v1);
  auto b = batcher.submit(Tensor::full({1, 2}, 10), v2);
  auto c = batcher.submit(Tensor::full({1, 2}, 20), v1);
  const BatchResult ra = a.get(), rb = b.get(), rc = c.get();
  EXPECT_EQ(ra.output.to_vector(), (std::vector<float>{11, 11}));
  EXPECT_EQ(rb.output.to_vector(), (std::vector<float>{12, 12}));
  EXPECT_EQ(rc.output.to_vector(), (std::vector<float>{21, 21}));
  EXPECT_EQ(ra.batch_rows, 2) << "a and c share their context";
  EXPECT_EQ(rb.batch_rows, 1);
}

TEST(DynamicBatcher, RowsOfDifferentShapesNeverShareABatch) {
  BatchOptions o;
  o.max_batch = 16;
  o.max_delay_us = 50'000;
  DynamicBatcher batcher([&](const Tensor& rows, const void*) { return rows.clone(); }, o);
  auto three = batcher.submit(Tensor::full({1, 3}, 3));
  auto two = batcher.submit(Tensor::full({2, 2}, 2));
  auto three_again = batcher.submit(Tensor::full({1, 3}, 4));
  const BatchResult r3 = three.get();
  EXPECT_EQ(r3.output.to_vector(), (std::vector<float>{3, 3, 3}));
  EXPECT_EQ(r3.batch_rows, 2) << "the two [1, 3] requests share a pass";
  const BatchResult r2 = two.get();
  EXPECT_EQ(r2.output.shape(), (Shape{2, 2}));
  EXPECT_EQ(r2.batch_rows, 2) << "the [2, 2] request runs alone";
  EXPECT_EQ(three_again.get().output.to_vector(), (std::vector<float>{4, 4, 4}));
}

TEST(DynamicBatcher, AFullQueueRefusesAtOnceAndAFailedPassFailsOnlyItsRequests) {
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  BatchOptions o;
  o.max_batch = 1;
  o.max_delay_us = 0;
  o.max_queue = 2;
  DynamicBatcher batcher(
      [&](const Tensor& rows, const void*) {
        gate.wait();
        if (rows.data()[0] < 0) throw std::runtime_error("negative input");
        return rows.clone();
      },
      o);
  auto running = batcher.submit(rows_of(1));
  // Wait until the first request is in its (blocked) pass, so two more fill the queue.
  while (batcher.queue_depth() != 0) std::this_thread::yield();
  auto failing = batcher.submit(Tensor::full({1, 2}, -1));
  auto queued = batcher.submit(rows_of(2));
  EXPECT_THROW(batcher.submit(rows_of(3)), QueueFull);
  release.set_value();
  EXPECT_EQ(running.get().output.to_vector(), rows_of(1).to_vector());
  EXPECT_THROW(failing.get(), std::runtime_error);
  EXPECT_EQ(queued.get().output.to_vector(), rows_of(2).to_vector());
}

TEST(DynamicBatcher, StopRunsWhatWasQueuedAndRefusesTheRest) {
  BatchOptions o;
  o.max_batch = 4;
  o.max_delay_us = 10'000'000;  // only stop() ends the wait
  o.threads = 2;
  DynamicBatcher batcher(doubled, o);
  auto a = batcher.submit(rows_of(1));
  auto b = batcher.submit(rows_of(2));
  batcher.stop();
  EXPECT_EQ(a.get().output.to_vector(), doubled(rows_of(1)).to_vector());
  EXPECT_EQ(b.get().output.to_vector(), doubled(rows_of(2)).to_vector());
  EXPECT_THROW(batcher.submit(rows_of(3)), QueueFull);
}

}  // namespace
}  // namespace gradmesh::serve
