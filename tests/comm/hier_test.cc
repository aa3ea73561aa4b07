// The hier backend (shm inside a host, gloo between host leaders) as 2 hosts
// x 2 ranks in one process, then as 2 network namespaces x 2 processes (root
// only) to count the bytes that cross between hosts, and the backend
// registry's choices and errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include "collective_reference.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/hier/process_group.h"
#include "gradmesh/core/error.h"
#include "support/temp_dir.h"
#include "support/two_hosts.h"

namespace gradmesh::comm {
namespace {

using testing::Collective;
using testing::CollectiveCase;

// The shared cases plus broadcasts from every root: a root that is not its
// host's leader takes a different path than one that is.
std::vector<CollectiveCase> hier_cases(int world) {
  std::vector<CollectiveCase> cases = testing::all_cases(world, {1, 7, 100'003});
  for (DType dtype : {DType::kF32, DType::kBF16})
    for (int root = 1; root + 1 < world; ++root)
      cases.push_back({Collective::kBroadcast, world, dtype, 7, ReduceOp::kSum, root});
  return cases;
}

TEST(HierBackend, TwoHostsOfTwoRanksMatchTheReference) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  constexpr int kWorld = 4, kLocal = 2;
  const std::vector<CollectiveCase> cases = hier_cases(kWorld);
  std::vector<std::string> failures(kWorld);
  const auto errors = testing::run_rank_threads(kWorld, [&](int rank) {
    ProcessGroupOptions options;
    options.timeout = Millis(30'000);
    options.hostname = "127.0.0.1";
    auto group = make_hier_process_group(store, rank, kWorld, rank % kLocal, kLocal, options);
    EXPECT_EQ(group->backend(), "hier");
    for (const CollectiveCase& c : cases) {
      const std::string failure = testing::run_case(*group, c);
      if (!failure.empty() && failures[rank].empty()) failures[rank] = c.describe() + ": " + failure;
    }
    ASSERT_TRUE(group->barrier()->wait());
    // Point to point crosses hosts through the all-ranks gloo group.
    Tensor msg = Tensor::full({3}, static_cast<float>(rank));
    if (rank == 0) {
      ASSERT_TRUE(group->send(msg, 3, 5)->wait());
    } else if (rank == 3) {
      ASSERT_TRUE(group->recv(msg, 0, 5)->wait());
      EXPECT_EQ(msg.data()[2], 0.0f);
    }
    ASSERT_TRUE(group->barrier()->wait());
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(failures[r], "") << "rank " << r;
  }
}

// Only the leaders' stage crosses the link: a bf16 all-reduce must put at
// most 0.75x the bytes of the same f32 one there (counted, not timed).
// Payload alone would give 0.5x; the device counters also count TCP/IP
// headers, acknowledgements and any retransmission, which a slow run (a
// sanitizer build) inflates, so the bound is 0.75x: a bf16 tensor widened to
// float32 on the wire, as before, sends ~1.0x.
TEST(HierBackend, Bf16CrossesHostsAs16Bits) {
  gradmesh::testing::TwoHosts hosts("hb");
  std::string why;
  if (!hosts.create(&why)) GTEST_SKIP() << "cannot create network namespaces, skipping the two-host hier test: " << why;
  gradmesh::testing::TempDir dir;
  const std::string store_dir = dir.path();
  constexpr int kWorld = 4, kLocal = 2;
  const auto outcomes = testing::run_rank_processes(kWorld, [&](int rank) {
    const int host = rank / kLocal;
    hosts.enter(host);
    ProcessGroupOptions options;
    options.timeout = Millis(30'000);
    options.hostname = gradmesh::testing::TwoHosts::kAddress[host];
    auto group = make_hier_process_group(std::make_shared<FileStore>(store_dir), rank, kWorld, rank % kLocal, kLocal,
                                         options);
    constexpr int64_t kCount = int64_t{2} << 20;
    uint64_t sent[2] = {0, 0};  // f32, bf16
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const CollectiveCase c{Collective::kAllreduce, kWorld, dtype, kCount, ReduceOp::kAvg};
      Tensor t = testing::make_input(c, rank);
      group->barrier()->wait();
      const uint64_t before = testing::namespace_tx_bytes(/*loopback=*/false);
      testing::launch(*group, c, t, t)->wait();
      sent[dtype == DType::kBF16] = testing::namespace_tx_bytes(/*loopback=*/false) - before;
      const std::string failure = testing::compare_output(c, rank, t);
      if (!failure.empty()) throw std::runtime_error(failure);
      group->barrier()->wait();
    }
    if (rank % kLocal != 0) return;  // the other ranks' share of the count is nothing
    if (sent[0] < static_cast<uint64_t>(kCount) * 4)
      throw std::runtime_error("the f32 all-reduce sent only " + std::to_string(sent[0]) + " bytes between hosts");
    if (static_cast<double>(sent[1]) > 0.75 * static_cast<double>(sent[0]))
      throw std::runtime_error("a bf16 all-reduce sent " + std::to_string(sent[1]) + " bytes between hosts, the same "
                               "f32 all-reduce " + std::to_string(sent[0]) + ": bf16 must cross as 16 bits");
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(outcomes[r].exit_code, 0) << "rank " << r << ": " << outcomes[r].message;
    EXPECT_EQ(outcomes[r].message, "");
  }
}

TEST(HierBackend, RejectsUnevenHosts) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  EXPECT_THROW(make_hier_process_group(store, 0, 3, 0, 2, {}), Error);
}

TEST(BackendRegistry, UnknownAndMisplacedBackendsAreUsageErrors) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  ProcessGroupOptions options;
  options.backend = "nccl2";
  try {
    create_process_group(store, 0, 1, options);
    FAIL() << "an unknown backend must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("shm, gloo, hier, mpi"), std::string::npos) << e.what();
  }
  options.backend = "shm";
  options.local_size = 1;  // ranks spread over hosts: shared memory cannot span them
  EXPECT_THROW(create_process_group(store, 0, 2, options), Error);
}

TEST(BackendRegistry, AutoPicksSharedMemoryOnOneHost) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  const auto errors = testing::run_rank_threads(2, [&](int rank) {
    ProcessGroupOptions options;
    options.local_rank = rank;
    options.local_size = 2;
    options.timeout = Millis(10'000);
    auto group = create_process_group(store, rank, 2, options);
    EXPECT_EQ(group->backend(), "shm");
    Tensor t = Tensor::full({4}, 1.0f);
    ASSERT_TRUE(group->allreduce(t)->wait());
    EXPECT_EQ(t.data()[0], 2.0f);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

}  // namespace
}  // namespace gradmesh::comm
