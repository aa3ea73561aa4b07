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

// About 300 steps of a wider MLP on 2 local workers, checkpoints every 50.
std::string reduced_workload(const std::string& run_id, const std::string& method) {
  return "'" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set train.threads=1 --set output.dir=runs"
         " --set model.hidden=[1024,1024] --set data.limit_train=38400 --set data.limit_test=1000"
         " --set train.log_every=10 --set output.report=false --set output.trace_steps=0"
         " --set checkpoint.every_steps=50 --set checkpoint.keep_last=0 --set output.run_id=" +
         run_id + " " + method;
}

pid_t start_reduced_launch(const std::string& flags, const std::string& train_args, const std::string& workdir,
                           const std::string& log_name) {
  const std::string cmd = "cd '" + workdir + "' && exec env GRADMESH_PROGRESS=lines '" GRADMESH_BINARY
                          "' launch --nproc-per-node 2 " + flags + " -- '" GRADMESH_BINARY "' train " + train_args +
                          " > " + log_name + ".out 2> " + log_name + ".err";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int exit_code_within(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(20ms);
  }
}

// Trains `method` uninterrupted, then again with a worker killed after the
// step-100 checkpoint appears; the two runs' final weights must be the same bytes.
void expect_kill_and_restart_bit_identical(const std::string& method, const TempDir& dir) {
  const pid_t baseline = start_reduced_launch("", reduced_workload("straight", method), dir.path(), "straight");
  ASSERT_EQ(exit_code_within(baseline, 300s), 0) << read_text(dir.file("straight.err"));
  const std::string expected = read_text(dir.file("runs/straight/model.safetensors"));
  ASSERT_FALSE(expected.empty());
  const pid_t launcher =
      start_reduced_launch("--max-restarts 1 --rdzv-id killed", reduced_workload("killed", method), dir.path(), "killed");
  const std::string checkpoint = dir.file("runs/killed/checkpoints/step-100/manifest.json");
  const auto deadline = std::chrono::steady_clock::now() + 240s;
  while (!std::filesystem::exists(checkpoint) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(std::filesystem::exists(checkpoint)) << read_text(dir.file("killed.err"));
  const std::vector<pid_t> workers = children_of(launcher);
  ASSERT_FALSE(workers.empty());
  ::kill(workers.back(), SIGKILL);
  ASSERT_EQ(exit_code_within(launcher, 300s), 0) << read_text(dir.file("killed.err"));
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
