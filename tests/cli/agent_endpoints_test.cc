// `gradmesh launch --agent-port` with `gradmesh probe`, as Kubernetes' exec
// probes use them: ready while the workers run, 401 without the token, no
// answer once the launcher exited; and the flags' usage errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "cli/child_processes.h"
#include "cli/run_command.h"
#include "comm/redis_server.h"
#include "support/temp_dir.h"

namespace gradmesh::testing {
namespace {

TEST(AgentEndpoints, ProbedWhileTheWorkersRunAndAfter) {
  TempDir dir;
  {
    std::ofstream(dir.file("token")) << "agent-token-1\n";
  }
  const int port = free_loopback_port();
  const std::string cmd = "cd '" + dir.path() + "' && exec '" GRADMESH_BINARY "' launch --nproc-per-node 2 --agent-port " +
                          std::to_string(port) + " --token-file token -- sleep 4 > launch.out 2> launch.err";
  const pid_t launcher = ::fork();
  if (launcher == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  CommandResult ready{};
  for (int i = 0; i < 100; ++i) {  // the workers start within a second or two
    ready = run_gradmesh("probe " + url + "/readyz --token-file token", dir.path());
    if (ready.exit_code == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(ready.exit_code, 0) << ready.err;
  EXPECT_NE(ready.out.find("\"ready\":true"), std::string::npos) << ready.out;
  const CommandResult status = run_gradmesh("probe " + url + "/status --token-file token", dir.path());
  EXPECT_NE(status.out.find("\"workers\":2"), std::string::npos) << status.out;
  const CommandResult anonymous = run_gradmesh("probe " + url + "/healthz", dir.path());
  EXPECT_EQ(anonymous.exit_code, 1);
  EXPECT_NE(anonymous.err.find("401"), std::string::npos) << anonymous.err;
  EXPECT_EQ(wait_exit(launcher, std::chrono::seconds(60)), 0);
  EXPECT_NE(read_file(dir.file("launch.err")).find("agent endpoints at " + url), std::string::npos);
  const CommandResult gone = run_gradmesh("probe " + url + "/healthz --token-file token --timeout 1", dir.path());
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_NE(gone.err.find("no answer"), std::string::npos) << gone.err;
}

TEST(AgentEndpoints, BadFlagsAreUsageErrors) {
  TempDir dir;
  expect_usage_errors("probe", {{"https://127.0.0.1:1/healthz", "only http://"},
                                {"http://127.0.0.1:99999/", "port is not a number"},
                                {"http:///x", "no host"},
                                {"http://127.0.0.1:1/ --timeout 0", "--timeout"}},
                      dir.path());
  expect_usage_errors("launch", {{"--agent-port 70000 -- true", "--agent-port"},
                                 {"--token-file t -- true", "give --agent-port too"}},
                      dir.path());
  const CommandResult empty_token = run_shell("touch empty && '" GRADMESH_BINARY "' probe http://127.0.0.1:1/ --token-file empty", dir.path());
  EXPECT_EQ(empty_token.exit_code, 2);
  EXPECT_NE(empty_token.err.find("--token-file file empty"), std::string::npos) << empty_token.err;
}

}  // namespace
}  // namespace gradmesh::testing
