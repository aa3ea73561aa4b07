// The mpi backend under a real mpirun: the test re-runs this binary as two MPI
// ranks (filter MpiWorker.*), which check every collective against values
// they can compute locally and exit non-zero on the first mismatch. Open MPI
// keeps allocations until exit by design, so leak detection is off for the
// MPI ranks in sanitizer builds.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

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

TEST(MpiBackend, CollectivesUnderMpirun) {
  if (launched_by_mpi()) GTEST_SKIP() << "this is an MPI worker";
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not installed (openmpi-bin)";
  for (int ranks : {2, 3}) {
    const std::string log = ::testing::TempDir() + "gradmesh_mpi_worker_" + std::to_string(ranks) + ".log";
    const std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0 timeout 120 mpirun "
                            "--oversubscribe -np " + std::to_string(ranks) + " '" + self_exe() +
                            "' --gtest_filter='MpiWorker.*' > '" + log + "' 2>&1";
    const int status = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "mpirun with " << ranks << " ranks failed; its output: " << read_log(log);
    std::remove(log.c_str());
  }
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

}  // namespace
}  // namespace gradmesh::comm
