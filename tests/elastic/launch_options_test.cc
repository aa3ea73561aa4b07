// Flag parsing, validation and the worker environment contract, in process.
#include <gtest/gtest.h>

#include <map>

#include "gradmesh/core/error.h"
#include "gradmesh/elastic/launch_options.h"
#include "gradmesh/elastic/worker_env.h"

namespace gradmesh::elastic {
namespace {

// The usage error's message, or "" when `fn` did not throw one.
template <typename Fn>
std::string usage_error(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
    return e.what();
  }
  return "";
}

LaunchOptions valid_options() {
  LaunchOptions o;
  o.command = {"true"};
  return o;
}

TEST(LaunchOptions, ParsesNodeAndProcessCounts) {
  auto range = [](const std::string& text) {
    const NodeRange r = parse_nnodes(text);
    return std::pair<int, int>{r.min, r.max};
  };
  EXPECT_EQ(range("1"), std::make_pair(1, 1));
  EXPECT_EQ(range("4"), std::make_pair(4, 4));
  EXPECT_EQ(range("3:3"), std::make_pair(3, 3));
  EXPECT_EQ(range("1:2"), std::make_pair(1, 2));
  EXPECT_EQ(range("2:8"), std::make_pair(2, 8));
  EXPECT_NE(usage_error([] { parse_nnodes("3:2"); }).find("MIN <= MAX, got '3:2'"), std::string::npos);
  for (const char* bad : {"0", "", "-1", "two", "2:", ":2", "1.5", " 2", "+2", "0x2", "99999999999999999999", "0:2",
                          "1:0", "1:2:3", "1:x", "1 :2"})
    EXPECT_NE(usage_error([&] { parse_nnodes(bad); }).find("--nnodes"), std::string::npos) << bad;

  EXPECT_EQ(parse_nproc_per_node("3"), 3);
  EXPECT_GE(parse_nproc_per_node("auto"), 1);
  for (const char* bad : {"0", "", "-2", "x", "4097", "+2", "2 ", "1e3", "9223372036854775808"})
    EXPECT_NE(usage_error([&] { parse_nproc_per_node(bad); }).find("--nproc-per-node"), std::string::npos) << bad;
}

TEST(LaunchOptions, ValidationNamesTheFlag) {
  EXPECT_EQ(usage_error([] { validate_launch_options(valid_options()); }), "");

  auto expect_flag = [](const std::string& flag, auto edit) {
    LaunchOptions o = valid_options();
    edit(o);
    EXPECT_NE(usage_error([&] { validate_launch_options(o); }).find(flag), std::string::npos) << flag;
  };
  expect_flag("no command", [](LaunchOptions& o) { o.command.clear(); });
  expect_flag("--nproc-per-node", [](LaunchOptions& o) { o.nproc_per_node = 0; });
  expect_flag("--node-rank", [](LaunchOptions& o) { o.node_rank = 1; });
  expect_flag("--rdzv-id", [](LaunchOptions& o) { o.rdzv_id = "a/b"; });
  expect_flag("--rdzv-endpoint", [](LaunchOptions& o) { o.nnodes = 2; o.rdzv_id = "x"; });
  expect_flag("--rdzv-id", [](LaunchOptions& o) { o.nnodes = 2; o.rdzv_endpoint = "file:///tmp/x"; });
  expect_flag("rendezvous endpoint", [](LaunchOptions& o) { o.rdzv_endpoint = "http://host:1"; });
  expect_flag("--master-port", [](LaunchOptions& o) { o.master_port = 70000; });
  expect_flag("--max-restarts", [](LaunchOptions& o) { o.max_restarts = -1; });
  expect_flag("--node-rank", [](LaunchOptions& o) {
    o.nnodes = 2; o.min_nnodes = 1; o.rdzv_id = "x"; o.rdzv_endpoint = "file:///tmp/x"; o.node_rank = 0;
  });
  expect_flag("--heartbeat-timeout", [](LaunchOptions& o) { o.heartbeat_timeout_s = -1; });
  expect_flag("--rdzv-last-call", [](LaunchOptions& o) { o.rdzv_last_call_s = 1e300; });
  expect_flag("--join-timeout", [](LaunchOptions& o) { o.join_timeout_s = 0; });
  // Values that would overflow the conversion to milliseconds.
  expect_flag("--join-timeout", [](LaunchOptions& o) { o.join_timeout_s = 1e300; });
  expect_flag("--grace-period", [](LaunchOptions& o) { o.grace_period_s = 1e300; });
}

TEST(LaunchOptions, RestartsWorkWithSeveralNodes) {
  // Before, --max-restarts with --nnodes > 1 was refused: restarts were counted per node.
  LaunchOptions o = valid_options();
  o.nnodes = 2;
  o.rdzv_id = "x";
  o.rdzv_endpoint = "file:///tmp/x";
  o.max_restarts = 3;
  EXPECT_EQ(usage_error([&] { validate_launch_options(o); }), "");
  o.min_nnodes = 1;  // elastic 1:2
  EXPECT_EQ(usage_error([&] { validate_launch_options(o); }), "");
}

TEST(LaunchOptions, RunIds) {
  EXPECT_TRUE(is_valid_run_id("job-42_a.b"));
  EXPECT_FALSE(is_valid_run_id(""));
  EXPECT_FALSE(is_valid_run_id(".hidden"));
  EXPECT_FALSE(is_valid_run_id("a b"));
  EXPECT_FALSE(is_valid_run_id(std::string(129, 'a')));
  const std::string a = fresh_run_id(), b = fresh_run_id();
  EXPECT_TRUE(is_valid_run_id(a)) << a;
  EXPECT_NE(a, b);
}

TEST(LaunchOptions, FindsExecutablesLikeExecvp) {
  EXPECT_EQ(find_executable("/bin/sh"), "/bin/sh");
  const std::string sh = find_executable("sh");
  EXPECT_EQ(sh.substr(sh.size() - 3), "/sh") << sh;
  EXPECT_NE(usage_error([] { find_executable("no-such-program-xyz"); }).find("not found on PATH"), std::string::npos);
  EXPECT_NE(usage_error([] { find_executable("/etc/passwd"); }).find("not an executable"), std::string::npos);
  EXPECT_NE(usage_error([] { find_executable("train.py"); }).find("python3 train.py"), std::string::npos);
}

TEST(WorkerEnv, FollowsTheTorchrunContract) {
  RankAssignment a;
  a.node_rank = 1;
  a.nnodes = 2;
  a.local_world_size = 3;
  a.rank_base = 2;  // node 0 runs 2 workers
  a.world_size = 5;
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  const RunIdentity run{"job7", "file:///tmp/s", 2, 3};
  const EnvVars vars = worker_variables(a, 1, run);
  std::map<std::string, std::string> env(vars.begin(), vars.end());
  EXPECT_EQ(env.size(), vars.size()) << "each variable once";
  const std::map<std::string, std::string> expected = {
      {"RANK", "3"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "5"}, {"LOCAL_WORLD_SIZE", "3"},
      {"GROUP_RANK", "1"}, {"GROUP_WORLD_SIZE", "2"}, {"ROLE_NAME", "default"}, {"ROLE_RANK", "3"},
      {"ROLE_WORLD_SIZE", "5"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
      {"TORCHELASTIC_RUN_ID", "job7"}, {"TORCHELASTIC_RESTART_COUNT", "2"}, {"TORCHELASTIC_MAX_RESTARTS", "3"},
      {"GRADMESH_STORE", "file:///tmp/s"}, {"GRADMESH_RUN_ID", "job7"}, {"GRADMESH_GENERATION", "2"},
      {"GRADMESH_REPLACEMENT", "0"}};
  EXPECT_EQ(env, expected);
}

TEST(WorkerEnv, MergeReplacesInheritedValues) {
  const std::vector<std::string> base = {"PATH=/bin", "RANK=99", "HOME=/root", "EMPTY="};
  const std::vector<std::string> merged = merge_environment(base, {{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  const std::vector<std::string> expected = {"PATH=/bin", "HOME=/root", "EMPTY=", "RANK=0", "WORLD_SIZE=2"};
  EXPECT_EQ(merged, expected);
}

}  // namespace
}  // namespace gradmesh::elastic
