// Test support: a real etcd cluster (1 to 5 members) on free loopback ports,
// owned by the test.
//
// Each member gets a client and a peer port (found by binding port 0 and
// closing it; if another process takes one first, a member exits and the
// whole cluster starts again on new ports), a data directory under a private
// temporary directory and a cluster token of its own. Elections are 2x faster
// than etcd's defaults (heartbeat 50 ms, election 500 ms), so a killed
// leader is replaced quickly and the minimum lease TTL is 1 s. A member can
// be killed (SIGKILL) and restarted on its data directory
// (--initial-cluster-state existing). The destructor stops every member
// (SIGTERM, then SIGKILL); PR_SET_PDEATHSIG kills them too if the test
// process dies first. Start and restart members from the test's main thread:
// the signal fires when the thread that started a member ends.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gradmesh/comm/endpoint.h"

namespace gradmesh::testing {

inline constexpr const char* kEtcdBinary = "/usr/bin/etcd";

inline bool etcd_installed() { return ::access(kEtcdBinary, X_OK) == 0; }

inline std::string etcd_missing_message() {
  return std::string("skipped: ") + kEtcdBinary +
         " not found; install the etcd-server package (scripts/install-deps.sh) to run the etcd store tests";
}

// TLS on the client port: the member's certificate and key, and the CA that
// client certificates must chain to (--client-cert-auth) when set.
struct EtcdTlsFiles {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;  // empty: clients need no certificate
  // The fixture's own requests: the CA that signed cert_file, and a client
  // certificate when client_ca_file is set.
  std::string ca_file;
  std::string client_cert_file;
  std::string client_key_file;
};

class EtcdCluster {
 public:
  // Starts `size` members and waits until every one reports healthy; throws
  // (with the end of the members' logs) when that takes more than 20 s.
  // `extra_flags` go to every member ("--auth-token-ttl", "1").
  // REQUIRES: etcd_installed().
  explicit EtcdCluster(int size = 3, EtcdTlsFiles tls = {}, std::vector<std::string> extra_flags = {})
      : tls_(std::move(tls)), extra_flags_(std::move(extra_flags)) {
    static std::atomic<int> clusters{0};
    std::string pattern = (std::filesystem::temp_directory_path() / "gradmesh-etcd-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("EtcdCluster: mkdtemp failed");
    dir_ = pattern;
    for (int attempt = 0; attempt < 3; ++attempt) {
      token_ = "gradmesh-test-" + std::to_string(::getpid()) + "-" + std::to_string(clusters++);
      members_.assign(size, Member{});
      for (Member& m : members_) {
        m.client_port = unused_loopback_port();
        m.peer_port = unused_loopback_port();
      }
      for (int i = 0; i < size; ++i) start(i, "new");
      if (wait_all_healthy()) return;
      stop_all();
      std::error_code ignored;
      for (int i = 0; i < size; ++i) std::filesystem::remove_all(data_dir(i), ignored);
    }
    const std::string logs = log_tails();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    throw std::runtime_error("EtcdCluster: the cluster did not become healthy within 20 s; member logs:\n" + logs);
  }
  ~EtcdCluster() {
    stop_all();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // A loopback port nothing listens on (at the time of the call).
  static int unused_loopback_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int port = -1;
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      port = ntohs(addr.sin_port);
    if (fd >= 0) ::close(fd);
    if (port < 0) throw std::runtime_error("EtcdCluster: cannot bind a loopback socket");
    return port;
  }

  int size() const { return static_cast<int>(members_.size()); }
  int client_port(int i) const { return members_[i].client_port; }
  std::vector<comm::HostPort> members() const {
    std::vector<comm::HostPort> out;
    for (const Member& m : members_) out.push_back({"127.0.0.1", m.client_port});
    return out;
  }
  // "127.0.0.1:p0,127.0.0.1:p1,..."
  std::string hosts() const {
    std::string out;
    for (const Member& m : members_)
      out += (out.empty() ? "" : ",") + std::string("127.0.0.1:") + std::to_string(m.client_port);
    return out;
  }
  // "etcd://127.0.0.1:p0,..." ("etcds://" with TLS), with "user:password@" when given.
  std::string endpoint(const std::string& userinfo = "") const {
    return std::string(tls_.cert_file.empty() ? "etcd://" : "etcds://") + (userinfo.empty() ? "" : userinfo + "@") +
           hosts();
  }

  bool running(int i) const { return members_[i].pid > 0; }

  // SIGKILL: no goodbye to the peers, as when a machine dies.
  void kill(int i) {
    Member& m = members_[i];
    if (m.pid <= 0) return;
    ::kill(m.pid, SIGKILL);
    ::waitpid(m.pid, nullptr, 0);
    m.pid = -1;
  }

  // Starts a killed member again on its data directory and waits until it
  // serves (it has rejoined and sees a leader).
  void restart(int i) {
    if (running(i)) return;
    start(i, "existing");
    if (!wait_healthy(i, std::chrono::seconds(20)))
      throw std::runtime_error("EtcdCluster: member " + std::to_string(i) + " did not rejoin within 20 s; logs:\n" +
                               log_tails());
  }

  // Restarts every killed member: tests that kill one leave the shared cluster whole.
  void ensure_running() {
    for (int i = 0; i < size(); ++i) restart(i);
  }

  // One gateway request to member i, for test setup and inspection; returns
  // the reply body and throws on a transport error or an HTTP error.
  std::string post_to(int i, const std::string& path, const std::string& json, const std::string& token = "") const {
    auto client = http_client(i);
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", token);
    httplib::Result r = client->Post(path, headers, json, "application/json");
    if (!r) throw std::runtime_error("EtcdCluster: member " + std::to_string(i) + " did not answer " + path);
    if (r->status != 200)
      throw std::runtime_error("EtcdCluster: " + path + " answered " + std::to_string(r->status) + ": " + r->body);
    return r->body;
  }
  // As post_to(), on the first running member.
  std::string post(const std::string& path, const std::string& json, const std::string& token = "") const {
    for (int i = 0; i < size(); ++i)
      if (running(i)) return post_to(i, path, json, token);
    throw std::runtime_error("EtcdCluster: no member is running");
  }

  // Deletes every key ("\0" to "\0" is the whole key space).
  void delete_all_keys(const std::string& token = "") const {
    post("/v3/kv/deleterange", R"({"key":"AA==","range_end":"AA=="})", token);
  }

 private:
  struct Member {
    int client_port = -1;
    int peer_port = -1;
    pid_t pid = -1;
  };

  std::string data_dir(int i) const { return dir_ + "/member-" + std::to_string(i); }
  std::string log_path(int i) const { return dir_ + "/member-" + std::to_string(i) + ".log"; }
  std::string client_url(int i) const {
    return std::string(tls_.cert_file.empty() ? "http" : "https") + "://127.0.0.1:" +
           std::to_string(members_[i].client_port);
  }
  std::string peer_url(int i) const { return "http://127.0.0.1:" + std::to_string(members_[i].peer_port); }

  std::unique_ptr<httplib::Client> http_client(int i) const {
    auto client = tls_.client_cert_file.empty()
                      ? std::make_unique<httplib::Client>(client_url(i))
                      : std::make_unique<httplib::Client>(client_url(i), tls_.client_cert_file, tls_.client_key_file);
    if (!tls_.ca_file.empty()) client->set_ca_cert_path(tls_.ca_file);
    client->set_connection_timeout(std::chrono::seconds(2));
    client->set_read_timeout(std::chrono::seconds(5));
    return client;
  }

  void start(int i, const std::string& state) {
    std::string initial_cluster;
    for (int j = 0; j < size(); ++j)
      initial_cluster += (j ? "," : "") + std::string("m") + std::to_string(j) + "=" + peer_url(j);
    std::vector<std::string> args = {kEtcdBinary, "--name", "m" + std::to_string(i), "--data-dir", data_dir(i),
                                     "--listen-client-urls", client_url(i), "--advertise-client-urls", client_url(i),
                                     "--listen-peer-urls", peer_url(i), "--initial-advertise-peer-urls", peer_url(i),
                                     "--initial-cluster", initial_cluster, "--initial-cluster-state", state,
                                     "--initial-cluster-token", token_, "--heartbeat-interval", "50",
                                     "--election-timeout", "500"};
    if (!tls_.cert_file.empty()) args.insert(args.end(), {"--cert-file", tls_.cert_file, "--key-file", tls_.key_file});
    if (!tls_.client_ca_file.empty())
      args.insert(args.end(), {"--client-cert-auth", "--trusted-ca-file", tls_.client_ca_file});
    args.insert(args.end(), extra_flags_.begin(), extra_flags_.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log = log_path(i);
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("EtcdCluster: fork failed");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int null_fd = ::open("/dev/null", O_RDONLY);
      int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      ::dup2(null_fd, 0);
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    members_[i].pid = pid;
  }

  // Whether member i answers /health with "true" (it has a leader) in time;
  // false at once when it exited (a port taken, a bad flag).
  bool wait_healthy(int i, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    auto client = http_client(i);
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(members_[i].pid, nullptr, WNOHANG) == members_[i].pid) {
        members_[i].pid = -1;
        return false;
      }
      httplib::Result r = client->Get("/health");
      if (r && r->status == 200 && r->body.find("\"true\"") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  bool wait_all_healthy() {
    for (int i = 0; i < size(); ++i)
      if (!wait_healthy(i, std::chrono::seconds(20))) return false;
    return true;
  }

  void stop_all() {
    for (Member& m : members_)
      if (m.pid > 0) ::kill(m.pid, SIGTERM);
    for (Member& m : members_) {
      if (m.pid <= 0) continue;
      bool exited = false;
      for (int t = 0; t < 300 && !exited; ++t) {
        exited = ::waitpid(m.pid, nullptr, WNOHANG) == m.pid;
        if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!exited) {
        ::kill(m.pid, SIGKILL);
        ::waitpid(m.pid, nullptr, 0);
      }
      m.pid = -1;
    }
  }

  std::string log_tails() const {
    std::string out;
    for (int i = 0; i < size(); ++i) {
      std::ifstream in(log_path(i));
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      out += "--- member " + std::to_string(i) + " ---\n" + text.substr(text.size() > 1500 ? text.size() - 1500 : 0);
    }
    return out;
  }

  EtcdTlsFiles tls_;
  std::vector<std::string> extra_flags_;
  std::string dir_;
  std::string token_;
  std::vector<Member> members_;
};

// One 3-member cluster for the tests that need no private one, started on
// first use and stopped at exit. Tests delete every key in SetUp.
inline EtcdCluster& shared_etcd_cluster() {
  static EtcdCluster cluster(3);
  return cluster;
}

}  // namespace gradmesh::testing
