// An emulated cluster on one Linux machine: K "hosts" that are network
// namespaces, each with one link of a given rate to a switch (a bridge in a
// namespace of its own), and a Redis store on host 0 for the rendezvous.
//
//   host i: namespace gmh<pid>x<i>, eth0 = 10.234.0.<i+1>/24
//   switch: namespace gms<pid>, bridge br0, one port per host
//
// Every link is limited with `tc tbf` in both directions: on the host's
// eth0 (what it sends) and on its switch port (what it receives). netem is
// not available on these machines, so a link adds no latency beyond the
// kernel's own. Needs root and iproute2 (Error(kUsage) saying so
// otherwise). The destructor removes everything (the namespaces take
// their links with them, and the store is stopped); names carry the
// creator's pid, so two clusters never collide.
#pragma once

#include <string>
#include <vector>

namespace gradmesh::scaling {

class EmulatedCluster {
 public:
  // `hosts` from 1 to 64; `rate` in tc's spelling (1gbit, 200mbit); the
  // store's files go into `workdir`. On any failure, what was created is
  // removed and Error(kIo) names the command that failed and its output.
  EmulatedCluster(int hosts, const std::string& rate, const std::string& workdir);
  ~EmulatedCluster();
  EmulatedCluster(const EmulatedCluster&) = delete;
  EmulatedCluster& operator=(const EmulatedCluster&) = delete;

  int hosts() const { return static_cast<int>(namespaces_.size()); }
  std::string address(int host) const;
  // The words that run a command on host i: {"ip", "netns", "exec", <namespace>}.
  std::vector<std::string> exec_prefix(int host) const;
  // redis://:<password>@10.234.0.1:6379
  std::string store_endpoint() const;
  const std::vector<std::string>& namespaces() const { return namespaces_; }

 private:
  void remove();

  std::string switch_ns_, password_, pidfile_;
  std::vector<std::string> namespaces_;
};

// Runs a shell command; its exit status, and its output appended to `output`.
int shell(const std::string& command, std::string* output = nullptr);

}  // namespace gradmesh::scaling
