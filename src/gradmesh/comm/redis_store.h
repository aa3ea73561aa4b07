// RedisStore: a Store on a real redis-server, for ranks on several machines.
//
// One hiredis connection, used under a mutex (the store is off the data path;
// one round trip per call is plenty). set = SET, get and wait poll GET/EXISTS
// with a 1 ms to 50 ms backoff, add = INCRBY, remove = DEL, compare_set is one
// Lua script (EVAL), so it is atomic on the server. Values and keys are binary
// safe (arguments are sent with explicit lengths).
//
// Errors always name the endpoint ("redis://host:port/db"), never the password:
//   unreachable server     Error(kComm) "cannot connect to ...: Connection refused; is redis-server running?"
//   wrong password         Error(kComm) "... authentication failed: WRONGPASS ...; check the password ..."
//   password missing       Error(kComm) "... the server requires a password (NOAUTH ...) ..."
//   connection dropped     Error(kComm) "... connection lost during GET 'key': ..."; the next call reconnects
//   still unreachable      Error(kComm) "... unreachable for 60.0 s: ..." once the retry window (below) is spent
//   wait past its deadline Error(kTimeout) naming the missing keys
// A reply of an unexpected type is Error(kComm) naming the command.
//
// The session survives the server: with a retry window (GRADMESH_STORE_TIMEOUT
// through open_store), a call that meets a refused, reset or timed-out
// connection reconnects with a backoff of 50 ms doubling to 1 s until the
// window is spent, then fails naming how long the store was unreachable.
// Every call is safe to repeat except add (INCRBY): a reply lost after the
// command was sent may have been applied, so add is retried only while the
// connection could not even be opened. Authentication and protocol errors are
// never retried: waiting does not fix them.
//
// Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "gradmesh/comm/store.h"

struct redisContext;
struct redisReply;

namespace gradmesh::comm {

class RedisStore : public Store {
 public:
  // Connects, authenticates (AUTH password, or AUTH user password for a
  // Redis 6+ ACL user when `user` is set) and selects `db` at once, so a bad
  // endpoint fails here rather than at the first rendezvous. An empty
  // `password` sends no AUTH. `connect_timeout` bounds the connection and
  // every single command.
  // `retry_window` 0 fails at the first lost connection (the next call reconnects).
  RedisStore(std::string host, int port, std::string password = "", int db = 0,
             Millis connect_timeout = Millis{10'000}, std::string user = "", Millis retry_window = Millis{0});
  ~RedisStore() override;
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout = kDefaultTimeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Millis timeout = kDefaultTimeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  std::string describe() const override;

 private:
  struct ContextDeleter {
    void operator()(redisContext* context) const;
  };
  struct ReplyDeleter {
    void operator()(redisReply* reply) const;
  };
  using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

  // One command (args[0] is its name); reconnects first if the connection was
  // lost, and within the retry window again after a transient failure (a
  // command that is not `repeatable` only while nothing was sent). Returns any
  // reply, error replies included; throws only when there is no reply. `key`
  // is only for messages.
  Reply run(const std::vector<std::string>& args, const std::string& key, bool repeatable = true);
  void connect_locked();
  Reply run_locked(const std::vector<std::string>& args, const std::string& key);
  [[noreturn]] void throw_unexpected(const redisReply& reply, const std::string& command, const std::string& key) const;

  std::string host_;
  int port_;
  std::string password_;
  int db_;
  Millis connect_timeout_;
  std::string user_;
  Millis retry_window_;
  std::mutex mu_;
  bool transient_ = false;  // the last failure was a refused, lost or timed-out connection
  std::unique_ptr<redisContext, ContextDeleter> context_;  // null after a lost connection
};

}  // namespace gradmesh::comm
