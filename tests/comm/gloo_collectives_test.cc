// The gloo backend against the serial reference: every collective, dtype and
// reduce op on 1-4 ranks (threads, loopback TCP), each of Gloo's three
// all-reduce algorithms through the object cache (including re-pointing a
// cached object at new memory), point to point, sub-groups, rendezvous
// through the store adapter, and the same collectives on forked processes.
#include <gtest/gtest.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <latch>
#include <random>
#include <thread>

#include "comm/collective_reference.h"
#include "comm/gloo_loopback.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/gloo/algorithm_choice.h"
#include "gradmesh/comm/gloo/allreduce_cache.h"
#include "gradmesh/comm/gloo/device.h"
#include "gradmesh/comm/gloo/process_group.h"
#include "gradmesh/comm/gloo/store_adapter.h"
#include "gradmesh/comm/gloo/transport_access.h"
#include "gradmesh/core/error.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace gradmesh::comm {
namespace {

using gloo_backend::AllreduceAlgorithm;
using testing::Collective;
using testing::CollectiveCase;
using TempDir = gradmesh::testing::TempDir;
using testing::loopback;
using ::gradmesh::testing::ScopedEnv;

using testing::all_cases;

using testing::join_errors;

class GlooWorld : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorld, EveryCollectiveMatchesTheReference) {
  const int world = GetParam();
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  // 65,536 floats (256 KiB) is the largest all-reduce run whole on the
  // synchronous connections here; 65,537 runs as a full 256 KiB piece and a
  // piece of one float, 1,000,003 as 15 full pieces and a ragged one
  // (loopback: every peer is on this host, allreduce_piece_bytes()).
  const std::vector<CollectiveCase> cases = all_cases(world, {1, 7, 65'536, 65'537, 1'000'003});
  std::vector<std::string> failures(world);
  const auto errors = testing::run_rank_threads(world, [&](int rank) {
    auto group = make_gloo_process_group(store, rank, world, loopback());
    EXPECT_EQ(group->backend(), "gloo");
    EXPECT_EQ(group->size(), world);
    EXPECT_EQ(group->rank(), rank);
    for (const CollectiveCase& c : cases) {
      const std::string failure = testing::run_case(*group, c);
      if (!failure.empty() && failures[rank].empty()) failures[rank] = failure;
    }
    group->barrier()->wait();
    EXPECT_FALSE(group->broken());
  });
  EXPECT_EQ(join_errors(errors), "");
  EXPECT_EQ(join_errors(failures), "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooWorld, ::testing::Values(1, 2, 3, 4));

// Each algorithm on each world size, driven directly through the cache: odd
// counts, random values (checked against a float64 sum and for bit-identical
// results across ranks), and a second buffer of the same count that the
// cached object must be re-pointed at.
TEST(GlooAllreduceCache, EveryAlgorithmOnEveryWorldSizeAndRebinding) {
  for (int world : {2, 3, 4}) {
    for (AllreduceAlgorithm algorithm :
         {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kRingChunked, AllreduceAlgorithm::kHalvingDoubling}) {
      SCOPED_TRACE(std::string(gloo_backend::algorithm_name(algorithm)) + " on " + std::to_string(world) + " ranks");
      TempDir dir;
      auto store = std::make_shared<FileStore>(dir.path());
      const std::vector<int64_t> counts = {1, 7, 1'000'003};
      std::vector<std::vector<std::vector<float>>> results(world);  // [rank][case] -> values
      std::latch done(world);
      const auto errors = testing::run_rank_threads(world, [&](int rank) {
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto device = gloo::transport::tcp::CreateDevice(attr);
        auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
        context->setTimeout(std::chrono::seconds(20));
        gloo_backend::GlooStoreAdapter adapter(store, Millis(20'000));
        context->connectFullMesh(adapter, device);
        gloo_backend::AllreduceCache cache(context);
        for (int64_t count : counts)
          for (int buffer = 0; buffer < 2; ++buffer) {
            std::vector<float> values(count);
            std::mt19937 random(static_cast<unsigned>(rank * 1000 + buffer * 7 + count));
            std::normal_distribution<float> normal;
            for (float& v : values) v = normal(random);
            cache.run(algorithm, values.data(), count, ReduceOp::kSum);
            results[rank].push_back(std::move(values));
          }
        EXPECT_EQ(cache.size(), static_cast<int>(counts.size()));
        // Close only when every rank is done: Gloo fails a peer's pending wait on a closed connection.
        done.arrive_and_wait();
      });
      ASSERT_EQ(join_errors(errors), "");
      size_t index = 0;
      for (int64_t count : counts)
        for (int buffer = 0; buffer < 2; ++buffer, ++index) {
          std::vector<double> want(count, 0.0);
          for (int r = 0; r < world; ++r) {
            std::mt19937 random(static_cast<unsigned>(r * 1000 + buffer * 7 + count));
            std::normal_distribution<float> normal;
            for (int64_t i = 0; i < count; ++i) want[i] += normal(random);
          }
          double worst = 0;
          for (int64_t i = 0; i < count; ++i) worst = std::max(worst, std::fabs(results[0][index][i] - want[i]));
          EXPECT_LT(worst, 1e-4) << "count " << count << ", buffer " << buffer;
          // Ring adds in a rank-dependent order; the others reduce each element once.
          if (algorithm != AllreduceAlgorithm::kRing || world == 2) {
            for (int r = 1; r < world; ++r)
              EXPECT_EQ(results[r][index], results[0][index]) << "rank " << r << ", count " << count;
          }
        }
    }
  }
}

TEST(GlooTransportAccess, ShutDownFailsBothSidesAtOnce) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::latch connected(2), shut(2);
  // One element per rank thread: not vector<bool>, whose elements share a word.
  std::vector<char> open_before(2), closed_after(2);
  const auto errors = testing::run_rank_threads(2, [&](int rank) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, 2);
    context->setTimeout(std::chrono::seconds(60));
    gloo_backend::GlooStoreAdapter adapter(store, Millis(20'000));
    context->connectFullMesh(adapter, device);
    const gloo_backend::PairSockets sockets(*context);
    open_before[rank] = sockets.all_open();
    connected.arrive_and_wait();
    if (rank == 0) sockets.shut_down();
    // Both sides must notice within a moment, not at Gloo's 60 s timeout.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (sockets.all_open() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    closed_after[rank] = !sockets.all_open();
    shut.arrive_and_wait();
  });
  EXPECT_EQ(join_errors(errors), "");
  EXPECT_EQ(open_before, std::vector<char>({true, true}));
  EXPECT_EQ(closed_after, std::vector<char>({true, true}));
}

TEST(GlooAllreduceChoice, RingOnlyForTwoRanksAndSmallMessages) {
  using gloo_backend::choose_allreduce_algorithm;
  EXPECT_EQ(choose_allreduce_algorithm(4096, 2), AllreduceAlgorithm::kRing);
  for (int ranks : {3, 4, 5, 8})
    for (size_t bytes : {size_t{4}, size_t{4096}, size_t{1} << 20, size_t{64} << 20})
      EXPECT_NE(choose_allreduce_algorithm(bytes, ranks), AllreduceAlgorithm::kRing) << ranks << " ranks, " << bytes;
  EXPECT_NE(choose_allreduce_algorithm(size_t{64} << 20, 2), AllreduceAlgorithm::kRing);
}

TEST(GlooAllreduceChoice, SynchronousOnlyWhatTheSendBufferHolds) {
  using gloo_backend::kSyncMaxBytes;
  using gloo_backend::runs_synchronously;
  using gloo_backend::sync_max_bytes_for;
  EXPECT_EQ(sync_max_bytes_for(0), gloo_backend::kSyncMaxBytesUnknownHost);
  EXPECT_EQ(sync_max_bytes_for(212'992), kSyncMaxBytes);  // Linux's default wmem_max: 4/3 of it is 277 KiB
  EXPECT_EQ(sync_max_bytes_for(size_t{4} << 20), kSyncMaxBytes);
  EXPECT_EQ(sync_max_bytes_for(65'536), size_t{87'380});  // 2 x 64 KiB of buffer holds 87,380 bytes 1.5 times
  EXPECT_TRUE(runs_synchronously(kSyncMaxBytes, AllreduceAlgorithm::kRing, kSyncMaxBytes));
  EXPECT_TRUE(runs_synchronously(4, AllreduceAlgorithm::kHalvingDoubling, kSyncMaxBytes));
  EXPECT_FALSE(runs_synchronously(kSyncMaxBytes + 4, AllreduceAlgorithm::kRing, kSyncMaxBytes));
  EXPECT_FALSE(runs_synchronously(4, AllreduceAlgorithm::kRingChunked, kSyncMaxBytes));
  EXPECT_FALSE(runs_synchronously(4, AllreduceAlgorithm::kRing, 0));
}

TEST(GlooAllreduceChoice, Bf16WidenedOnlyOnOneHostWithinOneSynchronousPiece) {
  using gloo_backend::bf16_runs_widened;
  using gloo_backend::kSyncMaxBytes;
  const int64_t piece = static_cast<int64_t>(kSyncMaxBytes / sizeof(float));  // float32 elements
  EXPECT_TRUE(bf16_runs_widened(1, true, kSyncMaxBytes));
  EXPECT_TRUE(bf16_runs_widened(piece, true, kSyncMaxBytes));
  EXPECT_FALSE(bf16_runs_widened(piece + 1, true, kSyncMaxBytes));
  EXPECT_FALSE(bf16_runs_widened(1, false, kSyncMaxBytes));  // across hosts: always 16 bits on the wire
  EXPECT_FALSE(bf16_runs_widened(1, true, 0));               // no synchronous connections
}

TEST(GlooAllreduceChoice, PiecesOnlyOnOneHostAndAboveTheSynchronousLimit) {
  using gloo_backend::allreduce_piece_bytes;
  using gloo_backend::kSyncMaxBytes;
  EXPECT_EQ(allreduce_piece_bytes(size_t{4} << 20, true, kSyncMaxBytes), kSyncMaxBytes);
  EXPECT_EQ(allreduce_piece_bytes(kSyncMaxBytes + 4, true, kSyncMaxBytes), kSyncMaxBytes);
  EXPECT_EQ(allreduce_piece_bytes(kSyncMaxBytes, true, kSyncMaxBytes), 0u);  // runs whole, synchronously
  EXPECT_EQ(allreduce_piece_bytes(size_t{4} << 20, false, kSyncMaxBytes), 0u);  // across hosts: whole
  EXPECT_EQ(allreduce_piece_bytes(size_t{4} << 20, true, 0), 0u);  // no synchronous connections
  EXPECT_EQ(allreduce_piece_bytes(size_t{4} << 20, true, 4096), 0u);  // pieces too small to pay off
  EXPECT_EQ(allreduce_piece_bytes(size_t{4} << 20, true, 87'380), 87'380u);
}

TEST(GlooGroup, LoopbackPeersAreOnThisHost) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::vector<std::string> plans(2);
  const auto errors = testing::run_rank_threads(2, [&](int rank) {
    auto group = make_gloo_process_group(store, rank, 2, loopback());
    plans[rank] = group->allreduce_algorithm(size_t{4} << 20);
  });
  EXPECT_EQ(join_errors(errors), "");
  for (const std::string& plan : plans) EXPECT_NE(plan.find(" KiB pieces"), std::string::npos) << plan;
}

TEST(GlooGroup, QueuedAndInlineOperationsKeepTheirOrder) {
  // The 300,001-float all-reduce is issued with `background`, so it is queued.
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::vector<std::string> failures(2);
  const auto errors = testing::run_rank_threads(2, [&](int rank) {
    auto group = make_gloo_process_group(store, rank, 2, loopback());
    failures[rank] = testing::check_queued_then_inline_order(*group, rank, 300'001);
  });
  EXPECT_EQ(join_errors(errors), "");
  EXPECT_EQ(join_errors(failures), "");
}

TEST(GlooGroup, PointToPointMatchesByTagAndKeepsOrder) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  constexpr int kWorld = 3;
  std::vector<std::string> failures(kWorld);
  const auto errors = testing::run_rank_threads(kWorld, [&](int rank) {
    auto group = make_gloo_process_group(store, rank, kWorld, loopback());
    const int next = (rank + 1) % kWorld, prev = (rank + kWorld - 1) % kWorld;
    // Every rank sends first and receives second: posted sends must not wait
    // for the peer's receive (nor behind each other), or this ring deadlocks.
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{1'000'003}}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        const CollectiveCase mine{Collective::kBroadcast, kWorld, dtype, count, ReduceOp::kSum, rank};
        const CollectiveCase theirs{Collective::kBroadcast, kWorld, dtype, count, ReduceOp::kSum, prev};
        Tensor out = testing::make_input(mine, rank);
        Tensor in = Tensor::zeros({count}, dtype);
        auto sent = group->send(out, next, 9);
        group->recv(in, prev, 9)->wait();
        sent->wait();
        const std::string failure = testing::compare_output(theirs, rank, in);
        if (!failure.empty()) failures[rank] = "ring recv: " + failure;
      }
    }
    // Two messages per tag on two tags, received in the opposite tag order.
    if (rank == 0) {
      std::vector<std::shared_ptr<Work>> works;
      for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) {
        Tensor t = Tensor::full({3}, v);
        works.push_back(group->send(t, 1, v <= 2.0f ? 100 : 200));
      }
      for (auto& w : works) w->wait();
    } else if (rank == 1) {
      std::vector<float> got;
      for (int tag : {200, 200, 100, 100}) {
        Tensor t = Tensor::zeros({3});
        group->recv(t, 0, tag)->wait();
        got.push_back(t.to_vector()[2]);
      }
      if (got != std::vector<float>({3, 4, 1, 2}))
        failures[rank] = "tags or order mixed up: got " + std::to_string(got[0]) + " " + std::to_string(got[1]) + " " +
                         std::to_string(got[2]) + " " + std::to_string(got[3]);
    }
    group->barrier()->wait();
  });
  EXPECT_EQ(join_errors(errors), "");
  EXPECT_EQ(join_errors(failures), "");
}

TEST(GlooGroup, SubGroupsReduceAmongTheirMembers) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  constexpr int kWorld = 4;
  std::vector<std::string> failures(kWorld);
  const auto errors = testing::run_rank_threads(kWorld, [&](int rank) {
    auto group = make_gloo_process_group(store, rank, kWorld, loopback());
    auto odd = group->new_group({1, 3});
    auto most = group->new_group({0, 1, 2});
    if ((rank % 2 == 1) != (odd != nullptr)) failures[rank] = "membership of [1, 3] is wrong";
    if (odd) {
      EXPECT_EQ(odd->size(), 2);
      EXPECT_EQ(odd->rank(), rank / 2);
      // Inputs follow the sub-group rank: world ranks 1 and 3 are its ranks 0 and 1.
      const CollectiveCase c{Collective::kAllreduce, 2, DType::kF32, 1001, ReduceOp::kSum};
      const std::string failure = testing::run_case(*odd, c);
      if (!failure.empty()) failures[rank] = "[1, 3]: " + failure;
      auto nested = odd->new_group({1});
      if ((rank == 3) != (nested != nullptr)) failures[rank] = "membership of nested [1] is wrong";
    }
    if (most) {
      const CollectiveCase c{Collective::kReduceScatter, 3, DType::kBF16, 33, ReduceOp::kMax};
      const std::string failure = testing::run_case(*most, c);
      if (!failure.empty()) failures[rank] = "[0, 1, 2]: " + failure;
    }
    const CollectiveCase c{Collective::kAllgather, kWorld, DType::kBF16, 33};
    const std::string failure = testing::run_case(*group, c);
    if (!failure.empty()) failures[rank] = "world after sub-groups: " + failure;
  });
  EXPECT_EQ(join_errors(errors), "");
  EXPECT_EQ(join_errors(failures), "");
}

TEST(GlooGroup, DestroyingRightAfterTheLastOperationDoesNotFailSlowerPeers) {
  // Without the goodbye in the destructor, a rank that closes its connections
  // right after its last all-reduce can fail a peer still finishing that one.
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  // (Without it this failed about every other run, 4 ranks, 10 rounds.)
  constexpr int kWorld = 4;
  const CollectiveCase c{Collective::kAllreduce, kWorld, DType::kF32, 1'000'003, ReduceOp::kSum};
  const auto errors = testing::run_rank_threads(kWorld, [&](int rank) {
    for (int round = 0; round < 10; ++round) {
      Tensor t = testing::make_input(c, rank);
      {
        auto group = make_gloo_process_group(store, rank, kWorld, loopback());
        testing::launch(*group, c, t, t)->wait();
      }  // destroyed at once; checked after
      const std::string failure = testing::compare_output(c, rank, t);
      if (!failure.empty()) throw std::runtime_error("round " + std::to_string(round) + ": " + failure);
    }
  });
  EXPECT_EQ(join_errors(errors), "");
}

TEST(GlooGroup, SeveralGroupsShareOneStore) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  const auto errors = testing::run_rank_threads(2, [&](int rank) {
    auto first = make_gloo_process_group(store, rank, 2, loopback());
    auto second = make_gloo_process_group(store, rank, 2, loopback());
    const CollectiveCase c{Collective::kAllreduce, 2, DType::kF32, 17, ReduceOp::kSum};
    for (auto* group : {second.get(), first.get()}) {
      const std::string failure = testing::run_case(*group, c);
      if (!failure.empty()) throw std::runtime_error(failure);
    }
  });
  EXPECT_EQ(join_errors(errors), "");
}

TEST(GlooGroup, InvalidArgumentsAreRejectedWhereTheCallIsMade) {
  TempDir dir;
  auto group = make_gloo_process_group(std::make_shared<FileStore>(dir.path()), 0, 1, loopback());
  Tensor in = Tensor::zeros({4}), wrong = Tensor::zeros({5});
  EXPECT_THROW(group->allgather(in, wrong), Error);
  EXPECT_THROW(group->reduce_scatter(wrong, in), Error);
  BroadcastOptions bad_root;
  bad_root.root = 1;
  EXPECT_THROW(group->broadcast(in, bad_root), Error);
  EXPECT_THROW(group->send(in, 0, 0), Error);  // to itself
  EXPECT_THROW(group->new_group({0, 0}), Error);
  EXPECT_THROW(make_gloo_process_group(std::make_shared<FileStore>(dir.path()), 2, 2, loopback()), Error);
  EXPECT_FALSE(group->broken());
}

TEST(GlooStoreAdapter, RendezvousKeysNameTheirRank) {
  EXPECT_EQ(gloo_backend::rank_of_rendezvous_key("3"), 3);
  EXPECT_EQ(gloo_backend::rank_of_rendezvous_key("rank_12"), 12);
  EXPECT_EQ(gloo_backend::rank_of_rendezvous_key("rank_"), -1);
  EXPECT_EQ(gloo_backend::rank_of_rendezvous_key("census/1/2"), -1);
  EXPECT_EQ(gloo_backend::rank_of_rendezvous_key("pair/3/5"), 3);  // PairMeshContext's keys
  EXPECT_EQ(gloo_backend::rank_of_rendezvous_key("pair/3"), -1);
}

TEST(GlooDevice, ListenAddressFollowsOptionsThenEnvironment) {
  ScopedEnv no_hostname("GRADMESH_HOSTNAME", nullptr);
  ScopedEnv master("MASTER_ADDR", "127.0.0.1");
  ProcessGroupOptions options;
  EXPECT_EQ(gloo_backend::choose_listen_address(options), "127.0.0.1");  // MASTER_ADDR is local
  {
    ScopedEnv configured("GRADMESH_HOSTNAME", "127.0.0.2");
    EXPECT_EQ(gloo_backend::choose_listen_address(options), "127.0.0.2");
    options.hostname = "127.0.0.3";
    EXPECT_EQ(gloo_backend::choose_listen_address(options), "127.0.0.3");
  }
  EXPECT_TRUE(gloo_backend::is_local_address("127.0.0.1"));
  EXPECT_FALSE(gloo_backend::is_local_address("192.0.2.1"));  // TEST-NET-1: never assigned
  EXPECT_FALSE(gloo_backend::is_local_address("no-such-host.invalid"));
  EXPECT_THROW(gloo_backend::create_device("192.0.2.1"), Error);
}

TEST(GlooProcesses, CollectivesAcrossForkedRanks) {
  TempDir dir;
  constexpr int kWorld = 3;
  const std::string store_dir = dir.path();
  const auto outcomes = testing::run_rank_processes(kWorld, [&](int rank) {
    auto group = make_gloo_process_group(std::make_shared<FileStore>(store_dir), rank, kWorld, loopback());
    for (const CollectiveCase& c : all_cases(kWorld, {7, 1'000'003})) {
      if (c.op == ReduceOp::kMax || c.op == ReduceOp::kMin) continue;  // covered by the thread test
      const std::string failure = testing::run_case(*group, c);
      if (!failure.empty()) throw std::runtime_error(failure);
    }
    Tensor payload = Tensor::full({300'007}, static_cast<float>(rank + 1));
    if (rank > 0) group->recv(payload, rank - 1, 5)->wait();
    if (rank + 1 < kWorld) group->send(payload, rank + 1, 5)->wait();
    if (payload.to_vector()[300'006] != 1.0f) throw std::runtime_error("recv got the wrong payload");
    group->barrier()->wait();
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(outcomes[r].exit_code, 0) << "rank " << r << ": " << outcomes[r].message;
    EXPECT_EQ(outcomes[r].message, "");
  }
}

}  // namespace
}  // namespace gradmesh::comm
