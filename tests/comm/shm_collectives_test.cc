// The shm backend against the serial reference: every collective, dtype and
// reduce op on 1-4 ranks (threads sharing one segment), point to point,
// sub-groups, and the same on real forked processes.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>

#include "comm/collective_reference.h"
#include "comm/shm_segments.h"
#include "support/temp_dir.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/comm/shm/segment.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm {
namespace {

using testing::Collective;
using testing::CollectiveCase;

using TempDir = ::gradmesh::testing::TempDir;

using testing::leftover_segments;

using testing::all_cases;

using testing::join_errors;

class ShmWorld : public ::testing::TestWithParam<int> {};

TEST_P(ShmWorld, EveryCollectiveMatchesTheReference) {
  const int world = GetParam();
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  const std::vector<CollectiveCase> cases = all_cases(world, {1, 7, 1'000'003});
  std::vector<std::string> failures(world);
  const auto errors = testing::run_rank_threads(world, [&](int rank) {
    auto group = make_shm_process_group(store, rank, world, Millis(20'000));
    for (const CollectiveCase& c : cases) {
      const std::string failure = testing::run_case(*group, c);
      if (!failure.empty() && failures[rank].empty()) failures[rank] = failure;
    }
    group->barrier()->wait();
  });
  EXPECT_EQ(join_errors(errors), "");
  EXPECT_EQ(join_errors(failures), "");
  EXPECT_TRUE(leftover_segments(*store).empty());
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmWorld, ::testing::Values(1, 2, 3, 4));

TEST(ShmGroup, QueuedAndInlineOperationsKeepTheirOrder) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::vector<std::string> failures(2);
  const auto errors = testing::run_rank_threads(2, [&](int rank) {
    auto group = make_shm_process_group(store, rank, 2, Millis(20'000));
    const int64_t queued = ShmProcessGroup::kInlineBytes / sizeof(float) + 1001;  // over the inline limit
    failures[rank] = testing::check_queued_then_inline_order(*group, rank, queued);
  });
  EXPECT_EQ(join_errors(errors), "");
  EXPECT_EQ(join_errors(failures), "");
}

TEST(ShmGroup, SendRecvAroundARing) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  constexpr int kWorld = 3;
  std::vector<std::string> failures(kWorld);
  const auto errors = testing::run_rank_threads(kWorld, [&](int rank) {
    auto group = make_shm_process_group(store, rank, kWorld, Millis(20'000));
    const int next = (rank + 1) % kWorld, prev = (rank + kWorld - 1) % kWorld;
    // Sizes below, at and far above the two-chunk mailbox (large sends wait for the receiver).
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{65'536}, int64_t{1'000'003}}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        const CollectiveCase mine{Collective::kBroadcast, kWorld, dtype, count, ReduceOp::kSum, rank};
        const CollectiveCase theirs{Collective::kBroadcast, kWorld, dtype, count, ReduceOp::kSum, prev};
        Tensor out = testing::make_input(mine, rank);
        Tensor in = Tensor::zeros({count}, dtype);
        const int tag = static_cast<int>(count % 1000);
        // A chain: rank 0 sends first, every other rank receives first, so large sends never wait on each other.
        if (rank == 0) {
          group->send(out, next, tag)->wait();
          group->recv(in, prev, tag)->wait();
        } else {
          group->recv(in, prev, tag)->wait();
          group->send(out, next, tag)->wait();
        }
        const std::string failure = testing::compare_output(theirs, rank, in);
        if (!failure.empty()) failures[rank] = "recv: " + failure;
      }
    }
  });
  EXPECT_EQ(join_errors(errors), "");
  EXPECT_EQ(join_errors(failures), "");
}

TEST(ShmGroup, SubGroupsReduceAmongTheirMembers) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  constexpr int kWorld = 4;
  std::vector<std::string> failures(kWorld);
  const auto errors = testing::run_rank_threads(kWorld, [&](int rank) {
    auto group = make_shm_process_group(store, rank, kWorld, Millis(20'000));
    auto odd = group->new_group({1, 3});
    auto all = group->new_group({0, 1, 2, 3});
    if ((rank % 2 == 1) != (odd != nullptr)) failures[rank] = "membership of [1, 3] is wrong";
    if (odd) {
      EXPECT_EQ(odd->size(), 2);
      EXPECT_EQ(odd->rank(), rank / 2);
      // The sub-group's ranks 0 and 1 are world ranks 1 and 3: inputs follow the sub-group rank.
      const CollectiveCase c{Collective::kAllreduce, 2, DType::kF32, 1001, ReduceOp::kSum};
      const std::string failure = testing::run_case(*odd, c);
      if (!failure.empty()) failures[rank] = "[1, 3]: " + failure;
      auto nested = odd->new_group({1});
      if ((rank == 3) != (nested != nullptr)) failures[rank] = "membership of nested [1] is wrong";
    }
    const CollectiveCase c{Collective::kAllgather, kWorld, DType::kBF16, 33};
    const std::string failure = testing::run_case(*all, c);
    if (!failure.empty()) failures[rank] = "[0..3]: " + failure;
    group->barrier()->wait();
  });
  EXPECT_EQ(join_errors(errors), "");
  EXPECT_EQ(join_errors(failures), "");
  EXPECT_TRUE(leftover_segments(*store).empty());
}

TEST(ShmGroup, SeveralWorldGroupsOnOneStore) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  const auto errors = testing::run_rank_threads(2, [&](int rank) {
    auto first = make_shm_process_group(store, rank, 2, Millis(20'000));
    auto second = make_shm_process_group(store, rank, 2, Millis(20'000));
    if (static_cast<ShmProcessGroup&>(*first).segment_name() == static_cast<ShmProcessGroup&>(*second).segment_name())
      throw std::runtime_error("two groups share a segment");
    const CollectiveCase c{Collective::kAllreduce, 2, DType::kF32, 17, ReduceOp::kSum};
    for (auto* group : {second.get(), first.get()}) {
      const std::string failure = testing::run_case(*group, c);
      if (!failure.empty()) throw std::runtime_error(failure);
    }
  });
  EXPECT_EQ(join_errors(errors), "");
}

TEST(ShmGroup, InvalidArgumentsAreRejectedWhereTheCallIsMade) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  auto group = make_shm_process_group(store, 0, 1, Millis(5'000));
  Tensor in = Tensor::zeros({4}), wrong = Tensor::zeros({5});
  EXPECT_THROW(group->allgather(in, wrong), Error);
  EXPECT_THROW(group->reduce_scatter(wrong, in), Error);
  EXPECT_THROW(group->reduce_scatter(in, in), Error);  // overlapping
  BroadcastOptions bad_root;
  bad_root.root = 1;
  EXPECT_THROW(group->broadcast(in, bad_root), Error);
  EXPECT_THROW(group->send(in, 0, 0), Error);  // to itself
  EXPECT_THROW(group->new_group({0, 0}), Error);
  EXPECT_FALSE(group->broken());
}

TEST(ShmProcesses, CollectivesAcrossForkedRanks) {
  TempDir dir;
  constexpr int kWorld = 3;
  const std::string store_dir = dir.path();
  const auto outcomes = testing::run_rank_processes(kWorld, [&](int rank) {
    auto store = std::make_shared<FileStore>(store_dir);
    auto group = make_shm_process_group(store, rank, kWorld, Millis(20'000));
    const std::string name = static_cast<ShmProcessGroup&>(*group).segment_name();
    if (::access(("/dev/shm" + name).c_str(), F_OK) == 0) throw std::runtime_error(name + " was not unlinked");
    for (const CollectiveCase& c : all_cases(kWorld, {7, 1'000'003})) {
      if (c.op == ReduceOp::kMax || c.op == ReduceOp::kMin) continue;  // covered by the thread test
      const std::string failure = testing::run_case(*group, c);
      if (!failure.empty()) throw std::runtime_error(failure);
    }
    // Point to point between processes: rank 0 -> 1 -> 2, large enough to span many mailbox chunks.
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
  EXPECT_TRUE(leftover_segments(FileStore(dir.path())).empty());
}

}  // namespace
}  // namespace gradmesh::comm
