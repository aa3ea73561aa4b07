// Restarts and elastic membership with several launchers ("nodes") on one
// machine sharing a file store, through the real `gradmesh launch`.
#include <signal.h>

#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "gradmesh/comm/file_store.h"
#include "launcher_process.h"

namespace gradmesh::testing {
namespace {

using std::chrono::milliseconds;

std::vector<std::string> node_flags(const TempDir& dir, const std::string& nnodes, const std::string& id,
                                    std::vector<std::string> more) {
  std::vector<std::string> flags = {"--nnodes", nnodes, "--rdzv-endpoint", "file://" + dir.file("store"), "--rdzv-id",
                                    id};
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

// Waits until `text()` contains `needle`; false after `timeout`.
template <typename F>
bool wait_for_text(F text, const std::string& needle, milliseconds timeout = milliseconds(20'000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (text().find(needle) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return true;
}

TEST(MultiNodeRestarts, BothNodesRestartTogetherAndTheRestartIsCountedOnce) {
  TempDir dir;
  // Rank 3 (node 1) fails in generation 0 once everyone runs; generation 1 succeeds everywhere.
  const std::string script = "echo gen $GRADMESH_GENERATION; touch " + dir.file("ready_") +
                             "$RANK; [ $GRADMESH_GENERATION != 0 ] && exit 0; if [ $RANK = 3 ]; then while [ ! -e " +
                             dir.file("ready_0") + " ]; do sleep 0.02; done; exit 5; fi; while :; do sleep 0.05; done";
  const auto flags = node_flags(dir, "2", "jobwide", {"--nproc-per-node", "2", "--max-restarts", "3"});
  LauncherProcess a(launch_args(flags, script), dir.path(), "a");
  LauncherProcess b(launch_args(flags, script), dir.path(), "b");
  EXPECT_EQ(a.wait(milliseconds(30'000)), 0) << a.err();
  EXPECT_EQ(b.wait(milliseconds(30'000)), 0) << b.err();
  for (LauncherProcess* node : {&a, &b}) {
    EXPECT_NE(node->err().find("restarting the workers (restart 1 of 3)"), std::string::npos) << node->err();
    EXPECT_EQ(node->err().find("restart 2 of 3"), std::string::npos) << "one failure, one restart: " << node->err();
    EXPECT_EQ(lines_with_prefix(node->out(), "[rank ").size(), 4u) << node->out();  // 2 workers x 2 generations
  }
  comm::FileStore store(dir.file("store"));
  EXPECT_EQ(store.get("jobwide/restarts"), "1");
  EXPECT_NE(store.get("jobwide/restart/1").find(R"("failed_rank":3)"), std::string::npos)
      << store.get("jobwide/restart/1");
}

TEST(MultiNodeRestarts, ExhaustedBudgetGivesUpOnEveryNodeWithTheWorkersCode) {
  TempDir dir;
  // Rank 1 (node 1) fails in every generation.
  const std::string script =
      "if [ $RANK = 1 ]; then sleep 0.2; exit 3; fi; while :; do sleep 0.05; done";
  const auto flags = node_flags(dir, "2", "spent", {"--max-restarts", "2"});
  LauncherProcess a(launch_args(flags, script), dir.path(), "a");
  LauncherProcess b(launch_args(flags, script), dir.path(), "b");
  EXPECT_EQ(a.wait(milliseconds(30'000)), 3) << a.err();
  EXPECT_EQ(b.wait(milliseconds(30'000)), 3) << b.err();
  const std::regex failed(
      R"(rank 1 \(node 1, pid \d+\) exited with status 3; no other workers were running; restart budget exhausted \(2 of 2 restarts used\); giving up)");
  const std::regex stopped(
      R"(because another node stopped: rank 1 \(node 1, pid \d+\) exited with status 3; restart budget exhausted \(2 of 2 restarts used\); giving up)");
  const std::string errs = a.err() + b.err();
  EXPECT_TRUE(std::regex_search(errs, failed)) << errs;
  EXPECT_TRUE(std::regex_search(errs, stopped)) << errs;
  EXPECT_EQ(comm::FileStore(dir.file("store")).get("spent/restarts"), "2");
}

TEST(ElasticNodes, RunsWithMinWhenTheOtherNodeNeverComes) {
  TempDir dir;
  LauncherProcess a(launch_args(node_flags(dir, "1:2", "alone", {"--rdzv-last-call", "0.5"}),
                                "echo world $WORLD_SIZE nodes $GROUP_WORLD_SIZE"),
                    dir.path(), "a");
  EXPECT_EQ(a.wait(milliseconds(30'000)), 0) << a.err();
  EXPECT_EQ(lines_with_prefix(a.out(), "[rank 0]: "), std::vector<std::string>{"world 1 nodes 1"});
}

TEST(ElasticNodes, TooFewNodesWithinTheJoinTimeoutFail) {
  TempDir dir;
  LauncherProcess a(launch_args(node_flags(dir, "2:3", "few", {"--join-timeout", "0.5"}), "true"), dir.path(), "a");
  EXPECT_EQ(a.wait(milliseconds(30'000)), 1) << a.err();
  EXPECT_NE(a.err().find("fewer than the 2 that --nnodes 2:3 needs"), std::string::npos) << a.err();
}

TEST(ElasticNodes, SurvivorsContinueWhenANodeIsLost) {
  TempDir dir;
  // Generation 0 runs until stopped; generation 1 reports its size and ends.
  const std::string script = "echo gen $GRADMESH_GENERATION world $WORLD_SIZE; [ $GRADMESH_GENERATION != 0 ] && exit 0; "
                             "touch " + dir.file("ready_") + "$RANK; while :; do sleep 0.05; done";
  const auto flags = node_flags(dir, "1:2", "lost", {"--max-restarts", "1", "--heartbeat-timeout", "2",
                                                      "--rdzv-last-call", "2", "--grace-period", "1"});
  LauncherProcess a(launch_args(flags, script), dir.path(), "a");
  LauncherProcess b(launch_args(flags, script), dir.path(), "b");
  ASSERT_TRUE(wait_for_files({dir.file("ready_0"), dir.file("ready_1")}, milliseconds(20'000))) << a.err() << b.err();
  // b's launcher dies without a word (its workers die with it): a must notice by itself.
  b.signal(SIGKILL);
  EXPECT_EQ(b.wait(), 128 + SIGKILL);
  EXPECT_EQ(a.wait(milliseconds(30'000)), 0) << a.err();
  EXPECT_NE(a.err().find("launcher stopped responding (no keep-alive in the store for 2.0 s)"), std::string::npos)
      << a.err();
  EXPECT_NE(a.err().find("restarting the workers (restart 1 of 1)"), std::string::npos) << a.err();
  EXPECT_EQ(lines_with_prefix(a.out(), "[rank 0]: gen 1 "), std::vector<std::string>{"world 1"}) << a.out();
}

TEST(ElasticNodes, ALateNodeJoinsAtTheNextRestart) {
  TempDir dir;
  // Generation 0 runs until the test creates "fail"; generation 1 reports its size and ends.
  const std::string script = "echo gen $GRADMESH_GENERATION world $WORLD_SIZE; [ $GRADMESH_GENERATION != 0 ] && exit 0; "
                             "touch " + dir.file("ready_") + "$RANK; while [ ! -e " + dir.file("fail") +
                             " ]; do sleep 0.05; done; exit 4";
  const auto flags = node_flags(dir, "1:2", "late", {"--max-restarts", "1", "--rdzv-last-call", "1"});
  LauncherProcess a(launch_args(flags, script), dir.path(), "a");
  ASSERT_TRUE(wait_for_files({dir.file("ready_0")}, milliseconds(20'000))) << a.err();
  LauncherProcess b(launch_args(flags, script), dir.path(), "b");
  ASSERT_TRUE(wait_for_text([&] { return b.err(); }, "waiting to join at the next restart")) << b.err();
  {
    std::ofstream(dir.file("fail")) << "";
  }
  EXPECT_EQ(a.wait(milliseconds(30'000)), 0) << a.err();
  EXPECT_EQ(b.wait(milliseconds(30'000)), 0) << b.err();
  EXPECT_EQ(lines_with_prefix(a.out(), "[rank 0]: gen "), (std::vector<std::string>{"0 world 1", "1 world 2"}));
  EXPECT_EQ(lines_with_prefix(b.out(), "[rank 1]: gen "), std::vector<std::string>{"1 world 2"}) << b.out() << b.err();
}

TEST(MultiNodeRestarts, PreemptionDuringAPeerStopIsForwardedNotKilled) {
  TempDir dir;
  // Node 1's rank fails; node 0's rank saves its state on SIGTERM (each signal
  // leaves a mark) and exits 0 once the test releases it.
  const std::string script =
      "if [ $RANK = 1 ]; then while [ ! -e " + dir.file("ready_0") + " ]; do sleep 0.02; done; exit 5; fi; "
      "trap 'echo x >> " + dir.file("term_0") + "' TERM; touch " + dir.file("ready_0") + "; while [ ! -e " +
      dir.file("release") + " ]; do sleep 0.05; done; exit 0";
  const auto flags = node_flags(dir, "2", "preempt", {"--node-rank", "0", "--grace-period", "60"});
  LauncherProcess a(launch_args(flags, script), dir.path(), "a");
  auto flags_b = flags;
  flags_b[flags_b.size() - 3] = "1";  // --node-rank 1
  LauncherProcess b(launch_args(flags_b, script), dir.path(), "b");
  ASSERT_TRUE(wait_for_files({dir.file("term_0")}, milliseconds(20'000))) << a.err();  // a stops for b's failure
  a.signal(SIGTERM);  // the job is preempted while a is stopping
  ASSERT_TRUE(wait_for_text([&] { return read_file(dir.file("term_0")); }, "x\nx\n")) << a.err();
  {
    std::ofstream(dir.file("release")) << "";
  }
  EXPECT_EQ(a.wait(milliseconds(30'000)), 128 + SIGTERM) << a.err();
  EXPECT_EQ(b.wait(milliseconds(30'000)), 5) << b.err();
  EXPECT_EQ(a.err().find("SIGKILL"), std::string::npos) << "the workers were saving their state: " << a.err();
  EXPECT_NE(a.err().find("received SIGTERM; every worker stopped cleanly (exit 0) within the grace period"),
            std::string::npos)
      << a.err();
}

}  // namespace
}  // namespace gradmesh::testing
