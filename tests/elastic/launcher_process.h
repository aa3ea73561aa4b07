// Runs the real `gradmesh` binary as a child process with output captured to
// files, so tests can start several launchers at once, signal them, and
// never leave one behind (the destructor kills a launcher still running;
// its workers die with it through PR_SET_PDEATHSIG).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/temp_dir.h"

extern char** environ;

namespace gradmesh::testing {

class LauncherProcess {
 public:
  // Starts `gradmesh <args...>` with stdout/stderr going to <dir>/<name>.out/.err.
  LauncherProcess(const std::vector<std::string>& args, const std::string& dir, const std::string& name)
      : out_path_(dir + "/" + name + ".out"), err_path_(dir + "/" + name + ".err") {
    std::vector<std::string> argv_strings = {GRADMESH_BINARY};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      ADD_FAILURE() << "posix_spawn " << GRADMESH_BINARY << " failed: " << rc;
      pid_ = -1;
    }
  }
  ~LauncherProcess() {
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  LauncherProcess(const LauncherProcess&) = delete;
  LauncherProcess& operator=(const LauncherProcess&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const { ::kill(pid_, sig); }

  // The exit code (128 + N when killed by signal N), or -1 after killing a
  // launcher that did not finish within `timeout` (a hang is a failure).
  int wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(10'000)) {
    if (pid_ <= 0) return -1;
    if (done_) return code_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    for (;;) {
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "gradmesh launch did not exit within " << timeout.count() << " ms; killing it\nstderr:\n"
                      << err();
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        done_ = true;
        return code_ = -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    done_ = true;
    code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return code_;
  }

  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }

 private:
  std::string out_path_, err_path_;
  pid_t pid_ = -1;
  bool done_ = false;
  int code_ = -1;
};

// ["launch", flags..., "--", "/bin/sh", "-c", shell_script]: each worker runs the script.
inline std::vector<std::string> launch_args(std::vector<std::string> flags, const std::string& shell_script) {
  std::vector<std::string> args = {"launch"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"--", "/bin/sh", "-c", shell_script});
  return args;
}

// Waits until every path exists (workers announcing they are ready). False after `timeout`.
inline bool wait_for_files(const std::vector<std::string>& paths,
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(8'000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool all = true;
    for (const std::string& p : paths) all = all && std::filesystem::exists(p);
    if (all) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Lines of `text` that start with `prefix`, prefix removed.
inline std::vector<std::string> lines_with_prefix(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    if (line.compare(0, prefix.size(), prefix) == 0) out.push_back(line.substr(prefix.size()));
    begin = end + 1;
  }
  return out;
}

// The port a server started as `server` printed ("listening on 127.0.0.1:PORT",
// gradmesh serve), or 0 when it printed none within 60 s.
inline int wait_for_listening_port(const LauncherProcess& server) {
  const std::regex listening(R"(listening on 127\.0\.0\.1:(\d+))");
  for (int i = 0; i < 600; ++i) {
    std::smatch m;
    const std::string err = server.err();
    if (std::regex_search(err, m, listening)) return std::stoi(m[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

}  // namespace gradmesh::testing
