#include "gradmesh/comm/endpoint.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>
#include <optional>
#include <thread>

#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::comm {
namespace {

constexpr const char* kExpected =
    "expected file:///dir, redis://[:password@]host:port[/db] or etcd://[user:password@]host:port[,host:port...]";

[[noreturn]] void bad_endpoint(const std::string& endpoint, const std::string& why) {
  throw_error(ErrorKind::kUsage, "rendezvous endpoint '" + redact_endpoint(endpoint) + "'",
              why.empty() ? std::string(kExpected) : why + "; " + kExpected);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(const std::string& endpoint, const std::string& text, const char* what) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    int hi = i + 2 < text.size() ? hex_digit(text[i + 1]) : -1;
    int lo = i + 2 < text.size() ? hex_digit(text[i + 2]) : -1;
    if (hi < 0 || lo < 0)
      bad_endpoint(endpoint, std::string("bad percent escape in the ") + what + " (write '%' as %25)");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// Splits "user:password@rest" into `out` and returns the rest. `example`
// shows the accepted forms in the message for a user-info without ':'.
std::string take_userinfo(const std::string& endpoint, std::string rest, const char* example, StoreEndpoint& out) {
  size_t at = rest.rfind('@');
  if (at == std::string::npos) return rest;
  std::string userinfo = rest.substr(0, at);
  size_t colon = userinfo.find(':');
  if (colon == std::string::npos)
    bad_endpoint(endpoint, std::string("the part before '@' needs a ':' before the password (") + example + ")");
  out.user = percent_decode(endpoint, userinfo.substr(0, colon), "user name");
  out.password = percent_decode(endpoint, userinfo.substr(colon + 1), "password");
  return rest.substr(at + 1);
}

// "host", "host:port", "[v6]" or "[v6]:port"; `scheme` only for messages.
HostPort parse_authority(const std::string& endpoint, const std::string& authority, int default_port,
                         const char* scheme) {
  HostPort out{"", default_port};
  std::string port;
  bool has_port = false;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string::npos) bad_endpoint(endpoint, "unclosed '[' around an IPv6 address");
    out.host = authority.substr(1, close - 1);
    std::string after = authority.substr(close + 1);
    if (!after.empty() && after[0] != ':') bad_endpoint(endpoint, "expected ':port' after ']'");
    has_port = !after.empty();
    if (has_port) port = after.substr(1);
  } else {
    size_t colon = authority.find(':');
    if (colon != std::string::npos && authority.find(':', colon + 1) != std::string::npos)
      bad_endpoint(endpoint, std::string("write IPv6 addresses in brackets: ") + scheme + "://[::1]:" +
                                 std::to_string(default_port));
    out.host = authority.substr(0, colon);
    has_port = colon != std::string::npos;
    if (has_port) port = authority.substr(colon + 1);
  }
  if (out.host.empty()) bad_endpoint(endpoint, "missing host");
  if (has_port) {
    const std::optional<int64_t> number = try_parse_int(port, 1, 65535);
    if (!number) bad_endpoint(endpoint, "port '" + port + "' is not a number in 1..65535");
    out.port = static_cast<int>(*number);
  }
  return out;
}

void parse_redis(const std::string& endpoint, std::string rest, StoreEndpoint& out) {
  rest = take_userinfo(endpoint, rest, "redis://:password@host or redis://user:password@host", out);
  if (rest.find_first_of("?#") != std::string::npos) bad_endpoint(endpoint, "query parameters are not supported");
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  std::string db = slash == std::string::npos ? "" : rest.substr(slash + 1);
  const HostPort address = parse_authority(endpoint, authority, 6379, "redis");
  out.host = address.host;
  out.port = address.port;
  if (!db.empty()) {
    const std::optional<int64_t> number = try_parse_int(db, 0, std::numeric_limits<int>::max());
    if (!number) bad_endpoint(endpoint, "database '" + db + "' is not a non-negative integer");
    out.db = static_cast<int>(*number);
  }
}

// "h1:2379,h2:2379,[::1]:2379", a trailing '/' allowed. No path: the store
// keeps its keys under a fixed prefix (etcd_store.h).
void parse_etcd(const std::string& endpoint, std::string rest, StoreEndpoint& out) {
  const char* scheme = out.tls ? "etcds" : "etcd";
  rest = take_userinfo(endpoint, rest, "etcd://user:password@host, or etcd://user:@host with the password in "
                                       "GRADMESH_ETCD_PASSWORD_FILE", out);
  if (rest.find_first_of("?#") != std::string::npos) bad_endpoint(endpoint, "query parameters are not supported");
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos)
    bad_endpoint(endpoint, std::string("a path is not supported (gradmesh keeps its keys under 'gradmesh/'); "
                                       "list the members as ") + scheme + "://h1:2379,h2:2379,h3:2379");
  if (rest.empty()) bad_endpoint(endpoint, "missing host");
  size_t begin = 0;
  for (;;) {
    const size_t comma = rest.find(',', begin);
    const std::string authority = rest.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (authority.empty()) bad_endpoint(endpoint, "an empty member in the host list (two commas, or one at an end)");
    out.members.push_back(parse_authority(endpoint, authority, kDefaultEtcdPort, scheme));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (out.members.size() > kMaxEtcdMembers)
    bad_endpoint(endpoint, std::to_string(out.members.size()) + " members; at most " + std::to_string(kMaxEtcdMembers) +
                               " (an etcd cluster has 3, 5 or 7)");
}

}  // namespace

std::string StoreEndpoint::describe() const {
  switch (scheme) {
    case Scheme::kFile: return "file://" + path;
    case Scheme::kRedis: return describe_redis(host, port, db);
    case Scheme::kEtcd: return describe_etcd(members, tls);
  }
  return "?";
}

const char* password_variable(StoreEndpoint::Scheme scheme) {
  switch (scheme) {
    case StoreEndpoint::Scheme::kFile: return nullptr;
    case StoreEndpoint::Scheme::kRedis: return "GRADMESH_REDIS_PASSWORD";
    case StoreEndpoint::Scheme::kEtcd: return "GRADMESH_ETCD_PASSWORD";
  }
  return nullptr;
}

namespace {

std::string host_port_text(const std::string& host, int port) {
  std::string shown = host.find(':') == std::string::npos ? host : "[" + host + "]";
  return shown + ":" + std::to_string(port);
}

}  // namespace

std::string describe_redis(const std::string& host, int port, int db) {
  return "redis://" + host_port_text(host, port) + "/" + std::to_string(db);
}

std::string describe_etcd(const std::vector<HostPort>& members, bool tls) {
  std::string out = tls ? "etcds://" : "etcd://";
  for (size_t i = 0; i < members.size(); ++i) out += (i ? "," : "") + host_port_text(members[i].host, members[i].port);
  return out;
}

namespace {

// Where an endpoint's user-info ("user:password@") sits, if it has one.
struct Userinfo {
  size_t begin;       // after "scheme://"
  size_t at;          // the '@'
  std::string user;   // before the ':' ("" without one)
  bool has_password;  // a ':' separates user and password
};

std::optional<Userinfo> find_userinfo(const std::string& endpoint) {
  const size_t scheme_end = endpoint.find("://");
  if (scheme_end == std::string::npos) return std::nullopt;
  const size_t begin = scheme_end + 3;
  const size_t at = endpoint.rfind('@');
  if (at == std::string::npos || at < begin) return std::nullopt;
  const std::string userinfo = endpoint.substr(begin, at - begin);
  const size_t colon = userinfo.find(':');
  if (colon == std::string::npos) return Userinfo{begin, at, "", false};
  return Userinfo{begin, at, userinfo.substr(0, colon), true};
}

}  // namespace

std::string redact_endpoint(const std::string& endpoint) {
  // Without a ':', all of the user-info is hidden: it may be a password.
  const std::optional<Userinfo> u = find_userinfo(endpoint);
  if (!u) return endpoint;
  return endpoint.substr(0, u->begin) + u->user + ":***" + endpoint.substr(u->at);
}

std::string endpoint_without_password(const std::string& endpoint) {
  const std::optional<Userinfo> u = find_userinfo(endpoint);
  if (!u || !u->has_password) return endpoint;
  return endpoint.substr(0, u->begin) + (u->user.empty() ? "" : u->user + ":@") + endpoint.substr(u->at + 1);
}

StoreEndpoint parse_store_endpoint(const std::string& endpoint) {
  size_t scheme_end = endpoint.find("://");
  if (scheme_end == std::string::npos) bad_endpoint(endpoint, "");
  std::string scheme = endpoint.substr(0, scheme_end);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string rest = endpoint.substr(scheme_end + 3);
  StoreEndpoint out;
  if (scheme == "file") {
    out.scheme = StoreEndpoint::Scheme::kFile;
    if (rest.empty()) bad_endpoint(endpoint, "missing directory");
    if (rest[0] != '/')
      bad_endpoint(endpoint, "'" + rest + "' is not an absolute directory (file://dir would name a host); "
                             "write three slashes: file:///abs/dir");
    out.path = rest;
    return out;
  }
  if (scheme == "redis") {
    out.scheme = StoreEndpoint::Scheme::kRedis;
    parse_redis(endpoint, rest, out);
    return out;
  }
  if (scheme == "etcd" || scheme == "etcds") {
    out.scheme = StoreEndpoint::Scheme::kEtcd;
    out.tls = scheme == "etcds";
    parse_etcd(endpoint, rest, out);
    return out;
  }
  bad_endpoint(endpoint, "unknown scheme '" + scheme + "://'");
}

bool poll_until(Millis timeout, const std::function<bool()>& done) {
  using Clock = std::chrono::steady_clock;
  // Caps "forever" so the deadline arithmetic cannot overflow.
  Millis budget = std::clamp(timeout, Millis{0}, Millis{std::chrono::hours(24 * 365)});
  Clock::time_point deadline = Clock::now() + budget;
  Millis pause{1};
  for (;;) {
    if (done()) return true;
    Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, Millis{50});
  }
}

std::string printable_key(const std::string& key) {
  std::string out;
  for (unsigned char c : key) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

void throw_store_timeout(const std::string& store, Millis timeout, const std::vector<std::string>& missing) {
  constexpr size_t kShown = 16;
  std::string keys;
  for (size_t i = 0; i < missing.size() && i < kShown; ++i) keys += (i ? ", " : "") + printable_key(missing[i]);
  if (missing.size() > kShown) keys += " and " + std::to_string(missing.size() - kShown) + " more";
  throw_error(ErrorKind::kTimeout, store,
              "timed out after " + duration_text(std::max(timeout, Millis{0})) + " waiting for key" +
                  (missing.size() == 1 ? "" : "s") +
                  ": " + keys + "; check that the processes which set them are running, or raise GRADMESH_COMM_TIMEOUT");
}

}  // namespace gradmesh::comm
