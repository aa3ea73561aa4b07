// Lazy connections in the gloo backend: the peer set of each algorithm
// (symmetric, small) for every group size to 300, then groups that connect
// lazily running every collective against the serial reference (Gloo's own
// algorithms would hit a missing pair and fail), send/recv in patterns where
// every rank sends first, sub-groups, fewer sockets than a full mesh, and a
// rank that never reaches the collective named in the error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <latch>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <vector>

#include "comm/collective_reference.h"
#include "comm/gloo_loopback.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/gloo/peer_sets.h"
#include "gradmesh/comm/gloo/process_group.h"
#include "gradmesh/core/error.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace gradmesh::comm {
namespace {

using gloo_backend::barrier_peers;
using gloo_backend::broadcast_peers;
using gloo_backend::halving_doubling_peers;
using gloo_backend::ring_peers;
using testing::CollectiveCase;
using testing::join_errors;
using TempDir = gradmesh::testing::TempDir;

ProcessGroupOptions lazy_loopback(Millis timeout = Millis(20'000)) {
  ProcessGroupOptions options = testing::loopback(timeout);
  options.lazy_connections = true;
  return options;
}

int ceil_log2(int n) {
  int bits = 0;
  while ((1 << bits) < n) ++bits;
  return bits;
}

// Every peer in range, not the rank itself, and listing the rank back.
std::string asymmetry(const char* name, int size, const std::function<std::vector<int>(int rank)>& peers_of) {
  for (int rank = 0; rank < size; ++rank) {
    for (int peer : peers_of(rank)) {
      if (peer < 0 || peer >= size || peer == rank)
        return std::string(name) + " size " + std::to_string(size) + ": rank " + std::to_string(rank) +
               " lists peer " + std::to_string(peer);
      const std::vector<int> back = peers_of(peer);
      if (std::find(back.begin(), back.end(), rank) == back.end())
        return std::string(name) + " size " + std::to_string(size) + ": rank " + std::to_string(rank) + " lists " +
               std::to_string(peer) + " but not the other way round";
    }
  }
  return "";
}

TEST(GlooPeerSets, SymmetricAndSmallForEveryGroupSize) {
  for (int size = 1; size <= 300; ++size) {
    ASSERT_EQ(asymmetry("ring", size, [&](int r) { return ring_peers(r, size); }), "");
    ASSERT_EQ(asymmetry("halving-doubling", size, [&](int r) { return halving_doubling_peers(r, size); }), "");
    ASSERT_EQ(asymmetry("barrier", size, [&](int r) { return barrier_peers(r, size); }), "");
    std::vector<int> roots = {0, size / 2, size - 1};
    if (size <= 40)
      for (int root = 0; root < size; ++root) roots.push_back(root);
    for (int root : roots) {
      ASSERT_EQ(asymmetry("broadcast", size, [&](int r) { return broadcast_peers(r, size, root); }), "")
          << "root " << root;
      // A tree: size - 1 edges that reach every rank from the root.
      size_t degrees = 0;
      std::vector<bool> reached(static_cast<size_t>(size), false);
      std::queue<int> todo;
      todo.push(root);
      reached[static_cast<size_t>(root)] = true;
      while (!todo.empty()) {
        const int r = todo.front();
        todo.pop();
        for (int peer : broadcast_peers(r, size, root)) {
          if (reached[static_cast<size_t>(peer)]) continue;
          reached[static_cast<size_t>(peer)] = true;
          todo.push(peer);
        }
      }
      for (int r = 0; r < size; ++r) degrees += broadcast_peers(r, size, root).size();
      EXPECT_EQ(degrees, static_cast<size_t>(2 * (size - 1))) << "size " << size << " root " << root;
      EXPECT_EQ(std::count(reached.begin(), reached.end(), true), size) << "size " << size << " root " << root;
    }
    // Halving-doubling: log2 + 2 pairs per rank on average. One rank may need
    // many more: in 2^k + 1 ranks the lone rank exchanges with all 2^k others.
    size_t halving_doubling_pairs = 0;
    for (int rank = 0; rank < size; ++rank) halving_doubling_pairs += halving_doubling_peers(rank, size).size();
    EXPECT_LE(halving_doubling_pairs, static_cast<size_t>(size * (ceil_log2(size) + 2))) << "size " << size;
    for (int rank = 0; rank < size; ++rank) {
      EXPECT_EQ(ring_peers(rank, size).size(), static_cast<size_t>(std::min(size - 1, 2)));
      EXPECT_LE(barrier_peers(rank, size).size(), static_cast<size_t>(2 * ceil_log2(size)));
      if ((size & (size - 1)) == 0) {  // a power of two: exactly the log2(size) XOR partners
        EXPECT_EQ(halving_doubling_peers(rank, size).size(), static_cast<size_t>(ceil_log2(size)));
      }
    }
  }
  // 6 = 4 + 2 ranks in two binary blocks; worked by hand from Gloo's code.
  EXPECT_EQ(halving_doubling_peers(0, 6), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(halving_doubling_peers(4, 6), (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(halving_doubling_peers(5, 6), (std::vector<int>{1, 3, 4}));
}

// Runs `body` on `world` ranks (threads) of one lazy gloo group over a fresh
// file store; each rank's body returns "" or what went wrong.
void on_lazy_group(int world, const std::function<std::string(ProcessGroup& group, int rank)>& body) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::vector<std::string> failures(world);
  const auto errors = testing::run_rank_threads(world, [&](int rank) {
    auto group = make_gloo_process_group(store, rank, world, lazy_loopback());
    failures[rank] = body(*group, rank);
  });
  EXPECT_EQ(join_errors(errors), "");
  EXPECT_EQ(join_errors(failures), "");
}

class GlooLazyWorld : public ::testing::TestWithParam<int> {};

// 12 MB float32 all-reduces run ring-chunked, smaller ones halving-doubling
// (two binary blocks or more for 3, 5, 6 and 7 ranks); BF16 all-reduces run
// the BF16 ring, broadcasts their binomial trees from two roots.
TEST_P(GlooLazyWorld, EveryCollectiveMatchesTheReference) {
  const int world = GetParam();
  std::vector<CollectiveCase> cases = testing::all_cases(world, {1, 7, 100'003});
  cases.push_back({testing::Collective::kAllreduce, world, DType::kF32, 3'000'001, ReduceOp::kSum});
  on_lazy_group(world, [&](ProcessGroup& group, int) {
    std::string first;
    for (const CollectiveCase& c : cases) {
      const std::string failure = testing::run_case(group, c);
      if (!failure.empty() && first.empty()) first = failure;
    }
    group.barrier()->wait();
    EXPECT_FALSE(group.broken());
    return first;
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooLazyWorld, ::testing::Values(2, 3, 5, 6, 7));

// Every rank sends to the next before it receives from the previous: a rank
// whose first message waited for its peer's would deadlock this ring.
TEST(GlooLazy, SendsBeforeReceivesAroundARing) {
  constexpr int kWorld = 4;
  on_lazy_group(kWorld, [&](ProcessGroup& group, int rank) {
    std::string failure;
    const int next = (rank + 1) % kWorld, prev = (rank + kWorld - 1) % kWorld;
    for (float round : {1.0f, 2.0f, 3.0f}) {
      Tensor out = Tensor::full({1000}, 100.0f * static_cast<float>(rank) + round);
      Tensor in = Tensor::zeros({1000});
      auto sent = group.send(out, next, 4);
      group.recv(in, prev, 4)->wait();
      sent->wait();
      if (in.to_vector()[999] != 100.0f * static_cast<float>(prev) + round)
        failure = "round " + std::to_string(round) + " got " + std::to_string(in.to_vector()[999]);
    }
    // Rank 0 posts three messages at once to the farthest rank, which has
    // used no pair with it yet: they are held back together until the pair
    // connects, and must still arrive in posting order.
    if (rank == 0) {
      std::vector<Tensor> messages;
      std::vector<std::shared_ptr<Work>> works;
      for (float v : {7.0f, 8.0f, 9.0f}) {
        messages.push_back(Tensor::full({2}, v));
        works.push_back(group.send(messages.back(), kWorld / 2, 5));
      }
      for (auto& w : works) w->wait();
    } else if (rank == kWorld / 2) {
      for (float v : {7.0f, 8.0f, 9.0f}) {
        Tensor t = Tensor::zeros({2});
        group.recv(t, 0, 5)->wait();
        if (t.to_vector()[1] != v)
          failure = "expected " + std::to_string(v) + ", got " + std::to_string(t.to_vector()[1]);
      }
    }
    group.barrier()->wait();
    return failure;
  });
}

TEST(GlooLazy, SubGroupsConnectLazilyToo) {
  on_lazy_group(5, [&](ProcessGroup& group, int rank) {
    std::string failure;
    auto odd = group.new_group({1, 3, 4});
    if (odd) {
      Tensor t = Tensor::full({5}, static_cast<float>(rank));
      odd->allreduce(t)->wait();
      if (t.to_vector()[4] != 8.0f) failure = "sub-group sum " + std::to_string(t.to_vector()[4]);
    }
    Tensor all = Tensor::full({3}, 1.0f);
    group.allreduce(all)->wait();
    if (all.to_vector()[0] != 5.0f) failure = "group sum " + std::to_string(all.to_vector()[0]);
    return failure;
  });
}

// TCP sockets this process holds (listening or connected).
int tcp_sockets() {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const auto target = std::filesystem::read_symlink(entry.path(), error);
    if (!error && target.string().rfind("socket:", 0) == 0) ++count;
  }
  return count;
}

// 8 ranks in threads of this process, each running a ring (all-gather) and a
// halving-doubling all-reduce: lazily the union of 2 ring and 3 XOR peers,
// against all 7 in a full mesh (and 7 more in the synchronous mesh).
TEST(GlooLazy, HoldsFewerSocketsThanAFullMesh) {
  constexpr int kWorld = 8;
  const auto sockets_while_running = [&](std::optional<bool> lazy) {
    TempDir dir;
    auto store = std::make_shared<FileStore>(dir.path());
    std::vector<int> counts(kWorld, 0);
    std::latch ran(kWorld), counted(kWorld);
    const auto errors = testing::run_rank_threads(kWorld, [&](int rank) {
      ProcessGroupOptions options = testing::loopback();
      options.lazy_connections = lazy;
      auto group = make_gloo_process_group(store, rank, kWorld, options);
      Tensor in = Tensor::full({4}, 1.0f), out = Tensor::zeros({4 * kWorld});
      group->allgather(in, out)->wait();
      group->allreduce(in)->wait();
      ran.arrive_and_wait();
      counts[rank] = tcp_sockets();
      counted.arrive_and_wait();
    });
    EXPECT_EQ(join_errors(errors), "");
    return *std::max_element(counts.begin(), counts.end());
  };
  const int before = tcp_sockets();
  const int full = sockets_while_running(false) - before;
  const int lazy = sockets_while_running(true) - before;
  // Both ends of every pair live in this process: a full mesh holds at least
  // 8 x 7 connected sockets; lazily, at most two sockets (connected, and the
  // pair's listening one) for each peer a rank's two algorithms address.
  int peers = 0;
  for (int rank = 0; rank < kWorld; ++rank) {
    std::set<int> used;
    for (int p : ring_peers(rank, kWorld)) used.insert(p);
    for (int p : halving_doubling_peers(rank, kWorld)) used.insert(p);
    peers += static_cast<int>(used.size());
  }
  EXPECT_GE(full, kWorld * (kWorld - 1)) << "full mesh";
  EXPECT_LE(lazy, 2 * peers) << "lazy, " << peers << " pair ends";
  EXPECT_LT(lazy * 2, full) << "lazy " << lazy << " against full " << full;
}

TEST(GlooLazy, ARankThatNeverArrivesIsNamed) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  constexpr int kWorld = 3;
  std::vector<std::string> messages(kWorld);
  const auto errors = testing::run_rank_threads(kWorld, [&](int rank) {
    auto group = make_gloo_process_group(store, rank, kWorld, lazy_loopback(Millis(1500)));
    if (rank == 2) return;  // never reaches the all-reduce
    Tensor t = Tensor::full({10}, 1.0f);
    try {
      group->allreduce(t)->wait();
      messages[rank] = "no error";
    } catch (const Error& e) {
      messages[rank] = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
    }
  });
  EXPECT_EQ(join_errors(errors), "");
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_NE(messages[rank].find("rank 2"), std::string::npos) << "rank " << rank << ": " << messages[rank];
}

TEST(GlooLazy, TheEnvironmentChoosesAndABadValueIsNamed) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  gradmesh::testing::ScopedEnv env("GRADMESH_GLOO_LAZY", "sometimes");
  const auto errors = testing::run_rank_threads(
      2, [&](int rank) { make_gloo_process_group(store, rank, 2, testing::loopback(Millis(2000))); });
  EXPECT_NE(errors[0].find("GRADMESH_GLOO_LAZY"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("GRADMESH_GLOO_LAZY"), std::string::npos) << errors[1];
}

}  // namespace
}  // namespace gradmesh::comm
