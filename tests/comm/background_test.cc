// CollectiveOptions::background on every backend with an inline path: a small
// all-reduce issued with it must return before its peers have joined (it is
// queued on the communication thread instead of blocking the caller) and
// still complete with the right result.
//
// No timing: rank 0 issues its background all-reduce and only then lets the
// other ranks issue theirs. Had the call run on rank 0's thread, it could not
// return before they joined: it would fail at the group's (short) timeout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <future>

#include "comm/collective_reference.h"
#include "comm/shm_segments.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/gloo/process_group.h"
#include "gradmesh/comm/hier/process_group.h"
#include "gradmesh/comm/shm/process_group.h"
#include "support/temp_dir.h"

namespace gradmesh::comm {
namespace {

using testing::Collective;
using testing::CollectiveCase;
using TempDir = gradmesh::testing::TempDir;

// Long enough for a loaded machine, short enough that an inline call (which
// waits for peers that wait for it) fails the test quickly instead of hanging.
constexpr Millis kTimeout{5'000};

// The all-reduces each rank issues: a small one (inline-sized) and one that
// is larger than the shm backend's single-handshake size.
std::vector<CollectiveCase> cases(int world) {
  return {{Collective::kAllreduce, world, DType::kF32, 7, ReduceOp::kSum},
          {Collective::kAllreduce, world, DType::kBF16, 20'003, ReduceOp::kAvg}};
}

// Rank 0 issues every case with background = true, checks that none has
// completed, then calls `release` so the other ranks (which call `await`
// first) issue theirs. Returns "" or what went wrong.
std::string run_background_rank(ProcessGroup& group, int rank, const std::function<void()>& release,
                                 const std::function<void()>& await) {
  const std::vector<CollectiveCase> all = cases(group.size());
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Work>> works;
  if (rank != 0) await();
  for (const CollectiveCase& c : all) {
    tensors.push_back(testing::make_input(c, rank));
    AllreduceOptions options;
    options.op = c.op;
    options.background = rank == 0;
    works.push_back(group.allreduce(tensors.back(), options));
  }
  std::string failure;
  if (rank == 0) {
    for (const auto& work : works)
      if (work->completed()) failure = work->description() + " completed before the other ranks issued theirs";
    release();
  }
  for (size_t i = 0; i < all.size(); ++i) {
    if (!works[i]->wait(kTimeout)) return works[i]->description() + " did not complete";
    const std::string mismatch = testing::compare_output(all[i], rank, tensors[i]);
    if (!mismatch.empty() && failure.empty()) failure = all[i].describe() + ": " + mismatch;
  }
  return failure;
}

// Runs run_background_rank on `world` threads, each building its group with `make`.
void expect_background_on_threads(int world, const std::function<std::shared_ptr<ProcessGroup>(int rank)>& make) {
  std::promise<void> issued;
  std::shared_future<void> released = issued.get_future().share();
  std::vector<std::string> failures(world);
  const auto errors = testing::run_rank_threads(world, [&](int rank) {
    auto group = make(rank);
    failures[rank] = run_background_rank(
        *group, rank, [&] { issued.set_value(); },
        [&] {
          // A guard against a hang only: rank 0 releases as soon as its call returns.
          if (released.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
            throw std::runtime_error("rank 0 never returned from its background all-reduce");
        });
    group->barrier()->wait();
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(failures[r], "") << "rank " << r;
  }
}

TEST(BackgroundOption, ShmQueuesSmallOperations) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  expect_background_on_threads(3, [&](int rank) { return make_shm_process_group(store, rank, 3, kTimeout); });
  EXPECT_TRUE(testing::leftover_segments(*store).empty());
}

TEST(BackgroundOption, GlooQueuesSmallOperations) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  ProcessGroupOptions options;
  options.hostname = "127.0.0.1";
  options.timeout = kTimeout;
  expect_background_on_threads(2, [&](int rank) { return make_gloo_process_group(store, rank, 2, options); });
}

TEST(BackgroundOption, HierRunsInTheBackground) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  ProcessGroupOptions options;
  options.hostname = "127.0.0.1";
  options.timeout = kTimeout;
  expect_background_on_threads(
      4, [&](int rank) { return make_hier_process_group(store, rank, 4, rank % 2, 2, options); });
}

TEST(BackgroundOption, ShmAcrossForkedRanks) {
  TempDir dir;
  const std::string store_dir = dir.path();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const auto outcomes = testing::run_rank_processes(
      2,
      [&](int rank) {
        auto group = make_shm_process_group(std::make_shared<FileStore>(store_dir), rank, 2, kTimeout);
        const std::string failure = run_background_rank(
            *group, rank,
            [&] {
              if (::write(fds[1], "x", 1) != 1) throw std::runtime_error("could not release rank 1");
            },
            [&] {
              char byte;  // run_rank_processes kills a rank that blocks here too long
              if (::read(fds[0], &byte, 1) != 1) throw std::runtime_error("rank 0 never released rank 1");
            });
        if (!failure.empty()) throw std::runtime_error(failure);
        group->barrier()->wait();
      },
      std::chrono::seconds(30));
  ::close(fds[0]);
  ::close(fds[1]);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].exit_code, 0) << "rank " << r << ": " << outcomes[r].message;
    EXPECT_EQ(outcomes[r].message, "");
  }
  EXPECT_TRUE(testing::leftover_segments(FileStore(dir.path())).empty());
}

}  // namespace
}  // namespace gradmesh::comm
