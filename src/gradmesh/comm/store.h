// Store: the small shared key-value space that ranks rendezvous through.
//
// Workers publish addresses, agree on ranks and wait for each other here; it
// is never on the data path. Implementations: FileStore (a directory; one
// machine, no server), RedisStore (a real redis-server; a cluster) and
// EtcdStore (a replicated etcd cluster, which survives losing a member). Every
// blocking call takes a timeout and fails with Error(kTimeout) naming the
// keys still missing; a server that cannot be reached, refuses the password
// or drops the connection is Error(kComm) with a distinct message.
//
// Thread-safety: a Store may be used from several threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gradmesh::comm {

using Millis = std::chrono::milliseconds;
// The deadline of a store wait (and Work::wait) that names none, as in
// PyTorch (300 s). A real timeout, never a marker: collectives say "use the
// group's timeout" with an empty std::optional (process_group.h).
inline constexpr Millis kDefaultTimeout{300'000};

class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any earlier value.
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits until `key` exists and returns its value.
  virtual std::string get(const std::string& key, Millis timeout = kDefaultTimeout) = 0;
  // Atomically adds `delta` to the decimal integer at `key` (absent = 0); returns the new value.
  // A value that is not a decimal integer is Error(kFormat) naming the key.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Atomically: if the current value equals `expected` (an absent key matches
  // only an empty `expected`), sets `desired`. Returns the value after the call.
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  // Waits until every key exists.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout = kDefaultTimeout) = 0;
  // Whether every key exists now (never blocks).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Deletes `key`; returns whether it existed.
  virtual bool remove(const std::string& key) = 0;
  // The endpoint, for messages: "file:///tmp/run/store", "redis://host:6379/0", "etcd://h1:2379,h2:2379".
  virtual std::string describe() const = 0;
  // Sets `key` to `value` for as long as the caller calls this again within
  // `ttl`: without a call the store itself deletes the key (etcd: a lease),
  // so the key says its owner is alive. False, setting nothing, for a store
  // without such keys.
  virtual bool set_expiring(const std::string& key, const std::string& value, Millis ttl) {
    (void)key, (void)value, (void)ttl;
    return false;
  }
};

// All keys of `inner` under "<prefix>/": separates runs and restart
// generations sharing one server ("<run_id>/<generation>/...").
class PrefixStore : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> inner, std::string prefix);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout = kDefaultTimeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Millis timeout = kDefaultTimeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  std::string describe() const override;
  bool set_expiring(const std::string& key, const std::string& value, Millis ttl) override;

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;
  std::shared_ptr<Store> inner_;
  std::string prefix_;
};

// For stores whose wait() polls check() (Redis, etcd): waits until every key
// exists, or throws Error(kTimeout) naming the keys still missing.
void wait_by_polling(Store& store, const std::vector<std::string>& keys, Millis timeout);

// value + delta for add(); Error(kFormat) naming the store and key when the sum overflows.
int64_t add_without_overflow(const std::string& store, const std::string& key, int64_t value, int64_t delta);

// Opens a store from an endpoint URL:
//   file:///abs/dir                        FileStore in that directory (created if missing)
//   redis://[:password@]host:port[/db]     RedisStore (the password may also come from GRADMESH_REDIS_PASSWORD)
//   etcd://[user:password@]h1:2379,h2:2379 EtcdStore on those members (etcds:// for TLS; etcd_store.h
//                                          lists the GRADMESH_ETCD_* variables it reads)
// A malformed endpoint is Error(kUsage) saying what was expected.
// `retry_window`: how long a call keeps reconnecting to an unreachable server
// before it fails (store sessions survive a dropped connection or a restarted
// server); empty = GRADMESH_STORE_TIMEOUT (60 s), 0 = fail at once.
std::shared_ptr<Store> open_store(const std::string& endpoint, Millis connect_timeout = Millis{10'000},
                                  std::optional<Millis> retry_window = std::nullopt);

}  // namespace gradmesh::comm
