// Test support: two "machines" as Linux network namespaces joined by a veth
// pair, 10.231.0.1/24 <-> 10.231.0.2/24 (a private test subnet that exists
// only inside the namespaces the test creates). Needs root (CI runs as root)
// and iproute2; create() says why when it cannot, so tests skip visibly.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "gradmesh/core/shell.h"

namespace gradmesh::testing {

// Runs a shell command; returns its exit status and appends its output to `output`.
inline int shell(const std::string& command, std::string* output = nullptr) {
  return run_shell_command(command, output);
}

// Names carry the test's pid and a tag, so concurrent tests do not collide;
// both namespaces (and with them the veth pair) are deleted on destruction.
class TwoHosts {
 public:
  static constexpr const char* kAddress[2] = {"10.231.0.1", "10.231.0.2"};

  // `tag`: 1-4 letters naming the test, e.g. "gl" or "dp".
  explicit TwoHosts(const std::string& tag) {
    const std::string id = std::to_string(::getpid());
    for (int i = 0; i < 2; ++i) {
      namespace_[i] = "gm" + tag + id + (i ? "b" : "a");
      veth_[i] = "gv" + tag.substr(0, 2) + id + (i ? "b" : "a");  // interface names: at most 15 characters
    }
  }
  ~TwoHosts() {
    for (const std::string& name : namespace_) shell("ip netns del " + name);
  }
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;

  // Creates both namespaces and the link; false (with the failing command's output) on any failure.
  bool create(std::string* why) {
    if (::geteuid() != 0) {
      *why = "network namespaces need root";
      return false;
    }
    std::vector<std::string> commands = {
        "ip netns add " + namespace_[0],
        "ip netns add " + namespace_[1],
        "ip link add " + veth_[0] + " type veth peer name " + veth_[1],
    };
    for (int i = 0; i < 2; ++i) {
      const std::string in = "ip -n " + namespace_[i] + " ";
      commands.push_back("ip link set " + veth_[i] + " netns " + namespace_[i]);
      commands.push_back(in + "addr add " + kAddress[i] + "/24 dev " + veth_[i]);
      commands.push_back(in + "link set " + veth_[i] + " up");
      commands.push_back(in + "link set lo up");
    }
    for (const std::string& command : commands) {
      std::string output;
      if (shell(command, &output) != 0) {
        *why = "'" + command + "' failed: " + output;
        shell("ip link del " + veth_[0]);  // if it was created but not moved yet
        return false;
      }
    }
    return true;
  }

  const std::string& name(int i) const { return namespace_[i]; }

  // A shell command prefix that runs the rest of the line on host i.
  std::string exec_prefix(int i) const { return "ip netns exec " + namespace_[i] + " "; }

  // Moves the calling (single-threaded, forked) process into host i's namespace.
  void enter(int i) const {
    const std::string path = "/var/run/netns/" + namespace_[i];
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) throw std::runtime_error("cannot enter " + path);
    ::close(fd);
  }

 private:
  std::string namespace_[2], veth_[2];
};

}  // namespace gradmesh::testing
