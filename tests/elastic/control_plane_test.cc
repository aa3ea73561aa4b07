// The multi-node control plane against a real redis-server that drops its
// connections, restarts without its data or goes away, and nodes that die
// and come back with their --node-rank: real launchers on loopback, shell
// workers. A store blip costs no restart; a lost store fails every node
// naming it; a returning node rejoins; no launcher exits 0 for a run that
// did not finish.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "comm/redis_server.h"
#include "launcher_process.h"

namespace gradmesh::testing {
namespace {

using std::chrono::milliseconds;

class ControlPlane : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!redis_server_installed()) GTEST_SKIP() << redis_missing_message();
    server_ = std::make_unique<RedisServer>("");
  }
  std::vector<std::string> flags(const std::string& id, std::vector<std::string> more) const {
    std::vector<std::string> f = {"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint", server_->endpoint(),
                                  "--rdzv-id", id, "--dashboard", "off"};
    f.insert(f.end(), more.begin(), more.end());
    return f;
  }
  // Workers that say they run, then run for `seconds` and exit 0.
  std::string worker(double seconds) const {
    return "touch " + dir_.file("ready_") + "$RANK; sleep " + std::to_string(seconds) + "; exit 0";
  }
  bool both_ready() const { return wait_for_files({dir_.file("ready_0"), dir_.file("ready_1")}, milliseconds(20'000)); }
  TempDir dir_;
  std::unique_ptr<RedisServer> server_;
};

TEST_F(ControlPlane, DroppedStoreConnectionsCostNoRestart) {
  const auto f = flags("blip", {"--max-restarts", "2", "--heartbeat-timeout", "2"});
  LauncherProcess a(launch_args(f, worker(4)), dir_.path(), "a"), b(launch_args(f, worker(4)), dir_.path(), "b");
  ASSERT_TRUE(both_ready()) << a.err() << b.err();
  server_->command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});  // every launcher's and worker's connection
  EXPECT_EQ(a.wait(milliseconds(30'000)), 0) << a.err();
  EXPECT_EQ(b.wait(milliseconds(30'000)), 0) << b.err();
  for (LauncherProcess* node : {&a, &b}) {
    EXPECT_EQ(node->err().find("restarting"), std::string::npos) << node->err();
    EXPECT_NE(node->err().find("answers again"), std::string::npos) << node->err();
  }
  EXPECT_EQ(server_->command({"EXISTS", "blip/restarts"}), "0") << "no restart was claimed";
}

TEST_F(ControlPlane, ARestartedStoreIsWaitedOutAndItsKeysComeBack) {
  const auto f = flags("reborn", {"--max-restarts", "2", "--heartbeat-timeout", "2"});
  LauncherProcess a(launch_args(f, worker(5)), dir_.path(), "a"), b(launch_args(f, worker(5)), dir_.path(), "b");
  ASSERT_TRUE(both_ready()) << a.err() << b.err();
  server_->restart();  // no persistence: every key is gone
  // The launchers put back what they own within a poll or two.
  for (int i = 0; i < 200 && server_->command({"EXISTS", "reborn/0/agent/node/0/nproc", "reborn/0/agent/node/1/nproc",
                                               "reborn/generation"}) != "3";
       ++i)
    std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(server_->command({"GET", "reborn/0/agent/node/0/nproc"}), "1");
  EXPECT_EQ(server_->command({"GET", "reborn/0/agent/node/1/nproc"}), "1");
  EXPECT_EQ(server_->command({"GET", "reborn/generation"}), "0");
  EXPECT_EQ(a.wait(milliseconds(30'000)), 0) << a.err();
  EXPECT_EQ(b.wait(milliseconds(30'000)), 0) << b.err();
  EXPECT_EQ(a.err().find("restarting"), std::string::npos) << a.err();
  EXPECT_EQ(b.err().find("restarting"), std::string::npos) << b.err();
}

TEST_F(ControlPlane, AStoreGoneLongerThanTheTimeoutFailsEveryNodeNamingIt) {
  const auto f = flags("gone", {"--store-timeout", "2", "--max-restarts", "2"});
  const std::string forever = "touch " + dir_.file("ready_") + "$RANK; while :; do sleep 0.1; done";
  LauncherProcess a(launch_args(f, forever), dir_.path(), "a"), b(launch_args(f, forever), dir_.path(), "b");
  ASSERT_TRUE(both_ready()) << a.err() << b.err();
  server_->stop();
  for (LauncherProcess* node : {&a, &b}) {
    EXPECT_EQ(node->wait(milliseconds(30'000)), 1) << node->err();
    EXPECT_NE(node->err().find("the store redis://127.0.0.1:" + std::to_string(server_->port()) + "/0"),
              std::string::npos)
        << node->err();
    EXPECT_NE(node->err().find("(--store-timeout 2.0 s)"), std::string::npos) << node->err();
    EXPECT_EQ(node->err().find("restarting"), std::string::npos) << node->err();
  }
}

// A node killed (launcher and workers) comes back with the same --node-rank:
// the survivor notices the loss, restarts, and the returning node joins it.
TEST_F(ControlPlane, AKilledNodeRejoinsWithItsNodeRank) {
  const std::string script = "touch " + dir_.file("ready_") + "$RANK; [ $GRADMESH_GENERATION != 0 ] && exit 0; " +
                             "while :; do sleep 0.1; done";
  const auto base = flags("back", {"--max-restarts", "2", "--heartbeat-timeout", "2"});
  auto node = [&](int rank) {
    std::vector<std::string> f = base;
    f.insert(f.end(), {"--node-rank", std::to_string(rank)});
    return launch_args(f, script);
  };
  LauncherProcess a(node(0), dir_.path(), "a");
  auto b = std::make_unique<LauncherProcess>(node(1), dir_.path(), "b");
  ASSERT_TRUE(both_ready()) << a.err() << b->err();
  b->signal(SIGKILL);  // its worker dies with it (PR_SET_PDEATHSIG)
  EXPECT_EQ(b->wait(), 128 + SIGKILL);
  LauncherProcess again(node(1), dir_.path(), "b2");
  EXPECT_EQ(a.wait(milliseconds(40'000)), 0) << a.err();
  EXPECT_EQ(again.wait(milliseconds(40'000)), 0) << again.err();
  EXPECT_NE(a.err().find("node 1's launcher stopped responding"), std::string::npos) << a.err();
  EXPECT_EQ(again.err().find("already taken"), std::string::npos) << again.err();
  const std::string record = server_->command({"GET", "back/restart/1"});
  EXPECT_NE(record.find(R"("failed_rank":-1)"), std::string::npos) << record;
}

// Two live launchers claiming one rank: the second is refused, naming both.
TEST_F(ControlPlane, ALiveDuplicateNodeRankIsRefusedNamingBoth) {
  const auto f = flags("dup", {"--node-rank", "1", "--join-timeout", "20"});
  LauncherProcess first(launch_args(f, worker(0)), dir_.path(), "first");
  for (int i = 0; i < 200 && server_->command({"EXISTS", "dup/0/agent/node/1/nproc"}) != "1"; ++i)
    std::this_thread::sleep_for(milliseconds(20));
  LauncherProcess second(launch_args(f, worker(0)), dir_.path(), "second");
  EXPECT_EQ(second.wait(milliseconds(20'000)), 2) << second.err();
  EXPECT_NE(second.err().find("pid " + std::to_string(first.pid()) + ", which is still running; this launcher is"),
            std::string::npos)
      << second.err();
  EXPECT_NE(second.err().find("pid " + std::to_string(second.pid())), std::string::npos) << second.err();
  first.signal(SIGTERM);
  EXPECT_EQ(first.wait(), 128 + SIGTERM);
}

// A launcher killed with SIGKILL leaves its temporary store behind; the next
// launcher on the host removes it (and leaves a live launcher's alone).
TEST(TemporaryStores, AKilledLaunchersStoreIsRemovedByTheNextLauncher) {
  TempDir tmp;
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const std::string orphan = tmp.file("gradmesh-launch-old-AAAAAA"), live = tmp.file("gradmesh-launch-live-BBBBBB");
  for (const auto& [dir, pid] : {std::pair{orphan, gone}, std::pair{live, ::getpid()}}) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/launcher.pid") << host << " " << pid << "\n";
  }
  ::setenv("TMPDIR", tmp.path().c_str(), 1);
  LauncherProcess launcher(launch_args({"--dashboard", "off"}, "exit 0"), tmp.path(), "next");
  const int code = launcher.wait();
  ::unsetenv("TMPDIR");
  EXPECT_EQ(code, 0) << launcher.err();
  EXPECT_FALSE(std::filesystem::exists(orphan)) << "the dead launcher's store is left behind";
  EXPECT_TRUE(std::filesystem::exists(live)) << "a running launcher's store was removed";
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path()))
    if (entry.path().filename().string().rfind("gradmesh-launch-", 0) == 0) {
      EXPECT_EQ(entry.path().string(), live) << "the finished launcher left its store behind";
    }
}

}  // namespace
}  // namespace gradmesh::testing
