// Fault tolerance end to end, on the real binary, the real launcher and real
// signals: workers SIGKILLed mid-run (restart from disk and in-process
// recovery), SIGTERM preemption and resume, SIGSTOP hangs, corrupted
// checkpoints, a full disk, and resuming at another world size. The bar is
// bit-identical final weights against a run that never stopped.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "child_processes.h"
#include "run_command.h"

namespace gradmesh::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// The uninterrupted 2-worker run every fault run is compared with.
std::string baseline_weights(const TempDir& dir) {
  const pid_t launcher = spawn_launch("", workload("baseline"), dir.path(), "baseline");
  EXPECT_EQ(wait_exit(launcher, 300s), 0) << read_text(dir.file("baseline.err"));
  return read_text(dir.file("runs/baseline/model.safetensors"));
}

// Kills a random worker at a random moment (within 0.4 s) after each of the
// given checkpoint steps appears. The last point leaves 110 of the 300 steps,
// so the kill lands before the run ends even on a machine several times faster.
void kill_workers_at(pid_t launcher, const std::string& checkpoints, const std::vector<int64_t>& after_steps,
                     uint32_t seed) {
  std::mt19937 rng(seed);
  for (int64_t step : after_steps) {
    ASSERT_TRUE(wait_for_checkpoint(checkpoints, step, 240s)) << "no checkpoint of step " << step;
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));  // a random step before the next checkpoint
    std::vector<pid_t> workers = children_of(launcher);
    ASSERT_FALSE(workers.empty());
    const pid_t victim = workers[rng() % workers.size()];
    ::kill(victim, SIGKILL);
  }
}

class TrainingFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist not installed at " << kDataDir;
  }
  TempDir dir_;
};

TEST_F(TrainingFaults, ThreeKillsRestartFromDiskAndEndBitIdentical) {
  const std::string expected = baseline_weights(dir_);
  const pid_t launcher = spawn_launch("--max-restarts 3 --rdzv-id chaos", workload("chaos"), dir_.path(), "chaos");
  kill_workers_at(launcher, dir_.file("runs/chaos/checkpoints"), {50, 120, 190}, 7);
  ASSERT_EQ(wait_exit(launcher, 300s), 0) << read_text(dir_.file("chaos.err"));
  EXPECT_TRUE(read_text(dir_.file("runs/chaos/model.safetensors")) == expected)
      << "final weights differ from the uninterrupted run";
  const std::vector<nlohmann::json> restarts = events(dir_.file("runs/chaos/metrics.jsonl"), "restart");
  ASSERT_EQ(restarts.size(), 3u) << read_text(dir_.file("chaos.err"));
  for (const nlohmann::json& r : restarts) {
    ASSERT_TRUE(r.contains("steps_lost") && r["steps_lost"].is_number_integer()) << r.dump();
    ASSERT_TRUE(r.contains("seconds_to_first_step") && r["seconds_to_first_step"].is_number()) << r.dump();
    EXPECT_LE(r["steps_lost"].get<int64_t>(), 50) << r.dump();
    EXPECT_GE(r["seconds_to_first_step"].get<double>(), 0.0) << r.dump();
    EXPECT_FALSE(r.value("cause", "").empty()) << r.dump();
  }
}

TEST_F(TrainingFaults, ThreeKillsRecoveredInProcessLoseNoStep) {
  const std::string expected = baseline_weights(dir_);
  const pid_t launcher = spawn_launch("--max-restarts 3 --rdzv-id inproc",
                                      workload("inproc", "--set elastic.recovery=in-process"), dir_.path(), "inproc");
  kill_workers_at(launcher, dir_.file("runs/inproc/checkpoints"), {50, 120, 190}, 11);
  ASSERT_EQ(wait_exit(launcher, 300s), 0) << read_text(dir_.file("inproc.err"));
  EXPECT_TRUE(read_text(dir_.file("runs/inproc/model.safetensors")) == expected)
      << "final weights differ from the uninterrupted run";
  const std::vector<nlohmann::json> restarts = events(dir_.file("runs/inproc/metrics.jsonl"), "restart");
  ASSERT_EQ(restarts.size(), 3u) << read_text(dir_.file("inproc.err"));
  for (const nlohmann::json& r : restarts) {
    EXPECT_EQ(r.value("recovery", ""), "in-process") << r.dump();
    ASSERT_TRUE(r.contains("steps_lost") && r["steps_lost"].is_number_integer()) << r.dump();
    EXPECT_EQ(r["steps_lost"].get<int64_t>(), 0) << r.dump();
  }
}

// Two launchers (two "nodes", one worker each, gloo): the node whose worker
// dies replaces it, the other node's worker re-forms the group with it.
TEST_F(TrainingFaults, WorkerOfOneOfTwoNodesIsRecoveredInProcess) {
  const std::string gloo = "--set parallel.backend=gloo --set elastic.recovery=in-process";
  const pid_t single = spawn_launch("", workload("one", gloo), dir_.path(), "one");
  ASSERT_EQ(wait_exit(single, 300s), 0) << read_text(dir_.file("one.err"));
  const std::string expected = read_text(dir_.file("runs/one/model.safetensors"));

  const std::string node = "--nnodes 2 --nproc-per-node 1 --max-restarts 2 --rdzv-endpoint file://" +
                           dir_.file("store") + " --rdzv-id two";
  const pid_t a = spawn_launcher(node, workload("two", gloo), dir_.path(), "node_a");
  const pid_t b = spawn_launcher(node, workload("two", gloo), dir_.path(), "node_b");
  ASSERT_TRUE(wait_for_checkpoint(dir_.file("runs/two/checkpoints"), 50, 240s));
  pid_t victim = -1;
  for (pid_t launcher : {a, b})
    for (pid_t p : children_of(launcher))
      if (rank_of(p) == 1) victim = p;
  ASSERT_GT(victim, 0);
  ::kill(victim, SIGKILL);
  const int code_a = wait_exit(a, 300s), code_b = wait_exit(b, 300s);
  const std::string logs = read_text(dir_.file("node_a.err")) + read_text(dir_.file("node_b.err"));
  ASSERT_EQ(code_a, 0) << logs;
  ASSERT_EQ(code_b, 0) << logs;
  EXPECT_NE(logs.find("replacing it in place"), std::string::npos) << logs;
  EXPECT_TRUE(read_text(dir_.file("runs/two/model.safetensors")) == expected) << logs;
  const std::vector<nlohmann::json> restarts = events(dir_.file("runs/two/metrics.jsonl"), "restart");
  ASSERT_EQ(restarts.size(), 1u) << logs;
  EXPECT_EQ(restarts[0].value("recovery", ""), "in-process");
  EXPECT_EQ(restarts[0].value("failed_rank", -2), 1);
  EXPECT_EQ(restarts[0].value("steps_lost", int64_t{-1}), 0) << restarts[0].dump();
}

// --nnodes 1:2 and a node lost (its launcher and worker SIGKILLed): the
// survivor keeps its state and goes on alone as a world of one, losing no step.
TEST_F(TrainingFaults, LostNodeShrinksTheWorldInProcess) {
  const std::string node = "--nnodes 1:2 --nproc-per-node 1 --max-restarts 2 --heartbeat-timeout 2"
                           " --rdzv-last-call 5 --rdzv-endpoint file://" + dir_.file("store") + " --rdzv-id shrink";
  const std::string train = workload("shrink", "--set parallel.backend=gloo --set elastic.recovery=in-process");
  const pid_t a = spawn_launcher(node, train, dir_.path(), "node_a");
  const pid_t b = spawn_launcher(node, train, dir_.path(), "node_b");
  ASSERT_TRUE(wait_for_checkpoint(dir_.file("runs/shrink/checkpoints"), 50, 240s));
  pid_t lost_launcher = -1, lost_worker = -1;
  for (pid_t launcher : {a, b})
    for (pid_t p : children_of(launcher))
      if (rank_of(p) == 1) lost_launcher = launcher, lost_worker = p;
  ASSERT_GT(lost_worker, 0);
  ::kill(lost_launcher, SIGKILL);
  ::kill(lost_worker, SIGKILL);
  const pid_t survivor = lost_launcher == a ? b : a;
  EXPECT_EQ(wait_exit(lost_launcher, 10s), 128 + SIGKILL);
  const int code = wait_exit(survivor, 300s);
  const std::string logs = read_text(dir_.file("node_a.err")) + read_text(dir_.file("node_b.err"));
  ASSERT_EQ(code, 0) << logs;
  EXPECT_NE(logs.find("going on in process with 1 rank on 1 node"), std::string::npos) << logs;
  const std::string metrics = dir_.file("runs/shrink/metrics.jsonl");
  const std::vector<nlohmann::json> restarts = events(metrics, "restart");
  ASSERT_EQ(restarts.size(), 1u) << logs;
  EXPECT_EQ(restarts[0].value("recovery", ""), "in-process");
  EXPECT_EQ(restarts[0].value("steps_lost", int64_t{-1}), 0) << restarts[0].dump();
  const std::vector<nlohmann::json> resumed = events(metrics, "resume");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0].value("world_size", 0), 1);
  EXPECT_EQ(resumed[0].value("from", ""), "replica");
  const std::vector<nlohmann::json> summary = events(metrics, "summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0].value("steps", int64_t{0}), 300);
  EXPECT_EQ(summary[0].value("world_size", 0), 1) << "the ranks at the end";
  EXPECT_EQ(summary[0].value("restarts", 0), 1);
}

TEST_F(TrainingFaults, SigtermSavesExitsCleanlyAndResumesBitIdentical) {
  const std::string expected = baseline_weights(dir_);
  const pid_t launcher = spawn_launch("--rdzv-id pre", workload("pre"), dir_.path(), "pre");
  ASSERT_TRUE(wait_for_checkpoint(dir_.file("runs/pre/checkpoints"), 100, 240s));
  ::kill(launcher, SIGTERM);
  EXPECT_EQ(wait_exit(launcher, 60s), 128 + SIGTERM);
  const std::string err = read_text(dir_.file("pre.err"));
  EXPECT_NE(err.find("every worker stopped cleanly"), std::string::npos) << err;
  const std::vector<nlohmann::json> stopped = events(dir_.file("runs/pre/metrics.jsonl"), "stopped");
  ASSERT_EQ(stopped.size(), 1u) << err;
  const int64_t stop_step = stopped[0]["step"].get<int64_t>();
  EXPECT_EQ(newest_checkpoint(dir_.file("runs/pre/checkpoints")), stop_step) << "the stop step was saved";
  EXPECT_FALSE(fs::exists(dir_.file("runs/pre/model.safetensors")));

  const pid_t again = spawn_launch("--rdzv-id pre", workload("pre", "--resume auto"), dir_.path(), "pre2");
  ASSERT_EQ(wait_exit(again, 300s), 0) << read_text(dir_.file("pre2.err"));
  EXPECT_TRUE(read_text(dir_.file("runs/pre/model.safetensors")) == expected);
  const std::vector<nlohmann::json> resumed = events(dir_.file("runs/pre/metrics.jsonl"), "resume");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0]["step"].get<int64_t>(), stop_step);
  // The summary counts the whole run, both processes, not the resumed one alone.
  const std::vector<nlohmann::json> summary = events(dir_.file("runs/pre/metrics.jsonl"), "summary");
  const std::vector<nlohmann::json> uninterrupted = events(dir_.file("runs/baseline/metrics.jsonl"), "summary");
  ASSERT_EQ(summary.size(), 1u);
  ASSERT_EQ(uninterrupted.size(), 1u);
  EXPECT_EQ(summary[0]["samples"], uninterrupted[0]["samples"]) << summary[0].dump();
  EXPECT_LT(summary[0]["samples_this_process"].get<int64_t>(), summary[0]["samples"].get<int64_t>());
  EXPECT_EQ(summary[0]["checkpoints_saved"].get<size_t>(), events(dir_.file("runs/pre/metrics.jsonl"), "checkpoint").size())
      << "every save of both processes";
  EXPECT_NE(read_text(dir_.file("pre2.out")).find("the whole run: 0 restarts,"), std::string::npos)
      << read_text(dir_.file("pre2.out"));
}

// SIGTERM reaches one node only: every rank stops after the same step (the
// stop vote) and saves, but the run did not finish, so the other node must
// not report success: its worker exits 75, or its launcher follows node 0's
// failure, and neither is 0.
TEST_F(TrainingFaults, ANodeStoppedByAnotherNodesSigtermNeverExitsZero) {
  const std::string node = "--nnodes 2 --nproc-per-node 1 --rdzv-endpoint file://" + dir_.file("store") +
                           " --rdzv-id halt --dashboard off";
  const std::string train = workload("halt", "--set parallel.backend=gloo");
  const pid_t a = spawn_launcher(node + " --node-rank 0", train, dir_.path(), "node_a");
  const pid_t b = spawn_launcher(node + " --node-rank 1", train, dir_.path(), "node_b");
  ASSERT_TRUE(wait_for_checkpoint(dir_.file("runs/halt/checkpoints"), 50, 240s));
  ::kill(a, SIGTERM);
  const int code_a = wait_exit(a, 120s), code_b = wait_exit(b, 120s);
  const std::string logs = read_text(dir_.file("node_a.err")) + read_text(dir_.file("node_b.err"));
  EXPECT_EQ(code_a, 128 + SIGTERM) << logs;
  EXPECT_NE(code_b, 0) << logs;
  EXPECT_GT(code_b, 0) << logs;
  EXPECT_FALSE(fs::exists(dir_.file("runs/halt/model.safetensors"))) << "the run did not finish";
  EXPECT_EQ(events(dir_.file("runs/halt/metrics.jsonl"), "stopped").size(), 1u) << logs;
}

TEST_F(TrainingFaults, StoppedWorkerIsNamedAndTheJobRecovers) {
  const pid_t launcher = spawn_launch("--max-restarts 1 --heartbeat-timeout 3 --rdzv-id hang", workload("hang"),
                                      dir_.path(), "hang");
  ASSERT_TRUE(wait_for_checkpoint(dir_.file("runs/hang/checkpoints"), 50, 240s));
  pid_t stopped = -1;
  for (pid_t p : children_of(launcher))
    if (rank_of(p) == 1) stopped = p;
  ASSERT_GT(stopped, 0);
  ::kill(stopped, SIGSTOP);
  ASSERT_EQ(wait_exit(launcher, 300s), 0) << read_text(dir_.file("hang.err"));
  const std::string err = read_text(dir_.file("hang.err"));
  EXPECT_NE(err.find("rank 1 (pid " + std::to_string(stopped) + ") made no progress"), std::string::npos) << err;
  EXPECT_EQ(events(dir_.file("runs/hang/metrics.jsonl"), "restart").size(), 1u);
}

TEST_F(TrainingFaults, CorruptNewestCheckpointFallsBackToThePreviousOne) {
  CommandResult first = run_gradmesh("train " + workload("corrupt", "--set train.max_steps=100"), dir_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string newest = dir_.file("runs/corrupt/checkpoints/step-100/model.safetensors");
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    char byte = 0;
    f.read(&byte, 1);
    f.seekp(1000);
    byte = static_cast<char>(byte ^ 0x10);
    f.write(&byte, 1);
  }
  CommandResult again = run_gradmesh("train " + workload("corrupt", "--set train.max_steps=150 --resume auto"),
                                     dir_.path());
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("step-100"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("resuming from"), std::string::npos) << again.err;
  const std::vector<nlohmann::json> resumed = events(dir_.file("runs/corrupt/metrics.jsonl"), "resume");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0]["step"].get<int64_t>(), 50);
}

// A worker killed after the last step (during the final evaluation) leaves a
// checkpoint of that step: the resumed run evaluates and writes the same file.
TEST_F(TrainingFaults, ResumedAfterTheLastStepEvaluatesAndSavesTheSameWeights) {
  CommandResult first = run_gradmesh("train " + workload("end", "--set train.max_steps=100"), dir_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string expected = read_text(dir_.file("runs/end/model.safetensors"));
  fs::remove(dir_.file("runs/end/model.safetensors"));
  CommandResult again = run_gradmesh("train " + workload("end", "--set train.max_steps=100 --resume auto"), dir_.path());
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(read_text(dir_.file("runs/end/model.safetensors")) == expected) << "weights or their metadata differ";
  EXPECT_EQ(events(dir_.file("runs/end/metrics.jsonl"), "epoch").size(), 2u) << "the resumed run evaluates too";
}

// Without output.run_id the run directory is named after the launch's run
// id (so a restarted group writes into the same one), and checkpoint.dir
// puts the checkpoints elsewhere.
TEST_F(TrainingFaults, RunDirectoryIsNamedFromTheLaunchRunIdAndCheckpointDirIsHonoured) {
  const std::string args = "'" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set train.threads=1 --set output.dir=runs"
                           " --set data.limit_train=512 --set data.limit_test=64 --set train.max_steps=4"
                           " --set output.report=false --set output.trace_steps=0 --set checkpoint.every_steps=2"
                           " --set checkpoint.dir=" + dir_.file("elsewhere");
  const pid_t launcher = spawn_launch("--rdzv-id named-by-launch", args, dir_.path(), "named");
  ASSERT_EQ(wait_exit(launcher, 120s), 0) << read_text(dir_.file("named.err"));
  EXPECT_TRUE(fs::exists(dir_.file("runs/named-by-launch/metrics.jsonl"))) << read_text(dir_.file("named.err"));
  EXPECT_EQ(newest_checkpoint(dir_.file("elsewhere")), 4);
  EXPECT_FALSE(fs::exists(dir_.file("runs/named-by-launch/checkpoints")));
}

TEST_F(TrainingFaults, FullDiskLosesCheckpointsButNotTraining) {
  // Files may grow to 256 KiB: the metrics fit, a 7 MB checkpoint does not (EFBIG, not a crash).
  CommandResult r = run_shell("trap '' XFSZ && ulimit -f 256 && '" GRADMESH_BINARY "' train " +
                                  workload("full", "--set train.max_steps=120 --set output.save_weights=false"),
                              dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<nlohmann::json> summary = events(dir_.file("runs/full/metrics.jsonl"), "summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0]["steps"].get<int64_t>(), 120);
  EXPECT_EQ(summary[0]["checkpoints_failed"].get<int64_t>(), 2);
  EXPECT_EQ(newest_checkpoint(dir_.file("runs/full/checkpoints")), -1);
  for (const auto& entry : fs::directory_iterator(dir_.file("runs/full/checkpoints")))
    ADD_FAILURE() << "left behind: " << entry.path();
}

TEST_F(TrainingFaults, ResumeAtTwoWorkersFromOneAndBack) {
  CommandResult one = run_gradmesh("train " + workload("grow", "--set train.max_steps=100"), dir_.path());
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const pid_t two = spawn_launch("--rdzv-id grow", workload("grow", "--set train.max_steps=200 --resume auto"),
                                 dir_.path(), "grow");
  ASSERT_EQ(wait_exit(two, 300s), 0) << read_text(dir_.file("grow.err"));
  CommandResult back = run_gradmesh("train " + workload("grow", "--resume auto"), dir_.path());
  ASSERT_EQ(back.exit_code, 0) << back.err;
  const std::vector<nlohmann::json> resumed = events(dir_.file("runs/grow/metrics.jsonl"), "resume");
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed[0]["step"].get<int64_t>(), 100);
  EXPECT_EQ(resumed[0]["checkpoint_world_size"].get<int>(), 1);
  EXPECT_EQ(resumed[0]["world_size"].get<int>(), 2);
  EXPECT_EQ(resumed[1]["step"].get<int64_t>(), 200);
  EXPECT_EQ(resumed[1]["checkpoint_world_size"].get<int>(), 2);
  EXPECT_EQ(resumed[1]["world_size"].get<int>(), 1);
  const std::vector<nlohmann::json> summary = events(dir_.file("runs/grow/metrics.jsonl"), "summary");
  ASSERT_FALSE(summary.empty());
  EXPECT_EQ(summary.back()["steps"].get<int64_t>(), 300);  // 38400 / 128: the epoch, each batch once
}

}  // namespace
}  // namespace gradmesh::testing
