// Fault tolerance end to end through the real `gradmesh launch`: hang
// detection, restart records and in-process replacement on one node.
//
// Workers that must use the store run this test executable itself (the
// disabled ElasticWorker test below, chosen by GRADMESH_TEST_WORKER_MODE), so
// they use the real worker-side API: HeartbeatPublisher, read_restart_record,
// announce_in_process_recovery, read_current_generation.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <regex>
#include <thread>

#include "gradmesh/comm/store.h"
#include "gradmesh/core/env.h"
#include "gradmesh/elastic/heartbeat.h"
#include "gradmesh/elastic/restart_record.h"
#include "launcher_process.h"
#include "support/scoped_env.h"

namespace gradmesh::testing {
namespace {

using std::chrono::milliseconds;

std::string getenv_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

[[noreturn]] void step_forever(elastic::HeartbeatPublisher& hb, int64_t from) {
  for (int64_t step = from;; ++step) {
    hb.set_step(step);
    std::this_thread::sleep_for(milliseconds(50));
  }
}

// --- the worker program ----------------------------------------------------

// Rank 1 stops the moment its heartbeat shows step 5, so its beats and its
// progress stop together and the launcher must see the heartbeat stop. (It
// used to sleep 0.5 s first; a launcher poll inside that half second saw the
// progress stop before the beats and reported a stall instead, now and then.)
void freeze_worker(int rank, elastic::HeartbeatPublisher& hb, comm::Store& store, int generation) {
  if (rank != 1) step_forever(hb, 0);
  for (int step = 0; step <= 5; ++step) hb.set_step(step);
  const std::string key = elastic::heartbeat_key(getenv_or("GRADMESH_RUN_ID", ""), generation, rank);
  while (store.get(key, milliseconds(10'000)).rfind("5 ", 0) != 0) std::this_thread::sleep_for(milliseconds(2));
  ::raise(SIGSTOP);  // every thread stops: the heartbeat too
  step_forever(hb, 6);
}

void stuck_worker(int rank, elastic::HeartbeatPublisher& hb) {
  if (rank != 1) step_forever(hb, 0);
  hb.set_step(7);
  for (;;) std::this_thread::sleep_for(milliseconds(50));  // beats continue, no progress
}

int record_worker(comm::Store& store, int generation, elastic::HeartbeatPublisher& hb) {
  if (generation == 0) {
    hb.set_step(42);
    std::this_thread::sleep_for(milliseconds(1500));  // a few launcher polls see step 42
    return 3;
  }
  const auto record = elastic::read_restart_record(store, env_string("GRADMESH_RUN_ID"), generation);
  if (!record) return 9;
  std::cout << "record " << record->generation << " " << record->failed_rank << " " << record->exit_code << " "
            << record->last_step << " " << (record->failure_unix_ms > 0) << " " << record->cause << std::endl;
  return 0;
}

int in_process_worker(comm::Store& store, int rank, int generation) {
  const std::string run_id = env_string("GRADMESH_RUN_ID");
  elastic::announce_in_process_recovery(store, run_id);
  std::cout << "start gen=" << generation << " replacement=" << getenv_or("GRADMESH_REPLACEMENT", "?") << std::endl;
  if (rank == 1 && generation == 0) return 3;
  if (rank == 1) {
    std::cout << "replacement cause: " << elastic::read_restart_record(store, run_id, generation)->cause << std::endl;
    return 0;
  }
  while (elastic::read_current_generation(store, run_id) == generation) std::this_thread::sleep_for(milliseconds(20));
  std::cout << "survivor sees generation " << elastic::read_current_generation(store, run_id) << std::endl;
  return 0;
}

TEST(ElasticWorker, DISABLED_Run) {
  auto store = comm::open_store(env_string("GRADMESH_STORE"));
  auto hb = elastic::HeartbeatPublisher::from_environment(store);
  ASSERT_NE(hb, nullptr);
  const int rank = std::atoi(getenv_or("RANK", "-1").c_str());
  const int generation = std::atoi(getenv_or("GRADMESH_GENERATION", "-1").c_str());
  const std::string mode = getenv_or("GRADMESH_TEST_WORKER_MODE", "");
  std::cout.flush();
  if (mode == "freeze") freeze_worker(rank, *hb, *store, generation);
  if (mode == "stuck") stuck_worker(rank, *hb);
  if (mode == "record") std::_Exit(record_worker(*store, generation, *hb));
  if (mode == "in_process") std::_Exit(in_process_worker(*store, rank, generation));
  std::_Exit(99);
}

// --- the tests ---------------------------------------------------------------

std::vector<std::string> worker_launch(std::vector<std::string> flags) {
  static const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args = {"launch"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"--", self, "--gtest_also_run_disabled_tests", "--gtest_filter=ElasticWorker.DISABLED_Run"});
  return args;
}

TEST(LaunchHang, FrozenWorkerIsNamedAndTheGroupStopped) {
  TempDir dir;
  ScopedEnv mode("GRADMESH_TEST_WORKER_MODE", "freeze");
  ScopedEnv interval("GRADMESH_HEARTBEAT_INTERVAL", "0.1");
  // 8 s, not less: beside other tests on two busy cores, workers have taken
  // over 2 s (TSan) and over 4 s (ASan) to reach their first step, and were
  // then judged a hang with the frozen one.
  LauncherProcess launch(worker_launch({"--nproc-per-node", "2", "--heartbeat-timeout", "8", "--grace-period", "1"}),
                         dir.path(), "l");
  EXPECT_EQ(launch.wait(milliseconds(40'000)), 124) << launch.err();
  const std::regex line(
      R"(gradmesh launch: rank 1 \(pid \d+\) made no progress for 8\.0 s \(last step 5; heartbeat stopped\); stopped 2 workers)");
  EXPECT_TRUE(std::regex_search(launch.err(), line)) << launch.err();
}

TEST(LaunchHang, WorkerStuckWhileBeatingIsNamed) {
  TempDir dir;
  ScopedEnv mode("GRADMESH_TEST_WORKER_MODE", "stuck");
  ScopedEnv interval("GRADMESH_HEARTBEAT_INTERVAL", "0.1");
  LauncherProcess launch(worker_launch({"--nproc-per-node", "2", "--heartbeat-timeout", "2", "--grace-period", "1"}),
                         dir.path(), "l");
  EXPECT_EQ(launch.wait(milliseconds(30'000)), 124) << launch.err();
  const std::regex line(
      R"(rank 1 \(pid \d+\) made no progress for 2\.0 s \(last step 7; heartbeat continues, progress stalled\))");
  EXPECT_TRUE(std::regex_search(launch.err(), line)) << launch.err();
}

TEST(LaunchHang, WorkerThatNeverBeatsIsNotJudged) {
  TempDir dir;
  // Runs three times the timeout without any heartbeat (a program that knows nothing of gradmesh).
  LauncherProcess launch(launch_args({"--heartbeat-timeout", "1"}, "sleep 3; echo done"), dir.path(), "l");
  EXPECT_EQ(launch.wait(milliseconds(30'000)), 0) << launch.err();
  EXPECT_EQ(lines_with_prefix(launch.out(), "[rank 0]: "), std::vector<std::string>{"done"});
}

TEST(LaunchRestarts, RestartedWorkersReadTheRestartRecord) {
  TempDir dir;
  ScopedEnv mode("GRADMESH_TEST_WORKER_MODE", "record");
  ScopedEnv interval("GRADMESH_HEARTBEAT_INTERVAL", "0.1");
  LauncherProcess launch(worker_launch({"--max-restarts", "1"}), dir.path(), "l");
  EXPECT_EQ(launch.wait(milliseconds(30'000)), 0) << launch.err();
  const std::vector<std::string> records = lines_with_prefix(launch.out(), "[rank 0]: record ");
  ASSERT_EQ(records.size(), 1u) << launch.out();
  EXPECT_TRUE(std::regex_match(records[0], std::regex(R"(1 0 3 42 1 rank 0 \(pid \d+\) exited with status 3)")))
      << records[0];
}

TEST(LaunchInProcess, FailedWorkerIsReplacedAloneAndTheOthersKeepRunning) {
  TempDir dir;
  ScopedEnv mode("GRADMESH_TEST_WORKER_MODE", "in_process");
  LauncherProcess launch(worker_launch({"--nproc-per-node", "2", "--max-restarts", "2"}), dir.path(), "l");
  EXPECT_EQ(launch.wait(milliseconds(30'000)), 0) << launch.err();
  const std::string out = launch.out();
  // Rank 0 started once and lived on into generation 1.
  EXPECT_EQ(lines_with_prefix(out, "[rank 0]: start"), std::vector<std::string>{" gen=0 replacement=0"}) << out;
  EXPECT_EQ(lines_with_prefix(out, "[rank 0]: survivor sees generation "), std::vector<std::string>{"1"}) << out;
  EXPECT_EQ(lines_with_prefix(out, "[rank 1]: start"),
            (std::vector<std::string>{" gen=0 replacement=0", " gen=1 replacement=1"}))
      << out;
  const std::vector<std::string> cause = lines_with_prefix(out, "[rank 1]: replacement cause: ");
  ASSERT_EQ(cause.size(), 1u) << out;
  EXPECT_TRUE(std::regex_match(cause[0], std::regex(R"(rank 1 \(pid \d+\) exited with status 3)"))) << cause[0];
  const std::regex line(
      R"(gradmesh launch: rank 1 \(pid \d+\) exited with status 3; replacing it in place \(restart 1 of 2\), the other workers keep their state)");
  EXPECT_TRUE(std::regex_search(launch.err(), line)) << launch.err();
}

TEST(LaunchInProcess, WithoutTheAnnouncementTheGroupRestartsWhole) {
  TempDir dir;
  // Rank 1 fails in generation 0 once rank 0 has reported; rank 0 then waits to be stopped.
  const std::string script =
      "echo gen $GRADMESH_GENERATION replacement $GRADMESH_REPLACEMENT; [ $GRADMESH_GENERATION = 1 ] && exit 0; "
      "if [ $RANK = 1 ]; then while [ ! -e " + dir.file("ready_0") + " ]; do sleep 0.02; done; exit 3; fi; "
      "touch " + dir.file("ready_0") + "; while :; do sleep 0.05; done";
  LauncherProcess launch(launch_args({"--nproc-per-node", "2", "--max-restarts", "1"}, script), dir.path(), "l");
  EXPECT_EQ(launch.wait(), 0) << launch.err();
  EXPECT_EQ(lines_with_prefix(launch.out(), "[rank 0]: gen "),
            (std::vector<std::string>{"0 replacement 0", "1 replacement 0"}));
}

TEST(LaunchRestarts, RunIdStaysTheSameAcrossGenerations) {
  // `gradmesh train --nproc-per-node K` runs the launcher without --rdzv-id: the
  // fresh id must name every generation's run (the trainer's run directory).
  TempDir dir;
  LauncherProcess launch(launch_args({"--max-restarts", "2"}, "echo id $GRADMESH_RUN_ID; [ $GRADMESH_GENERATION = 2 ]"),
                         dir.path(), "l");
  EXPECT_EQ(launch.wait(), 0) << launch.err();
  const std::vector<std::string> ids = lines_with_prefix(launch.out(), "[rank 0]: id ");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0].size(), 12u);
  EXPECT_EQ(ids[1], ids[0]);
  EXPECT_EQ(ids[2], ids[0]);
}

TEST(LaunchRestarts, ALauncherInsideAWorkerStartsAtGenerationZero) {
  // A launcher started from a worker's environment inherits GRADMESH_GENERATION;
  // its own job still starts at generation 0.
  TempDir dir;
  ScopedEnv inherited("GRADMESH_GENERATION", "5");
  LauncherProcess launch(launch_args({}, "echo gen $GRADMESH_GENERATION"), dir.path(), "l");
  EXPECT_EQ(launch.wait(), 0) << launch.err();
  EXPECT_EQ(lines_with_prefix(launch.out(), "[rank 0]: "), std::vector<std::string>{"gen 0"});
}

}  // namespace
}  // namespace gradmesh::testing
