// The mpi backend under a real mpirun: the test re-runs this binary as two MPI
// ranks (filter MpiWorker.*), which check every collective against values
// they can compute locally and exit non-zero on the first mismatch. Open MPI
// keeps allocations until exit by design, so leak detection is off for the
// MPI ranks in sanitizer builds.
//
// The bytes a bf16 all-reduce puts on the wire are counted where nothing else
// talks: mpirun runs in a fresh network namespace (root only) with MPI's TCP
// transport over its loopback device, whose counters then see only this job.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <string>
#include <thread>

#include "comm/collective_reference.h"
#include "gradmesh/comm/mpi/process_group.h"
#include "gradmesh/core/bf16.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm {
namespace {

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

std::string read_log(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return "(no log)";
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return text;
}

// Runs this binary's tests matching `filter` as `ranks` MPI ranks; "" when
// mpirun exits 0, else its output. `prefix` goes before mpirun (e.g. "ip netns
// exec NAME"), `mca` after it.
std::string run_mpi_workers(int ranks, const std::string& filter, const std::string& prefix = "",
                            const std::string& mca = "") {
  const std::string log = ::testing::TempDir() + "gradmesh_mpi_worker_" + std::to_string(ranks) + ".log";
  const std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0 "
                          "timeout 120 " + prefix + " mpirun --oversubscribe -np " + std::to_string(ranks) + " " +
                          mca + " '" + self_exe() + "' --gtest_filter='" + filter + "' > '" + log + "' 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string output = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "" : "failed: " + read_log(log);
  std::remove(log.c_str());
  return output;
}

bool have_mpirun() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

TEST(MpiBackend, CollectivesUnderMpirun) {
  if (launched_by_mpi()) GTEST_SKIP() << "this is an MPI worker";
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed (openmpi-bin)";
  for (int ranks : {2, 3}) EXPECT_EQ(run_mpi_workers(ranks, "MpiWorker.*"), "") << "mpirun with " << ranks << " ranks";
}

// MpiWorker.Bf16SendsHalfTheBytesOfF32 in a network namespace of its own.
TEST(MpiBackend, Bf16TravelsAs16Bits) {
  if (launched_by_mpi()) GTEST_SKIP() << "this is an MPI worker";
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed (openmpi-bin)";
  if (::geteuid() != 0) GTEST_SKIP() << "counting MPI's bytes needs a network namespace, so root";
  const std::string name = "gmmpi" + std::to_string(::getpid());
  if (std::system(("ip netns add " + name + " && ip -n " + name + " link set lo up").c_str()) != 0) {
    std::system(("ip netns del " + name + " 2>/dev/null").c_str());
    GTEST_SKIP() << "cannot create a network namespace (iproute2 missing?)";
  }
  const std::string in_namespace = "ip netns exec " + name + " env GRADMESH_TEST_MPI_WIRE=1";
  const std::string over_tcp = "-x GRADMESH_TEST_MPI_WIRE --mca btl tcp,self --mca btl_tcp_if_include lo "
                               "--mca oob_tcp_if_include lo";
  const std::string result = run_mpi_workers(2, "MpiWorker.Bf16SendsHalfTheBytesOfF32", in_namespace, over_tcp);
  std::system(("ip netns del " + name).c_str());
  EXPECT_EQ(result, "");
}

TEST(MpiBackend, RefusesOutsideMpirun) {
  if (launched_by_mpi()) GTEST_SKIP() << "this is an MPI worker";
  EXPECT_THROW(make_mpi_process_group(Millis{1000}), Error);
}

// Runs only inside mpirun (the test above starts it).
TEST(MpiWorker, AllCollectives) {
  if (!launched_by_mpi()) GTEST_SKIP() << "runs only under mpirun";
  auto pg = make_mpi_process_group(Millis{30'000});
  const int r = pg->rank(), n = pg->size();
  ASSERT_EQ(pg->backend(), "mpi");

  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{1'000'003}}) {
    Tensor t = Tensor::empty({count});
    for (int64_t i = 0; i < count; ++i) t.data()[i] = static_cast<float>(r + 1) + static_cast<float>(i % 5);
    ASSERT_TRUE(pg->allreduce(t, {})->wait());
    const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(t.data()[i], ranks_sum + static_cast<float>(n * (i % 5))) << i;

    Tensor m = Tensor::full({count}, static_cast<float>(r));
    AllreduceOptions max_options;
    max_options.op = ReduceOp::kMax;
    ASSERT_TRUE(pg->allreduce(m, max_options)->wait());
    EXPECT_EQ(m.data()[count - 1], static_cast<float>(n - 1));
    AllreduceOptions avg_options;
    avg_options.op = ReduceOp::kAvg;
    Tensor a = Tensor::full({count}, static_cast<float>(r));
    ASSERT_TRUE(pg->allreduce(a, avg_options)->wait());
    EXPECT_FLOAT_EQ(a.data()[0], static_cast<float>(n - 1) / 2.0f);
  }
  Tensor h = Tensor::full({9}, static_cast<float>(r) + 0.5f).to(DType::kBF16);
  ASSERT_TRUE(pg->allreduce(h, {})->wait());
  EXPECT_EQ(h.to_vector()[0], static_cast<float>(n * n) / 2.0f);

  Tensor b = Tensor::full({5}, static_cast<float>(r * 10));
  BroadcastOptions bcast;
  bcast.root = n - 1;
  ASSERT_TRUE(pg->broadcast(b, bcast)->wait());
  EXPECT_EQ(b.data()[4], static_cast<float>((n - 1) * 10));

  Tensor in = Tensor::full({3}, static_cast<float>(r)), out = Tensor::empty({3 * n});
  ASSERT_TRUE(pg->allgather(in, out, {})->wait());
  for (int k = 0; k < n; ++k) EXPECT_EQ(out.data()[3 * k + 2], static_cast<float>(k));

  Tensor rs_in = Tensor::empty({2 * n}), rs_out = Tensor::empty({2});
  for (int k = 0; k < 2 * n; ++k) rs_in.data()[k] = static_cast<float>(k);
  ASSERT_TRUE(pg->reduce_scatter(rs_in, rs_out, {})->wait());
  EXPECT_EQ(rs_out.data()[1], static_cast<float>(n * (2 * r + 1)));

  ASSERT_TRUE(pg->barrier({})->wait());
  if (n >= 2 && r < 2) {
    Tensor msg = Tensor::full({4}, 42.0f);
    if (r == 0) {
      ASSERT_TRUE(pg->send(msg, 1, 7, {})->wait());
    } else {
      msg.fill(0);
      ASSERT_TRUE(pg->recv(msg, 0, 7, {})->wait());
      EXPECT_EQ(msg.data()[3], 42.0f);
    }
  }
  auto sub = pg->new_group({0, n - 1});
  if (r == 0 || r == n - 1) {
    ASSERT_NE(sub, nullptr);
    Tensor s = Tensor::full({2}, 1.0f);
    ASSERT_TRUE(sub->allreduce(s, {})->wait());
    EXPECT_EQ(s.data()[0], 2.0f);
  } else {
    EXPECT_EQ(sub, nullptr);
  }
  ASSERT_TRUE(pg->barrier({})->wait());
}

// The last rank skips all-reduce #2 until the others have timed out: their
// errors must name it. It then arrives late, which completes the requests the
// others abandoned, and a new group's barrier shows every rank can go on.
TEST(MpiWorker, TimeoutNamesTheRankThatNeverArrived) {
  if (!launched_by_mpi()) GTEST_SKIP() << "runs only under mpirun";
  auto pg = make_mpi_process_group(Millis{30'000});
  const int r = pg->rank(), n = pg->size();
  Tensor t = Tensor::full({100}, 1.0f);
  ASSERT_TRUE(pg->allreduce(t, {})->wait());
  if (r == n - 1) {
    std::this_thread::sleep_for(std::chrono::seconds(4));  // past the others' 1 s timeout and 1 s census
    EXPECT_TRUE(pg->allreduce(t, {})->wait());
  } else {
    AllreduceOptions quick;
    quick.timeout = Millis{1000};
    auto work = pg->allreduce(t, quick);
    std::string message = "(no error)";
    try {
      work->wait();
    } catch (const Error& e) {
      message = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    }
    std::string arrived = n == 2 ? "rank 0 did" : "ranks 0";
    for (int k = 1; k < n - 1; ++k) arrived += ", " + std::to_string(k);
    if (n > 2) arrived += " did";
    EXPECT_NE(message.find("mpi allreduce #2 (f32 x 100, sum): timed out after 1.0"), std::string::npos) << message;
    EXPECT_NE(message.find("rank " + std::to_string(n - 1) + " did not arrive (" + arrived + ")"), std::string::npos)
        << message;
    EXPECT_TRUE(pg->broken());
  }
  auto fresh = make_mpi_process_group(Millis{30'000});
  EXPECT_TRUE(fresh->barrier({})->wait());
}

// bf16 all-reduce and reduce-scatter, every reduce op, against the shared
// reference (integer inputs: every rounding is exact), and non-integer
// inputs that must leave every rank with the same bits.
TEST(MpiWorker, Bf16ReductionsMatchTheReference) {
  if (!launched_by_mpi()) GTEST_SKIP() << "runs only under mpirun";
  auto pg = make_mpi_process_group(Millis{30'000});
  const int n = pg->size();
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{100'003}})
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
      for (auto collective : {testing::Collective::kAllreduce, testing::Collective::kReduceScatter}) {
        const testing::CollectiveCase c{collective, n, DType::kBF16, count, op};
        EXPECT_EQ(testing::run_case(*pg, c), "");
      }
  const int64_t count = 10'001;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    Tensor t = Tensor::empty({count});
    for (int64_t i = 0; i < count; ++i)
      t.data()[i] = std::sin(static_cast<float>(i * (pg->rank() + 3))) * 1.37f + 0.01f * static_cast<float>(i % 7);
    t = t.to(DType::kBF16);
    AllreduceOptions options;
    options.op = op;
    ASSERT_TRUE(pg->allreduce(t, options)->wait());
    Tensor all = Tensor::zeros({n * count}, DType::kBF16);
    ASSERT_TRUE(pg->allgather(t, all, {})->wait());
    const auto* bits = static_cast<const uint16_t*>(all.raw());
    for (int k = 1; k < n; ++k)
      ASSERT_EQ(std::memcmp(bits, bits + k * count, static_cast<size_t>(count) * 2), 0)
          << "rank " << k << " ended a bf16 " << reduce_op_name(op) << " with other bits than rank 0";
  }
}

// Run by MpiBackend.Bf16TravelsAs16Bits (two ranks, TCP over a private loopback).
TEST(MpiWorker, Bf16SendsHalfTheBytesOfF32) {
  if (!launched_by_mpi() || std::getenv("GRADMESH_TEST_MPI_WIRE") == nullptr)
    GTEST_SKIP() << "runs only under mpirun in a network namespace (MpiBackend.Bf16TravelsAs16Bits)";
  auto pg = make_mpi_process_group(Millis{60'000});
  constexpr int64_t kCount = int64_t{4} << 20;
  uint64_t bytes[2] = {0, 0};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Tensor t = Tensor::full({kCount}, 1.0f).to(dtype);
    ASSERT_TRUE(pg->barrier({})->wait());
    const uint64_t before = testing::namespace_tx_bytes(/*loopback=*/true);
    ASSERT_TRUE(pg->allreduce(t, {})->wait());
    ASSERT_TRUE(pg->barrier({})->wait());
    bytes[dtype == DType::kBF16] = testing::namespace_tx_bytes(/*loopback=*/true) - before;
    EXPECT_EQ(t.to_vector()[kCount - 1], static_cast<float>(pg->size()));
  }
  if (pg->rank() == 0) std::printf("loopback bytes: f32 %llu, bf16 %llu\n", (unsigned long long)bytes[0],
                                   (unsigned long long)bytes[1]);
  EXPECT_GT(bytes[0], static_cast<uint64_t>(kCount) * 4) << "the f32 all-reduce did not cross the loopback device";
  // 0.75x, not 0.5x: the counters include headers and acknowledgements (see hier_test.cc).
  EXPECT_LE(static_cast<double>(bytes[1]), 0.75 * static_cast<double>(bytes[0]))
      << "a bf16 all-reduce sent " << bytes[1] << " bytes, the same f32 all-reduce " << bytes[0];
}

}  // namespace
}  // namespace gradmesh::comm
