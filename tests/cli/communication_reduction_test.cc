// PowerSGD and local SGD end to end on the real binary and launcher: a worker
// SIGKILLed mid-run restarts from the checkpoint and the run ends with the
// same weights as one that never stopped (the compression state and the
// outer momentum are in the checkpoint), and combinations that cannot work
// are refused with the key to change.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "child_processes.h"
#include "run_command.h"

namespace gradmesh::testing {
namespace {

using namespace std::chrono_literals;

// Trains `method` uninterrupted, then again with a worker killed after the
// step-100 checkpoint appears; the two runs' final weights must be the same bytes.
void expect_kill_and_restart_bit_identical(const std::string& method, const TempDir& dir) {
  const pid_t baseline = spawn_launch("", workload("straight", method), dir.path(), "straight");
  ASSERT_EQ(wait_exit(baseline, 300s), 0) << read_text(dir.file("straight.err"));
  const std::string expected = read_text(dir.file("runs/straight/model.safetensors"));
  ASSERT_FALSE(expected.empty());
  const pid_t launcher =
      spawn_launch("--max-restarts 1 --rdzv-id killed", workload("killed", method), dir.path(), "killed");
  const std::string checkpoint = dir.file("runs/killed/checkpoints/step-100/manifest.json");
  const auto deadline = std::chrono::steady_clock::now() + 240s;
  while (!std::filesystem::exists(checkpoint) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(std::filesystem::exists(checkpoint)) << read_text(dir.file("killed.err"));
  const std::vector<pid_t> workers = children_of(launcher);
  ASSERT_FALSE(workers.empty());
  ::kill(workers.back(), SIGKILL);
  ASSERT_EQ(wait_exit(launcher, 300s), 0) << read_text(dir.file("killed.err"));
  const std::string err = read_text(dir.file("killed.err"));
  EXPECT_NE(err.find("restart"), std::string::npos) << err;
  EXPECT_EQ(err.find("starts fresh"), std::string::npos) << "the communication state was not restored:\n" << err;
  EXPECT_TRUE(read_text(dir.file("runs/killed/model.safetensors")) == expected)
      << "final weights differ from the uninterrupted run";
  EXPECT_TRUE(std::filesystem::exists(dir.file("runs/killed/checkpoints/step-100/communication.safetensors")));
}

class CommunicationReduction : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist not installed at " << kDataDir;
  }
  TempDir dir_;
};

TEST_F(CommunicationReduction, PowerSgdRunKilledMidwayEndsBitIdentical) {
  expect_kill_and_restart_bit_identical("--set parallel.compression=powersgd --set parallel.powersgd_start_step=20",
                                        dir_);
}

TEST_F(CommunicationReduction, DiLoCoRunKilledMidwayEndsBitIdentical) {
  expect_kill_and_restart_bit_identical(
      "--set parallel.local_steps=8 --set parallel.outer_lr=0.7 --set parallel.outer_momentum=0.9", dir_);
}

TEST_F(CommunicationReduction, CombinationsThatCannotWorkAreRefusedWithTheKey) {
  const std::string train = "train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set output.dir=runs";
  expect_usage_errors(train, {
      {"--set parallel.compression=powersgd --set parallel.local_steps=4", "choose one"},
      {"--set parallel.compression=powersgd --set parallel.zero=1", "parallel.zero"},
      {"--set parallel.local_steps=4 --set parallel.comm_dtype=bf16", "parallel.comm_dtype"},
      {"--set parallel.local_steps=4 --set elastic.recovery=in-process", "elastic.recovery"},
      {"--set parallel.compression=topk", "parallel.compression"},
      {"--set parallel.powersgd_rank=0", "parallel.powersgd_rank"},
      {"--set parallel.outer_momentum=1", "parallel.outer_momentum"},
      {"--set parallel.local_steps=0", "parallel.local_steps"},
  }, dir_.path());
}

}  // namespace
}  // namespace gradmesh::testing
