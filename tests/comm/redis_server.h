// Test support: a real redis-server on a free loopback port, owned by the test.
//
// Redis has no "--port 0", so a free port is found by binding a socket to
// port 0 and closing it; if another process grabs it first the server exits
// and the next port is tried. The server runs with no persistence in a
// private temporary directory and is stopped (SIGTERM, then SIGKILL) by the
// destructor; PR_SET_PDEATHSIG kills it too if the test process dies first.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace gradmesh::testing {

inline constexpr const char* kRedisServerBinary = "/usr/bin/redis-server";

inline bool redis_server_installed() { return ::access(kRedisServerBinary, X_OK) == 0; }

inline std::string redis_missing_message() {
  return std::string("skipped: ") + kRedisServerBinary +
         " not found; install the redis-server package to run the Redis store tests";
}

// A loopback TCP port with nothing listening on it (at the time of the call).
inline int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = -1;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  if (fd >= 0) ::close(fd);
  if (port < 0) throw std::runtime_error("free_loopback_port: cannot bind a loopback socket");
  return port;
}

// One command on a fresh connection, for test setup (FLUSHALL, LPUSH, ACL).
// Returns the reply as text ("" for nil, the number for integers); throws
// on error replies.
inline std::string redis_command(int port, const std::string& password, const std::vector<std::string>& args) {
  redisContext* context = redisConnectWithTimeout("127.0.0.1", port, timeval{2, 0});
  if (context == nullptr || context->err) {
    std::string why = context ? context->errstr : "out of memory";
    if (context) redisFree(context);
    throw std::runtime_error("redis_command: cannot connect: " + why);
  }
  auto call = [&](const std::vector<std::string>& argv) {
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    for (const std::string& a : argv) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* reply = static_cast<redisReply*>(redisCommandArgv(context, static_cast<int>(argv.size()), ptrs.data(), lens.data()));
    if (reply == nullptr) throw std::runtime_error(std::string("redis_command: ") + context->errstr);
    std::string text = reply->type == REDIS_REPLY_INTEGER ? std::to_string(reply->integer)
                       : reply->str                       ? std::string(reply->str, reply->len)
                                                          : "";
    bool failed = reply->type == REDIS_REPLY_ERROR;
    freeReplyObject(reply);
    if (failed) throw std::runtime_error("redis_command " + argv[0] + ": " + text);
    return text;
  };
  try {
    if (!password.empty()) call({"AUTH", password});
    std::string out = call(args);
    redisFree(context);
    return out;
  } catch (...) {
    redisFree(context);
    throw;
  }
}

class RedisServer {
 public:
  // Starts the server; REQUIRES: redis_server_installed(). Throws when it
  // does not answer within a few seconds.
  explicit RedisServer(std::string password) : password_(std::move(password)) {
    std::string pattern = (std::filesystem::temp_directory_path() / "gradmesh-redis-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("RedisServer: mkdtemp failed");
    dir_ = pattern;
    for (int attempt = 0; attempt < 5 && pid_ < 0; ++attempt) try_start(free_loopback_port());
    if (pid_ < 0) {
      std::ifstream log(dir_ + "/redis.log");
      std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
      throw std::runtime_error("RedisServer: redis-server did not answer within 5 s; its log:\n" +
                               text.substr(text.size() > 2000 ? text.size() - 2000 : 0));
    }
  }
  ~RedisServer() {
    stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  const std::string& password() const { return password_; }
  // "redis://:password@127.0.0.1:port/db" (or without the password part).
  std::string endpoint(int db = 0) const {
    std::string auth = password_.empty() ? "" : ":" + password_ + "@";
    return "redis://" + auth + "127.0.0.1:" + std::to_string(port_) + "/" + std::to_string(db);
  }
  std::string command(const std::vector<std::string>& args) const { return redis_command(port_, password_, args); }

  // A new server on the same port, as a restarted Redis without persistence:
  // every key is gone and every client's connection was dropped. Throws when
  // it does not answer. Call it from the thread that outlives the server
  // (PR_SET_PDEATHSIG fires when the starting thread ends).
  void restart() {
    stop();
    const int port = port_;
    for (int attempt = 0; attempt < 100 && pid_ < 0; ++attempt) {
      try_start(port);  // the old socket may linger a moment
      if (pid_ < 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (pid_ < 0) throw std::runtime_error("RedisServer: cannot restart on port " + std::to_string(port));
  }

  // SIGTERM, then SIGKILL if it has not exited after 3 s.
  void stop() {
    if (pid_ < 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 300; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  void try_start(int port) {
    std::vector<std::string> args = {kRedisServerBinary, "--bind", "127.0.0.1", "--port", std::to_string(port),
                                     "--save", "", "--appendonly", "no", "--dir", dir_,
                                     "--logfile", dir_ + "/redis.log", "--daemonize", "no"};
    if (!password_.empty()) args.insert(args.end(), {"--requirepass", password_});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) return;
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int null_fd = ::open("/dev/null", O_RDWR);
      ::dup2(null_fd, 0);
      ::dup2(null_fd, 1);
      ::dup2(null_fd, 2);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    pid_ = pid;
    port_ = port;
    for (int i = 0; i < 500; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {  // exited: port taken or bad option
        pid_ = -1;
        return;
      }
      try {
        if (command({"PING"}) == "PONG") return;
      } catch (const std::exception&) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
  }

  std::string password_;
  std::string dir_;
  pid_t pid_ = -1;
  int port_ = -1;
};

// One password-protected server for the tests that need no private one,
// started on first use and stopped at exit. Tests FLUSHALL it in SetUp.
inline RedisServer& shared_redis_server() {
  static RedisServer server("shared-test-pw-41d7");
  return server;
}

}  // namespace gradmesh::testing
