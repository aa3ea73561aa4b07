// EtcdStore: a Store on a replicated etcd cluster (3 or 5 members), so the
// rendezvous survives the loss of any one machine, the store's included.
//
// It speaks etcd's v3 JSON gateway (POST /v3/kv/range, /v3/kv/put,
// /v3/kv/deleterange, /v3/kv/txn, /v3/lease/*, /v3/auth/authenticate; keys
// and values travel base64-encoded, so both are binary safe) over one
// keep-alive HTTP/1.1 connection per member, used under a mutex: the store is
// off the data path. Every store key K is the etcd key "gradmesh/kv/K", so the
// empty key is valid and gradmesh's keys stay apart from the cluster's other
// users (a role with readwrite on the prefix "gradmesh/" is all it needs).
//
//   set          put
//   get, wait    poll range with the backoff every Store uses (1 ms doubling to 50 ms)
//   check        one txn of count-only ranges (128 keys per txn, etcd's --max-txn-ops)
//   remove       deleterange
//   compare_set  one txn: value == expected (an absent key matches an empty
//                `expected` through create_revision == 0), then put, else range
//   add          read, then a txn conditioned on the key's mod_revision, again
//                until it wins. The txn also writes a receipt (one key per
//                store, on a lease) that the next read checks first, so an
//                add whose reply was lost and that is sent again, or read
//                again, counts once.
//
// Failover: a call goes to the member that answered last, and on to the next
// when one fails transiently (connection refused, reset or timed out, HTTP
// 5xx, "etcdserver: leader changed", "no leader", "request timed out"). When
// every member failed, the call retries all of them with a backoff of 50 ms
// doubling to 1 s for up to `retry_window` (GRADMESH_STORE_TIMEOUT through
// open_store; 0: fail at once), then fails:
//   Error(kComm) "cannot reach any etcd member of etcd://h1:2379,h2:2379,h3:2379: ..."
// naming each member's last failure. Every request is safe to send twice
// (add and compare_set by their compares), except that remove may report
// false for a key it deleted when the member that applied it died before
// answering.
//
// Authentication: with a user, the store signs in at each member it talks to
// (/v3/auth/authenticate; a member that lags may not know a token another
// one issued yet) and sends the token in the Authorization header, signing
// in again once when a member rejects it ("invalid auth token": etcd forgets
// a token unused for --auth-token-ttl, 5 minutes). A wrong password is
// Error(kComm) "... authentication failed as user 'u': ..."; no message ever
// shows the password.
//
// TLS (etcds://): members are verified against `ca_file` (default: the
// system's CAs) and the host name; `cert_file`/`key_file` present a client
// certificate to clusters started with --client-cert-auth.
//
// Errors name the member or the cluster (etcd://host:port), never a password.
// A reply that is not JSON, or lacks the fields of its call, is Error(kComm)
// naming the member and the call.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "gradmesh/comm/endpoint.h"
#include "gradmesh/comm/store.h"

namespace gradmesh::comm {

struct EtcdOptions {
  std::vector<HostPort> members;  // REQUIRES: 1 to kMaxEtcdMembers; tried in this order first
  bool tls = false;               // https to every member
  std::string ca_file;            // tls: PEM bundle that signed the members' certificates; empty = the system's
  std::string cert_file;          // tls: client certificate (PEM) with its key_file; empty = none
  std::string key_file;
  std::string user;      // empty = the cluster has authentication off
  std::string password;  // REQUIRES: empty unless `user` is set
  Millis connect_timeout{10'000};  // bounds each connection, and each request to one member (at most 1.5 s)
  Millis retry_window{0};          // how long a call retries once every member failed
};

// The options for an etcd:// or etcds:// endpoint: the user from the endpoint
// or GRADMESH_ETCD_USER, the password from the endpoint, GRADMESH_ETCD_PASSWORD
// or the file GRADMESH_ETCD_PASSWORD_FILE (in that order), the TLS files from
// GRADMESH_ETCD_CACERT, GRADMESH_ETCD_CERT and GRADMESH_ETCD_KEY. TLS files
// with a plain etcd:// endpoint are Error(kUsage) (EtcdStore checks): they
// mean TLS was intended.
EtcdOptions etcd_options_from_environment(const StoreEndpoint& endpoint, Millis connect_timeout, Millis retry_window);

class EtcdStore : public Store {
 public:
  // Checks the options (Error(kUsage), or Error(kIo) for unreadable TLS files)
  // and makes one request at once, authenticating if there is a user, so a
  // bad endpoint or password fails here rather than at the first rendezvous.
  explicit EtcdStore(EtcdOptions options);
  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout = kDefaultTimeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Millis timeout = kDefaultTimeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  // "etcd://h1:2379,h2:2379" ("etcds://..." with TLS); no user, no password.
  std::string describe() const override;

  // Leases, for liveness: a key set with a lease disappears when the lease
  // is not kept alive for `ttl` (etcd rounds up to whole seconds and to its
  // own minimum, 1.5 election timeouts). Returns the lease id.
  int64_t grant_lease(Millis ttl);
  // Restarts the lease's ttl. Error(kComm) "lease ... has expired" when it
  // expired or was revoked: its keys are gone, grant a new one and set them again.
  void keep_alive(int64_t lease);
  // set(), with the key deleted when `lease` ends. Error(kComm) when the
  // lease no longer exists.
  void set_with_lease(const std::string& key, const std::string& value, int64_t lease);
  // Ends the lease now, deleting its keys. A lease that already ended is not
  // an error: its keys are gone either way.
  void revoke_lease(int64_t lease);
  // The key on a lease of `ttl` that each call keeps alive (one lease per
  // ttl, granted again when it expired).
  bool set_expiring(const std::string& key, const std::string& value, Millis ttl) override;

 private:
  struct Cluster;  // the members' connections, tokens and the failover loop (etcd_store.cc)
  std::unique_ptr<Cluster> cluster_;
  const std::string store_id_;  // names this store's add receipt
  std::mutex add_mu_;           // serialises add(): one receipt per store
  uint64_t adds_ = 0;           // guarded by add_mu_: tags each add's receipt
  int64_t receipt_lease_ = 0;   // guarded by add_mu_: 0 until the first add
  std::mutex expiring_mu_;
  std::map<int64_t, int64_t> expiring_leases_;  // guarded by expiring_mu_: ttl in ms -> lease
};

}  // namespace gradmesh::comm
