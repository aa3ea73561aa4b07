// The BF16 ring (gloo/bf16_ring.h) against a serial model of the arithmetic
// its header documents: chunk c of each segment starts from rank c+1's value
// and adds ranks c+2, ..., c in float32, rounding every partial sum to BF16
// (avg divides the last one by n first). Inputs are not integers, so a
// different order or number of roundings shows in the bits. Run directly on
// Gloo contexts (uneven chunks, fewer elements than ranks, several segments)
// and through the gloo backend, where every rank must end with the same bits.
//
// Also the measurement behind the one-host choice in gloo/process_group.h
// (disabled; loopback, GLOO_BENCH_WORLD ranks, default 2):
//   test_comm --gtest_also_run_disabled_tests --gtest_filter=GlooBench.*Bf16*
#include <gtest/gtest.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <latch>

#include "comm/collective_reference.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/gloo/algorithm_choice.h"
#include "gradmesh/comm/gloo/bf16_ring.h"
#include "gradmesh/comm/gloo/process_group.h"
#include "gradmesh/comm/gloo/ring_reduce_scatter.h"
#include "gradmesh/comm/gloo/store_adapter.h"
#include "gradmesh/core/bf16.h"
#include "support/temp_dir.h"

namespace gradmesh::comm {
namespace {

using gloo_backend::kBf16RingSegment;
using gloo_backend::RingChunks;
using testing::join_errors;
using TempDir = gradmesh::testing::TempDir;

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

// Rank r's element i: a BF16 value with a fractional part, different per rank.
uint16_t input_bits(int rank, int64_t i) {
  const double x = 0.37 * static_cast<double>(i) + 1.1 * rank;
  return float_to_bf16(static_cast<float>(std::sin(x) * (1.0 + rank) + 0.003 * static_cast<double>(i % 1000)));
}

std::vector<uint16_t> inputs_of(int rank, int64_t count) {
  std::vector<uint16_t> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = input_bits(rank, i);
  return values;
}

float apply(ReduceOp op, float a, float b) {
  if (op == ReduceOp::kMax) return a > b ? a : b;
  if (op == ReduceOp::kMin) return a < b ? a : b;
  return a + b;
}

// The bits the documented ring leaves on every rank.
std::vector<uint16_t> ring_model(int n, int64_t count, ReduceOp op, int64_t segment) {
  std::vector<uint16_t> out(static_cast<size_t>(count));
  for (int64_t offset = 0; offset < count; offset += segment) {
    const RingChunks chunks(std::min(segment, count - offset), n);
    for (int c = 0; c < n; ++c)
      for (int64_t j = chunks.begin(c); j < chunks.begin(c) + chunks.size(c); ++j) {
        const int64_t i = offset + j;
        uint16_t partial = input_bits((c + 1) % n, i);
        for (int k = 2; k <= n; ++k) {
          float value = apply(op, bf16_to_float(partial), bf16_to_float(input_bits((c + k) % n, i)));
          if (k == n && op == ReduceOp::kAvg) value /= static_cast<float>(n);
          partial = float_to_bf16(value);
        }
        out[static_cast<size_t>(i)] = partial;
      }
  }
  return out;
}

std::shared_ptr<gloo::rendezvous::Context> connect(const std::shared_ptr<Store>& store, int rank, int world) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
  context->setTimeout(std::chrono::seconds(30));
  gloo_backend::GlooStoreAdapter adapter(store, Millis(30'000));
  auto device = gloo::transport::tcp::CreateDevice(attr);
  context->connectFullMesh(adapter, device);
  return context;
}

// The first element where `got` differs from `want`, as text ("" when none).
std::string first_difference(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  if (got.size() != want.size()) return "sizes differ";
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      return "element " + std::to_string(i) + " is " + std::to_string(bf16_to_float(got[i])) + ", the ring gives " +
             std::to_string(bf16_to_float(want[i]));
  return "";
}

TEST(GlooBf16Ring, ChunksCoverTheCountEvenlyInOrder) {
  for (int n : {1, 2, 3, 4, 7})
    for (int64_t count : {0, 1, 2, 3, 6, 7, 100, 1'000'003}) {
      const RingChunks chunks(count, n);
      int64_t next = 0;
      for (int c = 0; c < n; ++c) {
        EXPECT_EQ(chunks.begin(c), next) << count << " on " << n;
        EXPECT_LE(chunks.size(c), chunks.largest());
        EXPECT_GE(chunks.size(c), chunks.largest() - 1);
        next += chunks.size(c);
      }
      EXPECT_EQ(next, count) << count << " on " << n;
    }
}

// Counts below the world size, not divisible by it, and split into several
// segments (the last one ragged), for every reduce op on 2-4 ranks.
TEST(GlooBf16Ring, AllreduceLeavesTheDocumentedBitsOnEveryRank) {
  struct Case {
    int64_t count, segment;
  };
  const std::vector<Case> cases = {{1, kBf16RingSegment}, {2, kBf16RingSegment}, {3, kBf16RingSegment},
                                   {5, kBf16RingSegment}, {7, 3},                {1'000, kBf16RingSegment},
                                   {1'000, 64},           {100'003, kBf16RingSegment}};
  for (int world : {2, 3, 4}) {
    TempDir dir;
    auto store = std::make_shared<FileStore>(dir.path());
    std::vector<std::string> failures(static_cast<size_t>(world));
    std::latch done(world);
    const auto errors = testing::run_rank_threads(world, [&](int rank) {
      auto context = connect(store, rank, world);
      std::vector<uint16_t> scratch;
      for (const Case& c : cases)
        for (ReduceOp op : kOps) {
          std::vector<uint16_t> data = inputs_of(rank, c.count);
          gloo_backend::bf16_ring_allreduce(*context, data.data(), c.count, op, std::chrono::seconds(30), scratch,
                                            c.segment);
          const std::string failure = first_difference(data, ring_model(world, c.count, op, c.segment));
          if (!failure.empty() && failures[static_cast<size_t>(rank)].empty())
            failures[static_cast<size_t>(rank)] = std::string(reduce_op_name(op)) + " of " + std::to_string(c.count) +
                                                  " in segments of " + std::to_string(c.segment) + ": " + failure;
        }
      // Close only when every rank is done: Gloo fails a peer's pending wait on a closed connection.
      done.arrive_and_wait();
    });
    EXPECT_EQ(join_errors(errors), "") << world << " ranks";
    EXPECT_EQ(join_errors(failures), "") << world << " ranks";
  }
}

// The reduce-scatter sends BF16 partials too: rank r's output is chunk r of
// the same ring (equal chunks of `count`).
TEST(GlooBf16Ring, ReduceScatterRoundsAtEachHop) {
  constexpr int kWorld = 3;
  constexpr int64_t kCount = 1'001;
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::vector<std::string> failures(kWorld);
  std::latch done(kWorld);
  const auto errors = testing::run_rank_threads(kWorld, [&](int rank) {
    auto context = connect(store, rank, kWorld);
    gloo_backend::RingScratch scratch;
    for (ReduceOp op : kOps) {
      const std::vector<uint16_t> in = inputs_of(rank, kWorld * kCount);
      std::vector<uint16_t> out(kCount);
      gloo_backend::ring_reduce_scatter(*context, in.data(), out.data(), kCount, DType::kBF16, op,
                                        std::chrono::seconds(30), scratch);
      const std::vector<uint16_t> model = ring_model(kWorld, kWorld * kCount, op, kBf16RingSegment);
      const std::vector<uint16_t> mine(model.begin() + rank * kCount, model.begin() + (rank + 1) * kCount);
      const std::string failure = first_difference(out, mine);
      if (!failure.empty() && failures[rank].empty()) failures[rank] = std::string(reduce_op_name(op)) + ": " + failure;
    }
    done.arrive_and_wait();
  });
  EXPECT_EQ(join_errors(errors), "");
  EXPECT_EQ(join_errors(failures), "");
}

// Through the backend on 3 and 4 ranks: every rank ends with the same bits,
// for counts that run the ring (the model's bits) and small ones that, with
// every peer on this host, run widened (algorithm_choice.h).
TEST(GlooBf16Ring, BackendLeavesIdenticalBitsOnEveryRank) {
  const std::vector<int64_t> counts = {1, 1'000, 65'537, 300'007};
  for (int world : {3, 4}) {
    TempDir dir;
    auto store = std::make_shared<FileStore>(dir.path());
    std::vector<std::vector<std::vector<uint16_t>>> results(static_cast<size_t>(world));  // [rank][case]
    const auto errors = testing::run_rank_threads(world, [&](int rank) {
      ProcessGroupOptions options;
      options.hostname = "127.0.0.1";
      options.timeout = Millis(30'000);
      auto group = make_gloo_process_group(store, rank, world, options);
      for (int64_t count : counts)
        for (ReduceOp op : kOps) {
          Tensor t = Tensor::zeros({count}, DType::kBF16);
          const std::vector<uint16_t> in = inputs_of(rank, count);
          std::memcpy(t.raw(), in.data(), in.size() * sizeof(uint16_t));
          AllreduceOptions reduce;
          reduce.op = op;
          group->allreduce(t, reduce)->wait();
          const auto* bits = static_cast<const uint16_t*>(t.raw());
          results[static_cast<size_t>(rank)].emplace_back(bits, bits + count);
        }
      group->barrier()->wait();
    });
    ASSERT_EQ(join_errors(errors), "") << world << " ranks";
    size_t index = 0;
    for (int64_t count : counts)
      for (ReduceOp op : kOps) {
        const bool ring = !gloo_backend::bf16_runs_widened(count, true, gloo_backend::kSyncMaxBytes);
        for (int r = 1; r < world; ++r)
          EXPECT_EQ(first_difference(results[static_cast<size_t>(r)][index], results[0][index]), "")
              << "rank " << r << " against rank 0, " << reduce_op_name(op) << " of " << count << " on " << world;
        if (ring) {
          EXPECT_EQ(first_difference(results[0][index], ring_model(world, count, op, kBf16RingSegment)), "")
              << reduce_op_name(op) << " of " << count << " on " << world << " ranks";
        }
        ++index;
      }
  }
}

// Per size: the median over 7 alternating rounds of the 16-bit ring and of
// the widened path (widen, the backend's float32 all-reduce, round), in
// microseconds per all-reduce.
TEST(GlooBench, DISABLED_Bf16RingAgainstWidened) {
  const char* world_text = std::getenv("GLOO_BENCH_WORLD");
  const int world = world_text ? std::atoi(world_text) : 2;
  TempDir dir;
  const std::string store_dir = dir.path();
  const auto outcomes = testing::run_rank_processes(
      world,
      [&](int rank) {
        auto store = std::make_shared<FileStore>(store_dir);
        ProcessGroupOptions options;
        options.hostname = "127.0.0.1";
        options.timeout = Millis(60'000);
        auto group = make_gloo_process_group(store, rank, world, options);
        auto context = connect(std::make_shared<PrefixStore>(store, "ring"), rank, world);
        if (rank == 0) std::printf("%10s %12s %12s\n", "bf16_bytes", "ring_us", "widened_us");
        for (int64_t bytes = 4096; bytes <= (int64_t{64} << 20); bytes *= 4) {
          const int64_t count = bytes / 2;
          std::vector<uint16_t> bits(static_cast<size_t>(count), float_to_bf16(1.0f)), scratch;
          Tensor wide = Tensor::empty({count});
          AllreduceOptions max;  // values stay put round after round
          max.op = ReduceOp::kMax;
          const std::function<void()> variants[2] = {
              [&] {
                gloo_backend::bf16_ring_allreduce(*context, bits.data(), count, ReduceOp::kMax,
                                                  std::chrono::seconds(60), scratch);
              },
              [&] {
                for (int64_t i = 0; i < count; ++i) wide.data()[i] = bf16_to_float(bits[static_cast<size_t>(i)]);
                group->allreduce(wide, max)->wait();
                for (int64_t i = 0; i < count; ++i) bits[static_cast<size_t>(i)] = float_to_bf16(wide.data()[i]);
              }};
          const int iterations = bytes < (int64_t{1} << 20) ? 50 : bytes < (int64_t{16} << 20) ? 10 : 3;
          std::vector<double> seconds[2];
          for (int round = 0; round < 7; ++round)
            for (int k = 0; k < 2; ++k) {
              const int v = round % 2 ? 1 - k : k;
              variants[v]();  // untimed: the first call after switching waits for the peers to switch too
              const auto start = std::chrono::steady_clock::now();
              for (int i = 0; i < iterations; ++i) variants[v]();
              seconds[v].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                                   iterations);
            }
          for (auto& s : seconds) std::sort(s.begin(), s.end());
          if (rank == 0)
            std::printf("%10lld %12.1f %12.1f\n", static_cast<long long>(bytes), seconds[0][3] * 1e6,
                        seconds[1][3] * 1e6);
          std::fflush(stdout);
        }
      },
      std::chrono::seconds(600));
  for (int r = 0; r < world; ++r) EXPECT_EQ(outcomes[r].exit_code, 0) << "rank " << r << ": " << outcomes[r].message;
}

}  // namespace
}  // namespace gradmesh::comm
