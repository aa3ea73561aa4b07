// Test support for the tests that run a launcher and kill its workers: the
// workload they train, starting `gradmesh launch` in the background, waiting
// for its exit, the live child processes of a process, read from /proc, and
// the run directory's checkpoints and metrics events.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gradmesh::testing {

// The processes whose parent is `parent` and that are not zombies.
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && state != 'Z') out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

// About 300 steps of a wider MLP (a few ms each), checkpoints every 50.
inline std::string workload(const std::string& run_id, const std::string& extra = "") {
  return "'" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set train.threads=1 --set output.dir=runs"
         " --set model.hidden=[1024,1024] --set data.limit_train=38400 --set data.limit_test=1000"
         " --set train.log_every=10 --set output.report=false --set output.trace_steps=0"
         " --set checkpoint.every_steps=50 --set checkpoint.keep_last=0 --set output.run_id=" +
         run_id + " " + extra;
}

// `gradmesh launch FLAGS -- gradmesh train TRAIN_ARGS`, in the background.
inline pid_t spawn_launcher(const std::string& flags, const std::string& train_args, const std::string& workdir,
                     const std::string& log_name) {
  // Heartbeats every 0.1 s, so the restart events count the steps lost closely.
  const std::string cmd = "cd '" + workdir + "' && exec env GRADMESH_PROGRESS=lines GRADMESH_HEARTBEAT_INTERVAL=0.1 '" GRADMESH_BINARY
                          "' launch " + flags + " -- '" GRADMESH_BINARY "' train " + train_args +
                          " > " + log_name + ".out 2> " + log_name + ".err";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// The workload on 2 local workers.
inline pid_t spawn_launch(const std::string& flags, const std::string& train_args, const std::string& workdir,
                   const std::string& log_name) {
  return spawn_launcher("--nproc-per-node 2 " + flags, train_args, workdir, log_name);
}

// Exit code of `pid` (128 + signal when killed); -1 when it did not exit within `limit`.
inline int wait_exit(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// An integer environment variable a process was started with, -1 if unreadable.
inline int environment_number(pid_t pid, const std::string& name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string entry;
  while (std::getline(in, entry, '\0'))
    if (entry.rfind(name + "=", 0) == 0) return std::stoi(entry.substr(name.size() + 1));
  return -1;
}

// The rank a worker process was started as (its RANK variable), -1 if unreadable.
inline int rank_of(pid_t pid) { return environment_number(pid, "RANK"); }

// The newest step-<N> checkpoint directory under `dir`, -1 when none.
inline int64_t newest_checkpoint(const std::string& dir) {
  int64_t best = -1;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.find('.') == std::string::npos) best = std::max<int64_t>(best, std::stoll(name.substr(5)));
  }
  return best;
}

// Waits until a checkpoint of step `at_least` or later exists; false after `limit`.
inline bool wait_for_checkpoint(const std::string& dir, int64_t at_least, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (newest_checkpoint(dir) < at_least)
    if (std::chrono::steady_clock::now() > deadline) return false;
    else std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return true;
}

// The metrics.jsonl lines of one type, in order.
inline std::vector<nlohmann::json> events(const std::string& metrics, const std::string& type) {
  std::ifstream in(metrics);
  std::string line;
  std::vector<nlohmann::json> out;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.value("type", "") == type) out.push_back(j);
  }
  return out;
}

}  // namespace gradmesh::testing
