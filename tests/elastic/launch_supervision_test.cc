// `gradmesh launch` end to end: output prefixes and logs, failures, signals,
// restarts, and no worker outliving its launcher.
#include <signal.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "launcher_process.h"

namespace gradmesh::testing {
namespace {

// Loops until signalled, after announcing it runs: "<dir>/ready_<rank>".
std::string wait_forever(const TempDir& dir) {
  return "touch " + dir.file("ready_") + "$RANK; while :; do sleep 0.05; done";
}

std::vector<std::string> ready_files(const TempDir& dir, int n) {
  std::vector<std::string> paths;
  for (int r = 0; r < n; ++r) paths.push_back(dir.file("ready_" + std::to_string(r)));
  return paths;
}

bool process_gone(pid_t pid) {
  // Gone, or a zombie nobody has reaped yet: either way it runs no more.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  return !(stat >> pid_field >> comm >> state) || state == "Z";
}

TEST(LaunchOutput, LinesArePrefixedWholeAndLogged) {
  TempDir dir;
  const std::string script =
      "i=0; while [ $i -lt 300 ]; do echo \"line-$RANK-$i-abcdefghijklmnopqrstuvwxyz0123456789\"; i=$((i+1)); done; "
      "echo \"err-$RANK\" >&2; printf 'tail-%s' $RANK";
  LauncherProcess launch(launch_args({"--nproc-per-node", "3", "--log-dir", dir.file("logs")}, script), dir.path(), "l");
  ASSERT_EQ(launch.wait(), 0) << launch.err();
  const std::string out = launch.out();
  // Every stdout line is one whole worker line with its own rank's prefix.
  const std::regex whole(R"(\[rank ([0-2])\]: (line-([0-2])-\d+-abcdefghijklmnopqrstuvwxyz0123456789|tail-([0-2])))");
  int lines = 0;
  for (const std::string& line : lines_with_prefix(out, "")) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, whole)) << "mangled line: '" << line << "'";
    EXPECT_EQ(m[1].str(), m[3].matched ? m[3].str() : m[4].str()) << line;
    ++lines;
  }
  EXPECT_EQ(lines, 3 * 301);
  for (int r = 0; r < 3; ++r) {
    const std::string rank = std::to_string(r);
    EXPECT_NE(launch.err().find("[rank " + rank + "]: err-" + rank + "\n"), std::string::npos) << launch.err();
    EXPECT_NE(out.find("[rank " + rank + "]: tail-" + rank + "\n"), std::string::npos) << "unterminated last line";
    const std::string log = read_file(dir.file("logs/rank_" + rank + ".log"));
    EXPECT_NE(log.find("line-" + rank + "-299-"), std::string::npos);
    EXPECT_NE(log.find("err-" + rank + "\n"), std::string::npos);
    EXPECT_NE(log.find("tail-" + rank + "\n"), std::string::npos);
    EXPECT_EQ(log.find("[rank"), std::string::npos) << "logs hold the raw output";
    EXPECT_EQ(log.find("line-" + std::to_string((r + 1) % 3) + "-"), std::string::npos) << "another rank's output";
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("logs/store"))) << "the launcher's own store must be cleaned up";
}

TEST(LaunchFailure, FailedWorkerStopsTheOthers) {
  TempDir dir;
  const std::string script = "if [ $RANK = 2 ]; then exit 3; fi; " + wait_forever(dir);
  LauncherProcess launch(launch_args({"--nproc-per-node", "4"}, script), dir.path(), "l");
  EXPECT_EQ(launch.wait(), 3) << "the failed worker's status is the launcher's exit code";
  const std::regex message(R"(gradmesh launch: rank 2 \(pid \d+\) exited with status 3; stopped the other 3 workers)");
  EXPECT_TRUE(std::regex_search(launch.err(), message)) << launch.err();
}

TEST(LaunchFailure, KilledWorkerIsNamedWithItsSignal) {
  TempDir dir;
  const std::string script = "if [ $RANK = 1 ]; then kill -9 $$; fi; " + wait_forever(dir);
  LauncherProcess launch(launch_args({"--nproc-per-node", "2"}, script), dir.path(), "l");
  EXPECT_EQ(launch.wait(), 128 + 9);
  const std::regex message(R"(rank 1 \(pid \d+\) was killed by signal 9 \(SIGKILL\); stopped the other 1 worker)");
  EXPECT_TRUE(std::regex_search(launch.err(), message)) << launch.err();
}

TEST(LaunchSignals, SigtermIsForwardedToEveryWorker) {
  TempDir dir;
  const std::string script = "trap 'echo got > " + dir.file("got_") + "$RANK; exit 0' TERM; " + wait_forever(dir);
  LauncherProcess launch(launch_args({"--nproc-per-node", "3"}, script), dir.path(), "l");
  ASSERT_TRUE(wait_for_files(ready_files(dir, 3))) << launch.err();
  launch.signal(SIGTERM);
  EXPECT_EQ(launch.wait(), 128 + SIGTERM);
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(std::filesystem::exists(dir.file("got_" + std::to_string(r)))) << "rank " << r << " missed SIGTERM";
  // Every worker saved its state and exited 0: a clean preemption, still reported as 143.
  EXPECT_NE(launch.err().find("received SIGTERM; every worker stopped cleanly (exit 0) within the grace period"),
            std::string::npos)
      << launch.err();
}

TEST(LaunchSignals, SigintIsForwardedAsSigint) {
  TempDir dir;
  const std::string script = "trap 'echo int > " + dir.file("got_") + "$RANK; exit 0' INT; " + wait_forever(dir);
  LauncherProcess launch(launch_args({"--nproc-per-node", "2"}, script), dir.path(), "l");
  ASSERT_TRUE(wait_for_files(ready_files(dir, 2))) << launch.err();
  launch.signal(SIGINT);
  EXPECT_EQ(launch.wait(), 130);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(read_file(dir.file("got_" + std::to_string(r))), "int\n") << r;
}

TEST(LaunchSignals, WorkersIgnoringSigtermAreKilledAfterTheGracePeriod) {
  TempDir dir;
  const std::string script = "trap '' TERM; " + wait_forever(dir);
  LauncherProcess launch(launch_args({"--nproc-per-node", "2", "--grace-period", "0.2"}, script), dir.path(), "l");
  ASSERT_TRUE(wait_for_files(ready_files(dir, 2))) << launch.err();
  launch.signal(SIGTERM);
  EXPECT_EQ(launch.wait(), 143);
  EXPECT_NE(launch.err().find("2 workers still running 0.2 s after SIGTERM; sending SIGKILL"), std::string::npos)
      << launch.err();
}

TEST(LaunchSignals, WorkersDieWithAKilledLauncher) {
  TempDir dir;
  const std::string script = "echo $$ > " + dir.file("pid_") + "$RANK.tmp; mv " + dir.file("pid_") + "$RANK.tmp " +
                             dir.file("pid_") + "$RANK; exec sleep 30";
  // --log-dir keeps the store inside `dir`: a SIGKILLed launcher cannot remove its own.
  LauncherProcess launch(launch_args({"--nproc-per-node", "2", "--log-dir", dir.file("logs")}, script), dir.path(), "l");
  ASSERT_TRUE(wait_for_files({dir.file("pid_0"), dir.file("pid_1")})) << launch.err();
  launch.signal(SIGKILL);
  EXPECT_EQ(launch.wait(), 128 + SIGKILL);
  for (int r = 0; r < 2; ++r) {
    const pid_t pid = std::stoi(read_file(dir.file("pid_" + std::to_string(r))));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!process_gone(pid) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_TRUE(process_gone(pid)) << "worker " << r << " (pid " << pid << ") outlived its launcher";
    if (!process_gone(pid)) ::kill(pid, SIGKILL);
  }
}

TEST(LaunchRestarts, FailedGroupRestartsAsTheNextGeneration) {
  TempDir dir;
  const std::string script =
      "echo gen $GRADMESH_GENERATION $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS; "
      "[ $GRADMESH_GENERATION = 2 ] || exit 4";
  LauncherProcess launch(launch_args({"--max-restarts", "3", "--log-dir", dir.file("logs")}, script), dir.path(), "l");
  EXPECT_EQ(launch.wait(), 0) << launch.err();
  EXPECT_EQ(lines_with_prefix(launch.out(), "[rank 0]: gen "), (std::vector<std::string>{"0 0 3", "1 1 3", "2 2 3"}));
  EXPECT_NE(launch.err().find("restarting the workers (restart 2 of 3)"), std::string::npos) << launch.err();
  EXPECT_EQ(read_file(dir.file("logs/rank_0.log")), "gen 0 0 3\ngen 1 1 3\ngen 2 2 3\n") << "one log across restarts";

  LauncherProcess exhausted(launch_args({"--max-restarts", "1"}, "echo try; exit 4"), dir.path(), "e");
  EXPECT_EQ(exhausted.wait(), 4);
  EXPECT_EQ(lines_with_prefix(exhausted.out(), "[rank 0]: ").size(), 2u) << exhausted.out();
}

TEST(LaunchFailure, ANodeFailureStopsTheOtherNodes) {
  TempDir dir;
  const std::vector<std::string> flags = {"--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint",
                                          "file://" + dir.file("store"), "--rdzv-id", "peer-fail"};
  // Rank 3 fails once everyone runs; the other node's workers would run forever.
  const std::string script = "touch " + dir.file("ready_") + "$RANK; if [ $RANK = 3 ]; then while [ ! -e " +
                             dir.file("ready_0") + " ] || [ ! -e " + dir.file("ready_1") +
                             " ]; do sleep 0.02; done; exit 5; fi; while :; do sleep 0.05; done";
  LauncherProcess a(launch_args(flags, script), dir.path(), "a");
  LauncherProcess b(launch_args(flags, script), dir.path(), "b");
  EXPECT_EQ(a.wait(), 5) << a.err();
  EXPECT_EQ(b.wait(), 5) << b.err();
  const std::string errs = a.err() + b.err();
  EXPECT_TRUE(std::regex_search(errs, std::regex(R"(rank 3 \(node 1, pid \d+\) exited with status 5)"))) << errs;
  EXPECT_NE(errs.find("stopped 2 workers of node 0 because another node stopped: rank 3 (node 1"), std::string::npos)
      << errs;
}

}  // namespace
}  // namespace gradmesh::testing
