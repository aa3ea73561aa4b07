#include <gtest/gtest.h>

#include <cmath>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gradmesh/core/rng.h"
#include "gradmesh/core/thread_pool.h"

namespace gradmesh {
namespace {

TEST(Philox, KnownAnswer) {
  // Random123's published known-answer vector for philox4x32-10 with all-ones input.
  PhiloxBlock out = philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(out[0], 0x408f276du);
  EXPECT_EQ(out[1], 0x41c83b0eu);
  EXPECT_EQ(out[2], 0xa20bc7c6u);
  EXPECT_EQ(out[3], 0x6d5451fdu);
  PhiloxBlock zero = philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(zero[0], 0x6627e8d5u);
  EXPECT_EQ(zero[1], 0xe169c58du);
  EXPECT_EQ(zero[2], 0xbc57ac4cu);
  EXPECT_EQ(zero[3], 0x9b00dbd8u);
}

TEST(CounterRng, SameKeySameValueRegardlessOfThreads) {
  CounterRng rng(7, RngPurpose::kInit, 3);
  std::vector<float> serial(10000), threaded(10000);
  for (size_t i = 0; i < serial.size(); ++i) serial[i] = rng.normal(i);
  ThreadPool pool(4);
  pool.parallel_for(0, 10000, 1, [&](int, int64_t lo, int64_t hi) {
    for (int64_t i = hi - 1; i >= lo; --i) threaded[i] = rng.normal(i);  // reverse order on purpose
  });
  EXPECT_EQ(serial, threaded);
}

TEST(CounterRng, PurposesAndStepsAreIndependentStreams) {
  CounterRng a(0, RngPurpose::kInit, 0), b(0, RngPurpose::kShuffle, 0), c(0, RngPurpose::kInit, 1);
  EXPECT_NE(a.bits(0), b.bits(0));
  EXPECT_NE(a.bits(0), c.bits(0));
}

TEST(CounterRng, Distributions) {
  CounterRng rng(1, RngPurpose::kTest, 0);
  const int n = 200000;
  double sum = 0, sum_sq = 0, usum = 0;
  for (int i = 0; i < n; ++i) {
    const double x = rng.normal(i);
    sum += x;
    sum_sq += x * x;
    const float u = rng.uniform(i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    usum += u;
  }
  // Standard errors: mean 1/sqrt(n) ~ 0.0022; 5 sigma bounds.
  EXPECT_NEAR(sum / n, 0.0, 0.012);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.02);
  EXPECT_NEAR(usum / n, 0.5, 0.004);
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t v = rng.below(i, 10);
    ASSERT_LT(v, 10u);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(ThreadPool, ChunksCoverRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 7, 1000}) {
    std::vector<int> hits(n, 0);
    pool.parallel_for(0, n, 1, [&](int, int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) hits[i]++;
    });
    for (int h : hits) EXPECT_EQ(h, 1);
  }
}

// Several threads calling one pool at once (a server's inference threads
// sharing the compute pool) each get their whole range, chunked the same
// way, and nothing hangs. Before, the second caller overwrote the first
// one's job and both waited for ever.
TEST(ThreadPool, ConcurrentCallersEachGetTheirWholeRange) {
  ThreadPool pool(3);
  constexpr int kCallers = 4, kRounds = 200, kN = 999;
  std::vector<std::vector<int>> hits(kCallers, std::vector<int>(kN, 0));
  std::vector<std::vector<int>> chunk_of(kCallers, std::vector<int>(kN, -1));
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] {
      for (int round = 0; round < kRounds; ++round)
        pool.parallel_for(0, kN, 1, [&](int chunk, int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) {
            ++hits[static_cast<size_t>(c)][static_cast<size_t>(i)];
            chunk_of[static_cast<size_t>(c)][static_cast<size_t>(i)] = chunk;
          }
        });
    });
  for (std::thread& t : callers) t.join();
  std::vector<int> alone(kN, -1);
  pool.parallel_for(0, kN, 1, [&](int chunk, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) alone[static_cast<size_t>(i)] = chunk;
  });
  for (int c = 0; c < kCallers; ++c) {
    for (int h : hits[static_cast<size_t>(c)]) ASSERT_EQ(h, kRounds);
    EXPECT_EQ(chunk_of[static_cast<size_t>(c)], alone) << "the same split whoever ran it";
  }
}

// A loop whose caller's chunk throws still hands the pool back: the next
// loop runs on the workers again, not serialised on its caller.
TEST(ThreadPool, AThrowingLoopHandsThePoolBack) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(0, 300, 1,
                                 [&](int chunk, int64_t, int64_t) {
                                   if (chunk == 0) throw std::runtime_error("chunk 0 failed");
                                 }),
               std::runtime_error);
  std::mutex m;
  std::set<std::thread::id> ran_on;
  // Chunk i runs on worker i (chunk 0 on the caller), whatever the timing.
  pool.parallel_for(0, 300, 1, [&](int, int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(m);
    ran_on.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ran_on.size(), 3u);
}

}  // namespace
}  // namespace gradmesh
