// Store endpoints, and the waiting rules every Store implementation shares.
//
// An endpoint names a rendezvous store in one string, so it travels through
// the launcher's command line (--rdzv-endpoint) and the workers' environment
// (GRADMESH_STORE):
//   file:///abs/dir                                         FileStore (one machine)
//   redis://[[user]:password@]host[:port][/db]              RedisStore (port 6379, db 0 by default)
//   etcd://[user:[password]@]host[:port][,host[:port]...]   EtcdStore over 1 to 16 members (port 2379)
//   etcds://...                                             the same over TLS (https)
// The password is percent-decoded (so '@', ':' and '/' can be written as %40,
// %3A, %2F). Because endpoints may carry a password, every message built from
// one shows it redacted.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gradmesh/comm/store.h"

namespace gradmesh::comm {

// A server's address: a name or an address, IPv6 without brackets.
struct HostPort {
  std::string host;
  int port = 0;
};

inline constexpr int kDefaultEtcdPort = 2379;
inline constexpr size_t kMaxEtcdMembers = 16;  // more is a typo: etcd clusters have 3, 5 or 7 members

struct StoreEndpoint {
  enum class Scheme { kFile, kRedis, kEtcd };
  Scheme scheme = Scheme::kFile;
  std::string path;      // kFile: an absolute directory
  std::string host;      // kRedis: name or address, IPv6 without brackets
  int port = 6379;       // kRedis
  std::string user;      // kRedis: ACL user (Redis 6+); kEtcd: etcd user; empty = none given
  std::string password;  // kRedis, kEtcd: empty = none given in the endpoint
  int db = 0;            // kRedis: SELECT index
  std::vector<HostPort> members;  // kEtcd: the cluster's client URLs, in the order they are tried
  bool tls = false;               // kEtcd: etcds:// (https, GRADMESH_ETCD_CACERT/CERT/KEY)

  // "file:///dir", "redis://host:port/db" or "etcd://h1:2379,h2:2379"; never
  // the user or the password.
  std::string describe() const;
};

// Parses an endpoint; anything malformed is Error(kUsage) that quotes the
// endpoint (password redacted) and says what was expected.
StoreEndpoint parse_store_endpoint(const std::string& endpoint);

// The endpoint with any user-info password replaced by "***", for messages.
std::string redact_endpoint(const std::string& endpoint);

// The endpoint without its user-info password (a user name stays, as
// redis://user:@host): the launcher hands its workers the store without the
// password in GRADMESH_STORE (parse_store_endpoint() gives the password).
std::string endpoint_without_password(const std::string& endpoint);

// The environment variable a worker reads the store's password from when
// GRADMESH_STORE carries none: GRADMESH_REDIS_PASSWORD or GRADMESH_ETCD_PASSWORD
// (nullptr for file stores, which have no password).
const char* password_variable(StoreEndpoint::Scheme scheme);

// "redis://host:port/db" with IPv6 hosts in brackets.
std::string describe_redis(const std::string& host, int port, int db);
// "etcd://h1:2379,[::1]:2379" ("etcds://" with `tls`).
std::string describe_etcd(const std::vector<HostPort>& members, bool tls);

// Calls `done` until it returns true, sleeping 1 ms doubling to 50 ms between
// calls (rendezvous waits last seconds, so polling costs nothing measurable
// and needs no server-side notification). `done` runs at least once, also
// with a zero timeout. Returns false when `timeout` passed first.
bool poll_until(Millis timeout, const std::function<bool()>& done);

// Error(kTimeout): "<store>: timed out after 5.0 s waiting for keys: a, b; ...".
[[noreturn]] void throw_store_timeout(const std::string& store, Millis timeout,
                                      const std::vector<std::string>& missing);

// A key made printable for messages: bytes outside 0x20..0x7e as \xNN.
std::string printable_key(const std::string& key);

}  // namespace gradmesh::comm
