// `gradmesh launch` end to end: the environment contract on one and two
// nodes, rendezvous errors and usage errors. Workers are shell commands.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "launcher_process.h"

namespace gradmesh::testing {
namespace {

// Printed by every worker: one line with the variables of the contract.
constexpr const char* kEnvScript =
    "echo ENV $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE $ROLE_RANK "
    "$ROLE_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RUN_ID $TORCHELASTIC_RESTART_COUNT "
    "$TORCHELASTIC_MAX_RESTARTS $GRADMESH_RUN_ID $GRADMESH_GENERATION $GRADMESH_STORE";

struct WorkerEnv {
  int prefix_rank = -1;  // from the "[rank R]: " prefix
  int rank, local_rank, world_size, local_world_size, group_rank, group_world_size, role_rank, role_world_size;
  std::string master_addr;
  int master_port;
  std::string run_id;
  int restart_count, max_restarts;
  std::string gradmesh_run_id;
  int generation;
  std::string store;
};

std::vector<WorkerEnv> parse_env_lines(const std::string& out) {
  std::vector<WorkerEnv> envs;
  for (const std::string& line : lines_with_prefix(out, "[rank ")) {
    const size_t close = line.find("]: ENV ");
    if (close == std::string::npos) continue;
    WorkerEnv e;
    e.prefix_rank = std::stoi(line.substr(0, close));
    std::istringstream in(line.substr(close + 7));
    in >> e.rank >> e.local_rank >> e.world_size >> e.local_world_size >> e.group_rank >> e.group_world_size >>
        e.role_rank >> e.role_world_size >> e.master_addr >> e.master_port >> e.run_id >> e.restart_count >>
        e.max_restarts >> e.gradmesh_run_id >> e.generation >> e.store;
    EXPECT_FALSE(in.fail()) << "unparsable worker line: " << line;
    envs.push_back(e);
  }
  return envs;
}

TEST(LaunchEnv, OneNodeThreeWorkers) {
  TempDir dir;
  LauncherProcess launch(launch_args({"--nproc-per-node", "3", "--rdzv-id", "envtest"}, kEnvScript), dir.path(), "l");
  ASSERT_EQ(launch.wait(), 0) << launch.err();
  const std::vector<WorkerEnv> envs = parse_env_lines(launch.out());
  ASSERT_EQ(envs.size(), 3u) << launch.out();
  std::set<int> ranks;
  for (const WorkerEnv& e : envs) {
    ranks.insert(e.rank);
    EXPECT_EQ(e.prefix_rank, e.rank);
    EXPECT_EQ(e.local_rank, e.rank);
    EXPECT_EQ(e.world_size, 3);
    EXPECT_EQ(e.local_world_size, 3);
    EXPECT_EQ(e.group_rank, 0);
    EXPECT_EQ(e.group_world_size, 1);
    EXPECT_EQ(e.role_rank, e.rank);
    EXPECT_EQ(e.role_world_size, 3);
    EXPECT_EQ(e.master_addr, "127.0.0.1");
    EXPECT_EQ(e.master_port, envs[0].master_port);
    EXPECT_GT(e.master_port, 0);
    EXPECT_EQ(e.run_id, "envtest");
    EXPECT_EQ(e.gradmesh_run_id, "envtest");
    EXPECT_EQ(e.restart_count, 0);
    EXPECT_EQ(e.max_restarts, 0);
    EXPECT_EQ(e.generation, 0);
    EXPECT_EQ(e.store, envs[0].store);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  ASSERT_EQ(envs[0].store.rfind("file:///", 0), 0u) << envs[0].store;
  EXPECT_FALSE(std::filesystem::exists(envs[0].store.substr(7)))
      << "the store directory the launcher created for itself must be removed when it ends";
}

TEST(LaunchEnv, MasterPortIsFreeForRankZero) {
  if (std::system("python3 -c pass > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  TempDir dir;
  // What torch's TCPStore does on rank 0 under torchrun: listen on MASTER_ADDR:MASTER_PORT.
  const std::string script =
      "python3 -c 'import os, socket; s = socket.socket(); "
      "s.bind((os.environ[\"MASTER_ADDR\"], int(os.environ[\"MASTER_PORT\"]))); s.listen(); print(\"BOUND\")'";
  LauncherProcess launch(launch_args({}, script), dir.path(), "l");
  ASSERT_EQ(launch.wait(), 0) << launch.err();
  EXPECT_NE(launch.out().find("[rank 0]: BOUND"), std::string::npos) << launch.out();
}

TEST(LaunchEnv, TwoNodesAssignRanksThroughTheStore) {
  TempDir dir;
  const std::vector<std::string> flags = {"--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint",
                                          "file://" + dir.file("store"), "--rdzv-id", "two-nodes",
                                          "--master-addr", "127.0.0.1"};
  LauncherProcess a(launch_args(flags, kEnvScript), dir.path(), "a");
  LauncherProcess b(launch_args(flags, kEnvScript), dir.path(), "b");
  ASSERT_EQ(a.wait(), 0) << a.err();
  ASSERT_EQ(b.wait(), 0) << b.err();
  const std::vector<WorkerEnv> envs_a = parse_env_lines(a.out()), envs_b = parse_env_lines(b.out());
  ASSERT_EQ(envs_a.size(), 2u) << a.out();
  ASSERT_EQ(envs_b.size(), 2u) << b.out();
  EXPECT_NE(envs_a[0].group_rank, envs_b[0].group_rank) << "each launcher must get its own node rank";
  std::set<int> ranks, node_ranks;
  for (const auto* envs : {&envs_a, &envs_b}) {
    for (const WorkerEnv& e : *envs) {
      EXPECT_EQ(e.group_rank, (*envs)[0].group_rank) << "one node rank per launcher";
      node_ranks.insert(e.group_rank);
      EXPECT_TRUE(ranks.insert(e.rank).second) << "rank " << e.rank << " given twice";
      EXPECT_EQ(e.rank, e.group_rank * 2 + e.local_rank);
      EXPECT_EQ(e.prefix_rank, e.rank);
      EXPECT_EQ(e.world_size, 4);
      EXPECT_EQ(e.local_world_size, 2);
      EXPECT_EQ(e.group_world_size, 2);
      EXPECT_EQ(e.master_addr, "127.0.0.1");
      EXPECT_EQ(e.master_port, envs_a[0].master_port) << "all nodes must agree on node 0's port";
      EXPECT_EQ(e.run_id, "two-nodes");
    }
  }
  EXPECT_EQ(node_ranks, (std::set<int>{0, 1}));
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
}

TEST(LaunchEnv, MissingNodeTimesOutNamingIt) {
  TempDir dir;
  LauncherProcess launch(launch_args({"--nnodes", "2", "--rdzv-endpoint", "file://" + dir.file("store"),
                                      "--rdzv-id", "lonely", "--join-timeout", "0.5"},
                                     "touch " + dir.file("ran")),
                         dir.path(), "l");
  EXPECT_EQ(launch.wait(), 1);
  const std::string err = launch.err();
  EXPECT_NE(err.find("run 'lonely'"), std::string::npos) << err;
  EXPECT_NE(err.find("1 of 2 nodes joined"), std::string::npos) << err;
  EXPECT_NE(err.find("missing node rank(s): 1"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("ran"))) << "no worker may start before all nodes joined";
}

TEST(LaunchEnv, SignalDuringTheRendezvousStopsIt) {
  TempDir dir;
  const std::string store = dir.file("store");
  LauncherProcess launch(launch_args({"--nnodes", "2", "--rdzv-endpoint", "file://" + store, "--rdzv-id", "waiting",
                                      "--join-timeout", "30"},
                                     "true"),
                         dir.path(), "l");
  // The join counter's file appears once the launcher is waiting for the other node.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  bool joined = false;
  while (!joined && std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(store, ec))
      joined = joined || entry.path().filename().string().find("node_counter") != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(joined) << launch.err();
  launch.signal(SIGINT);
  EXPECT_EQ(launch.wait(), 130);
  EXPECT_NE(launch.err().find("received SIGINT during the rendezvous"), std::string::npos) << launch.err();
}

TEST(LaunchEnv, UsageErrorsExitTwo) {
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    std::string expected;  // part of stderr
  };
  const std::vector<Case> cases = {
      {{"launch"}, "no command"},
      {{"launch", "--nproc-per-node", "2", "--"}, "no command"},
      {{"launch", "--nproc-per-node", "0", "--", "true"}, "--nproc-per-node"},
      {{"launch", "--nnodes", "4:1", "--", "true"}, "MIN <= MAX"},
      {{"launch", "--nnodes", "1:4", "--", "true"}, "--rdzv-endpoint"},
      {{"launch", "--heartbeat-timeout", "-1", "--", "true"}, "--heartbeat-timeout"},
      {{"launch", "--rdzv-last-call", "x", "--", "true"}, "--rdzv-last-call"},
      {{"launch", "--rdzv-endpoint", "http://example:80", "--", "true"}, "rendezvous endpoint"},
      {{"launch", "--nnodes", "2", "--rdzv-id", "x", "--", "true"}, "--rdzv-endpoint"},
      {{"launch", "--", "no-such-command-xyz"}, "not found on PATH"},
      {{"launch", "--bogus-flag", "--", "true"}, "bogus"},
  };
  for (const Case& c : cases) {
    LauncherProcess launch(c.args, dir.path(), "l");
    EXPECT_EQ(launch.wait(), 2) << c.args.back() << "\n" << launch.err();
    EXPECT_NE(launch.err().find(c.expected), std::string::npos) << launch.err();
  }
}

}  // namespace
}  // namespace gradmesh::testing
