// The collective fingerprint check (CheckedProcessGroup) over the shm backend:
// matching calls pass through unchanged; mismatched collectives and
// point-to-point pairs fail at once, naming the ranks and both calls.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "comm/collective_reference.h"
#include "support/temp_dir.h"
#include "gradmesh/comm/checked_process_group.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm {
namespace {

using testing::Collective;
using testing::CollectiveCase;

using TempDir = ::gradmesh::testing::TempDir;

std::string failure_message_of(const std::shared_ptr<Work>& work) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

std::shared_ptr<ProcessGroup> checked_group(const std::string& dir, int rank, int world) {
  return make_checked(make_shm_process_group(std::make_shared<FileStore>(dir), rank, world, Millis(10'000)));
}

TEST(CheckedGroup, MatchingCallsGiveTheReferenceResults) {
  TempDir dir;
  constexpr int kWorld = 3;
  std::vector<std::string> failures(kWorld);
  const auto errors = testing::run_rank_threads(kWorld, [&](int rank) {
    auto group = checked_group(dir.path(), rank, kWorld);
    EXPECT_EQ(group->backend(), "shm");
    const std::vector<CollectiveCase> cases = {
        {Collective::kAllreduce, kWorld, DType::kF32, 1001, ReduceOp::kAvg},
        {Collective::kBroadcast, kWorld, DType::kBF16, 7, ReduceOp::kSum, 2},
        {Collective::kAllgather, kWorld, DType::kF32, 5},
        {Collective::kReduceScatter, kWorld, DType::kBF16, 9, ReduceOp::kMax},
    };
    for (const CollectiveCase& c : cases) {
      const std::string failure = testing::run_case(*group, c);
      if (!failure.empty()) failures[rank] = failure;
    }
    group->barrier()->wait();
    Tensor payload = Tensor::full({100}, static_cast<float>(rank));
    if (rank == 0) group->send(payload, 1, 7)->wait();
    if (rank == 1) {
      group->recv(payload, 0, 7)->wait();
      if (payload.to_vector()[99] != 0.0f) failures[rank] = "recv got the wrong payload";
    }
    auto pair = group->new_group({0, 2});
    if ((rank != 1) != (pair != nullptr)) failures[rank] = "new_group membership is wrong";
    if (pair) {
      const std::string failure = testing::run_case(*pair, {Collective::kAllreduce, 2, DType::kF32, 3, ReduceOp::kSum});
      if (!failure.empty()) failures[rank] = "sub-group: " + failure;
    }
    EXPECT_FALSE(group->broken());
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(failures[r], "") << "rank " << r;
  }
}

TEST(CheckedGroup, DifferentCollectivesAreNamed) {
  TempDir dir;
  std::vector<std::string> seen(2);
  bool broken[2] = {};  // not vector<bool>: ranks write concurrently
  const auto errors = testing::run_rank_threads(2, [&](int rank) {
    auto group = checked_group(dir.path(), rank, 2);
    group->barrier()->wait();
    Tensor t = Tensor::zeros({100});
    seen[rank] = failure_message_of(rank == 0 ? group->allreduce(t) : group->broadcast(t));
    broken[rank] = group->broken();
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  const std::string expected =
      "collective mismatch at #2: rank 0 called allreduce(f32 x 100, sum), rank 1 called broadcast(f32 x 100, root 0)";
  EXPECT_EQ(seen[0], expected);
  EXPECT_EQ(seen[1], expected);
  EXPECT_TRUE(broken[0] && broken[1]);
}

TEST(CheckedGroup, ADifferentCountOrOpIsNamedWithEveryRank) {
  TempDir dir;
  constexpr int kWorld = 4;
  std::vector<std::string> seen(kWorld);
  const auto errors = testing::run_rank_threads(kWorld, [&](int rank) {
    auto group = checked_group(dir.path(), rank, kWorld);
    Tensor t = Tensor::zeros({rank == 2 ? 101 : 100}, DType::kBF16);
    AllreduceOptions options;
    options.op = rank == 3 ? ReduceOp::kMax : ReduceOp::kSum;
    seen[rank] = failure_message_of(group->allreduce(t, options));
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  for (int r = 0; r < kWorld; ++r)
    EXPECT_EQ(seen[r],
              "collective mismatch at #1: ranks 0, 1 called allreduce(bf16 x 100, sum), rank 2 called "
              "allreduce(bf16 x 101, sum), rank 3 called allreduce(bf16 x 100, max)");
}

TEST(CheckedGroup, MismatchedPointToPointIsNamedByTheReceiver) {
  TempDir dir;
  std::string at_receiver;
  const auto errors = testing::run_rank_threads(2, [&](int rank) {
    auto group = checked_group(dir.path(), rank, 2);
    if (rank == 0) {
      failure_message_of(group->send(Tensor::zeros({10}), 1, 3));
    } else {
      Tensor in = Tensor::zeros({10});
      at_receiver = failure_message_of(group->recv(in, 0, 4));
    }
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(at_receiver,
            "point-to-point mismatch: rank 0 called send(f32 x 10 to rank 1, tag 3) as its send #1 to rank 1, "
            "rank 1 called recv(f32 x 10 from rank 0, tag 4) as its recv #1 from rank 0");
}

TEST(CheckedGroup, MismatchBetweenProcesses) {
  TempDir dir;
  const std::string store_dir = dir.path();
  const auto outcomes = testing::run_rank_processes(2, [&](int rank) {
    auto group = checked_group(store_dir, rank, 2);
    Tensor t = Tensor::zeros({64});
    Tensor gathered = Tensor::zeros({128});
    const std::string seen = failure_message_of(rank == 0 ? group->allgather(t, gathered) : group->allreduce(t));
    const std::string expected =
        "collective mismatch at #1: rank 0 called allgather(f32 x 64), rank 1 called allreduce(f32 x 64, sum)";
    if (seen != expected) throw std::runtime_error("unexpected: " + seen);
    // The group is broken now: later calls fail without communicating.
    auto later = group->barrier();
    if (!later->completed() || !later->error()) throw std::runtime_error("a call after the mismatch did not fail at once");
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(outcomes[r].exit_code, 0) << "rank " << r << ": " << outcomes[r].message;
}

}  // namespace
}  // namespace gradmesh::comm
