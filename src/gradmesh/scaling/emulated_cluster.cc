#include "gradmesh/scaling/emulated_cluster.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include "gradmesh/core/error.h"
#include "gradmesh/core/shell.h"
#include "gradmesh/scaling/units.h"

namespace gradmesh::scaling {
namespace {

constexpr int kMaxHosts = 64;
constexpr const char* kRedisServer = "/usr/bin/redis-server";
constexpr const char* kRedisCli = "/usr/bin/redis-cli";

}  // namespace

int shell(const std::string& command, std::string* output) { return run_shell_command(command, output); }

EmulatedCluster::EmulatedCluster(int hosts, const std::string& rate, const std::string& workdir) {
  if (hosts < 1 || hosts > kMaxHosts)
    throw_error(ErrorKind::kUsage, "--hosts netns:" + std::to_string(hosts), "expected 1 to 64 hosts");
  parse_rate(rate, "--link-rate");  // checked before anything is created
  if (::geteuid() != 0)
    throw_error(ErrorKind::kUsage, "--hosts netns", "emulated hosts are network namespaces, which need root");
  if (shell("ip -V") != 0) throw_error(ErrorKind::kUsage, "--hosts netns", "needs iproute2's ip command");
  if (::access(kRedisServer, X_OK) != 0)
    throw_error(ErrorKind::kUsage, "--hosts netns", std::string("needs ") + kRedisServer + " for the rendezvous store");
  const std::string id = std::to_string(::getpid());
  switch_ns_ = "gms" + id;
  for (int i = 0; i < hosts; ++i) namespaces_.push_back("gmh" + id + "x" + std::to_string(i));
  // A password nobody else on the machine knows (the kernel's entropy, not
  // the seeded RNG: it guards the store, it is not part of any result).
  std::random_device entropy;
  for (int i = 0; i < 16; ++i) password_ += "abcdefghijklmnopqrstuvwxyz0123456789"[entropy() % 36];
  pidfile_ = workdir + "/redis.pid";

  std::vector<std::string> commands = {"ip netns add " + switch_ns_,
                                       "ip -n " + switch_ns_ + " link add br0 type bridge",
                                       "ip -n " + switch_ns_ + " link set br0 up",
                                       "ip -n " + switch_ns_ + " link set lo up"};
  for (int i = 0; i < hosts; ++i) {
    const std::string ns = namespaces_[static_cast<size_t>(i)];
    const std::string host_end = "gh" + id + "x" + std::to_string(i), port = "gp" + id + "x" + std::to_string(i);
    const std::string tbf = " root tbf rate " + rate + " burst 256kb latency 50ms";
    commands.insert(commands.end(), {
        "ip netns add " + ns,
        "ip link add " + host_end + " type veth peer name " + port,
        "ip link set " + host_end + " netns " + ns,
        "ip link set " + port + " netns " + switch_ns_,
        "ip -n " + ns + " link set " + host_end + " name eth0",
        "ip -n " + ns + " addr add " + address(i) + "/24 dev eth0",
        "ip -n " + ns + " link set eth0 up",
        "ip -n " + ns + " link set lo up",
        "ip -n " + switch_ns_ + " link set " + port + " master br0",
        "ip -n " + switch_ns_ + " link set " + port + " up",
        "ip netns exec " + ns + " tc qdisc add dev eth0" + tbf,
        "ip netns exec " + switch_ns_ + " tc qdisc add dev " + port + tbf,
    });
  }
  commands.push_back("ip netns exec " + namespaces_[0] + " " + kRedisServer + " --port 6379 --bind " + address(0) +
                     " --requirepass " + password_ + " --save '' --appendonly no --dir " + workdir +
                     " --daemonize yes --pidfile " + pidfile_ + " --logfile " + workdir + "/redis.log");
  for (const std::string& command : commands) {
    std::string output;
    if (shell(command, &output) != 0) {
      remove();
      throw_error(ErrorKind::kIo, "emulated cluster", "'" + command + "' failed: " + output);
    }
  }
  for (int i = 0; i < 100; ++i) {
    std::string out;
    shell("ip netns exec " + namespaces_[0] + " " + kRedisCli + " -h " + address(0) + " -a " + password_ +
              " --no-auth-warning ping",
          &out);
    if (out.find("PONG") != std::string::npos) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  remove();
  throw_error(ErrorKind::kIo, "emulated cluster", "the store on host 0 did not answer; see " + workdir + "/redis.log");
}

EmulatedCluster::~EmulatedCluster() { remove(); }

void EmulatedCluster::remove() {
  std::ifstream pid_in(pidfile_);
  long pid = 0;
  if (pid_in >> pid && pid > 1) shell("kill " + std::to_string(pid));
  for (const std::string& ns : namespaces_) shell("ip netns del " + ns);
  if (!switch_ns_.empty()) shell("ip netns del " + switch_ns_);
  // A link whose ends had not moved into their namespaces yet (a failed set-up) lives in this one.
  const std::string id = std::to_string(::getpid());
  for (size_t i = 0; i < namespaces_.size(); ++i)
    shell("ip link del gh" + id + "x" + std::to_string(i) + " 2>/dev/null");
}

std::string EmulatedCluster::address(int host) const { return "10.234.0." + std::to_string(host + 1); }

std::vector<std::string> EmulatedCluster::exec_prefix(int host) const {
  return {"/usr/bin/env", "ip", "netns", "exec", namespaces_[static_cast<size_t>(host)]};
}

std::string EmulatedCluster::store_endpoint() const { return "redis://:" + password_ + "@" + address(0) + ":6379"; }

}  // namespace gradmesh::scaling
