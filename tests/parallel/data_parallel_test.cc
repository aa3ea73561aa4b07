// Data-parallel training with real worker processes started by the launcher:
// N workers must end where one process ends (the global batch is the same,
// only its split differs), reruns must be bit-identical, and bad setups must
// fail fast with an error naming the rank and the cause.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "cli/run_command.h"
#include "parallel/trained_weights.h"
#include "support/temp_dir.h"

namespace gradmesh {
namespace {

using testing::CommandResult;
using testing::have_dataset;
using testing::kDataDir;
using testing::run_shell;

// Small enough to keep the suite quick; 1000 samples in batches of 64 give a
// short last batch (40) each epoch, so uneven slices are exercised too.
const std::string kQuick =
    " --set data.limit_train=1000 --set train.epochs=4 --set train.max_steps=50 --set train.batch_size=64"
    " --set train.eval_every_epoch=false --set output.trace_steps=0 --set output.report=false --set output.dir=runs";
const std::string kMlp = "'" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set model.hidden=[64,32]";

std::string train_command(const std::string& config, int workers, const std::string& run_id,
                          const std::string& extra = "") {
  std::string command = "timeout -k 5 180 '" GRADMESH_BINARY "' train " + config + kQuick +
                        " --set output.run_id=" + run_id + " " + extra;
  if (workers > 0) command += " --nproc-per-node " + std::to_string(workers);
  return command;
}

// Trains (workers = 0: one plain process) and returns the final weights, flat.
std::vector<float> train(const testing::TempDir& dir, const std::string& config, int workers,
                         const std::string& run_id, const std::string& extra = "") {
  const CommandResult r = run_shell(train_command(config, workers, run_id, extra), dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string path = dir.path() + "/runs/" + run_id + "/model.safetensors";
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "no weights at " << path;
    return {};
  }
  return testing::weights_of(path);
}

using testing::relative_difference;

class DataParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist not installed at " << kDataDir;
  }
  testing::TempDir dir_;
};

// The launcher's path to the loop: worker processes over shm end where one
// process ends. Every strategy's own comparisons (CNNs, accumulation, bf16 on
// the wire, reruns, ZeRO) run in process in tests/train/training_loop_test.cc.
TEST_F(DataParallel, MlpWorkersMatchOneProcess) {
  const std::vector<float> one = train(dir_, kMlp, 0, "mlp1");
  for (int n : {2, 3}) {
    const std::vector<float> many = train(dir_, kMlp, n, "mlp" + std::to_string(n));
    EXPECT_LE(relative_difference(many, one), 1e-5) << n << " workers";
    EXPECT_NE(many, std::vector<float>{}) << n << " workers";
  }
}

TEST_F(DataParallel, UnderMpirunTheMpiBackendGivesTheSameResult) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not installed (openmpi-bin)";
  const std::vector<float> one = train(dir_, kMlp, 0, "one");
  // As root (CI), Open MPI needs --allow-run-as-root; --oversubscribe lets 3 ranks share 2 cores.
  // Open MPI keeps allocations until exit by design, so sanitizer builds skip leak checks in its ranks.
  const CommandResult r = run_shell("ASAN_OPTIONS=detect_leaks=0 timeout -k 5 180 mpirun --allow-run-as-root "
                                    "--oversubscribe -np 3 " +
                                        train_command(kMlp, 0, "mpi").substr(std::string("timeout -k 5 180 ").size()),
                                    dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("3 ranks over mpi"), std::string::npos) << r.err;
  EXPECT_LE(relative_difference(testing::weights_of(dir_.path() + "/runs/mpi/model.safetensors"), one), 1e-5);
}

// Rebalancing moves samples between ranks, never out of the global batch: the
// result stays within rounding of one process. Whether a log interval here
// changes the split depends on timing (a loaded machine usually does); the
// split changes themselves are tested deterministically in tests/data.
TEST_F(DataParallel, RebalancingAroundStragglersKeepsTheResult) {
  const std::vector<float> one = train(dir_, kMlp, 0, "one");
  const std::vector<float> rebalanced =
      train(dir_, kMlp, 3, "rebalanced", "--set parallel.straggler=rebalance --set train.log_every=2");
  ASSERT_FALSE(rebalanced.empty());
  EXPECT_LE(relative_difference(rebalanced, one), 1e-5);
  const std::string metrics = testing::read_file(dir_.path() + "/runs/rebalanced/metrics.jsonl");
  const size_t at = metrics.find("{\"type\":\"rebalance\"");
  if (at != std::string::npos) {
    EXPECT_NE(metrics.find("\"shares\":[0.", at), std::string::npos) << metrics.substr(at, 120);
  }
}

TEST_F(DataParallel, OutputsTraceAndReport) {
  const CommandResult r = run_shell(
      "timeout -k 5 180 '" GRADMESH_BINARY "' train " + kMlp +
          " --set data.limit_train=2000 --set data.limit_test=500 --set train.epochs=2 --set train.log_every=5"
          " --set output.dir=runs --set output.run_id=full --nproc-per-node 2",
      dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0]: trained 30 steps (3840 samples) on 2 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("report: runs/full/report.html"), std::string::npos) << r.out;
  const std::string run = dir_.path() + "/runs/full/";
  const std::string metrics = testing::read_file(run + "metrics.jsonl");
  for (const char* field : {"\"data_ms\":", "\"forward_ms\":", "\"backward_ms\":", "\"comm_ms\":", "\"optimizer_ms\":",
                            "\"step_ms_max\":", "\"world_size\":2", "\"test_accuracy\":", "\"exposed_comm_share\":"})
    EXPECT_NE(metrics.find(field), std::string::npos) << field;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string trace = testing::read_file(run + "trace.rank" + std::to_string(rank) + ".json");
    EXPECT_EQ(trace.rfind("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 0), 0u) << trace.substr(0, 80);
    EXPECT_NE(trace.find("\"name\":\"allreduce bucket 0\""), std::string::npos);
    EXPECT_NE(trace.find("\"name\":\"backward\""), std::string::npos);
  }
  const std::string report = testing::read_file(run + "report.html");
  EXPECT_NE(report.find("<svg"), std::string::npos);
  EXPECT_NE(report.find("rank 1"), std::string::npos);
  EXPECT_EQ(report.find(" src="), std::string::npos);  // self-contained: the renderer is inlined
  EXPECT_EQ(report.find("src=\"http"), std::string::npos);
}

// Two workers whose command lines differ by rank: `sh -c` sees RANK from the launcher.
CommandResult launch_per_rank(const testing::TempDir& dir, const std::string& per_rank_tail) {
  return run_shell("timeout -k 5 120 '" GRADMESH_BINARY "' launch --nproc-per-node 2 -- sh -c '\"" GRADMESH_BINARY
                   "\" train " GRADMESH_SOURCE_DIR "/examples/mlp.toml --set data.limit_train=256"
                   " --set train.max_steps=2 --set output.dir=runs " + per_rank_tail + "'",
                   dir.path());
}

TEST_F(DataParallel, MismatchedConfigsAreNamed) {
  const CommandResult r = launch_per_rank(dir_, "--set optim.lr=0.0$((RANK + 1))");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("config of rank 1 differs from rank 0's"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[optim] 'lr = 0.01' vs 'lr = 0.02'"), std::string::npos) << r.err;
}

TEST_F(DataParallel, MissingDatasetOnOneRankStopsEveryRank) {
  const CommandResult r = launch_per_rank(dir_, "$( [ $RANK = 1 ] && echo --set data.dir=/nonexistent/fmnist )");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent/fmnist"), std::string::npos) << r.err;
  // Rank 1 is named either way: the launcher names it when it exits first, and
  // when rank 0 learns of the failure first (a slower rank 1, e.g. under a
  // sanitizer) and exits, rank 0's error says "rank 1 could not start".
  EXPECT_TRUE(r.err.find("rank 1 (pid") != std::string::npos ||
              r.err.find("rank 1 could not start") != std::string::npos)
      << r.err;
}

TEST_F(DataParallel, GlobalBatchSmallerThanTheWorldIsAConfigError) {
  const CommandResult r =
      run_shell("timeout -k 5 120 '" GRADMESH_BINARY "' train " + kMlp + kQuick +
                    " --set train.batch_size=2 --set train.accum_steps=1 --nproc-per-node 3",
                dir_.path());
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("train.batch_size: 2 is smaller than the world size 3"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gradmesh
