#include "gradmesh/comm/etcd_store.h"

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string_view>
#include <thread>

#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/core/secret.h"
#include "gradmesh/core/sigpipe_block.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::comm {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kEtcdKeyPrefix = "gradmesh/kv/";
constexpr const char* kEtcdReceiptPrefix = "gradmesh/add-receipt/";
constexpr size_t kEtcdMaxTxnOps = 128;  // etcd's default --max-txn-ops
// An add's receipt must outlive the add, including a whole retry window.
constexpr Millis kMinReceiptTtl{600'000};
// The longest a request waits for one member's reply before the next member
// is asked. A healthy member answers in milliseconds; one whose leader just
// died holds a write until etcd's own request timeout (about 6 s), long
// enough for a heartbeat written through it to look stopped.
constexpr Millis kMemberReplyLimit{1500};

constexpr char kBase64Alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t group = 0;
    for (size_t j = 0; j < 3; ++j) group = group << 8 | (j < n ? static_cast<unsigned char>(bytes[i + j]) : 0u);
    for (size_t j = 0; j < 4; ++j) out += j <= n ? kBase64Alphabet[(group >> (18 - 6 * j)) & 63] : '=';
  }
  return out;
}

// nullopt for anything but padded standard base64 (what the gateway sends).
std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t group = 0;
    int padding = 0;
    for (size_t j = 0; j < 4; ++j) {
      const char c = text[i + j];
      const char* found = c == '=' ? nullptr : std::strchr(kBase64Alphabet, c);
      if (c == '=' && i + 4 == text.size() && j >= 2) {
        ++padding;
      } else if (found == nullptr || c == '\0' || padding > 0) {
        return std::nullopt;
      }
      group = group << 6 | (found ? static_cast<uint32_t>(found - kBase64Alphabet) : 0u);
    }
    for (int j = 0; j < 3 - padding; ++j) out += static_cast<char>((group >> (16 - 8 * j)) & 0xff);
  }
  return out;
}

std::string etcd_key(const std::string& key) { return base64_encode(kEtcdKeyPrefix + key); }

// The first bytes of a reply, printable, for messages about malformed ones.
std::string reply_excerpt(const std::string& body) {
  constexpr size_t kShown = 120;
  return "'" + printable_key(body.substr(0, kShown)) + (body.size() > kShown ? "...'" : "'");
}

// proto3 JSON: an int64 is a string ("12") or a number, and 0 is omitted.
std::optional<int64_t> int_field(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) return try_parse_int(it->get_ref<const std::string&>());
  return std::nullopt;
}

// bytes: base64, and "" is omitted.
std::optional<std::string> bytes_field(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return std::string();
  if (!it->is_string()) return std::nullopt;
  return base64_decode(it->get_ref<const std::string&>());
}

// Errors after which another member (or the same one later) may well succeed.
bool transient_etcd_error(int status, int code, const std::string& message) {
  constexpr int kGrpcDeadlineExceeded = 4;
  constexpr int kGrpcUnavailable = 14;
  if (status >= 500 || code == kGrpcUnavailable || code == kGrpcDeadlineExceeded) return true;
  for (const char* phrase : {"leader changed", "no leader", "timed out", "too many requests", "not capable",
                             "server stopped", "unhealthy cluster"})
    if (message.find(phrase) != std::string::npos) return true;
  return false;
}

// What to try, for the errors a user can fix.
std::string etcd_error_hint(const std::string& message) {
  if (message.find("user name is empty") != std::string::npos)
    return "; the cluster requires authentication: give the user in the endpoint (etcd://user:@host) or "
           "GRADMESH_ETCD_USER and its password in GRADMESH_ETCD_PASSWORD_FILE";
  if (message.find("permission denied") != std::string::npos)
    return "; the user needs a role with readwrite permission on the key prefix 'gradmesh/'";
  if (message.find("lease not found") != std::string::npos) return " (the lease expired or was revoked)";
  return "";
}

std::string transport_error_text(httplib::Error error, Millis timeout, bool tls) {
  // A TLS member closes a plain connection as soon as it has read the first
  // bytes, so the client sees the close while reading or, as often, while
  // still sending: both get the hint.
  const std::string plain_to_tls = tls ? "" : " (a member that serves TLS closes plain connections: etcds://)";
  switch (error) {
    case httplib::Error::Connection: return "cannot connect (connection refused or host unreachable)";
    case httplib::Error::ConnectionTimeout: return "no connection within " + seconds_text(timeout);
    case httplib::Error::Read:
      return "no reply within " + seconds_text(timeout) + ", or the connection was closed" + plain_to_tls;
    case httplib::Error::Write: return "the connection was closed while sending" + plain_to_tls;
    case httplib::Error::SSLConnection:
      return "TLS handshake failed (does the member serve TLS, and accept the client certificate?)";
    case httplib::Error::SSLLoadingCerts: return "cannot load the TLS certificates";
    case httplib::Error::SSLServerVerification:
      return "the member's certificate does not verify against the CA (GRADMESH_ETCD_CACERT) or names another host";
    default: return "HTTP request failed (" + httplib::to_string(error) + ")";
  }
}

enum class Verdict {
  kOk,
  kTransient,      // try the next member
  kFatal,          // fail the call: waiting or another member will not fix it
  kRejectedToken,  // authenticate again on this member
};

struct Attempt {
  Verdict verdict = Verdict::kOk;
  Json body;
  std::string reason;  // kTransient, kFatal: what happened, for messages
};

// An error reply: unary calls answer {"error": "...", "code": N}, streaming
// ones (keepalive) {"error": {"grpc_code": N, "message": "..."}}. One whose
// message holds `tolerated` is kOk, for the caller to read.
Attempt judge_error_reply(Json reply, int status, const std::string& tolerated) {
  const Json& error = reply["error"];
  const Json& detail = error.is_object() ? error : reply;
  std::string message = error.is_string() ? error.get<std::string>() : "";
  if (auto m = detail.find("message"); m != detail.end() && m->is_string()) message = m->get<std::string>();
  auto code_field = detail.find(error.is_object() ? "grpc_code" : "code");
  const int code = code_field != detail.end() && code_field->is_number_integer() ? code_field->get<int>() : -1;
  const std::string reason = message + " (HTTP " + std::to_string(status) + ")";
  if (message.find("invalid auth token") != std::string::npos) return {Verdict::kRejectedToken, {}, reason};
  if (transient_etcd_error(status, code, message)) return {Verdict::kTransient, {}, reason};
  if (!tolerated.empty() && message.find(tolerated) != std::string::npos) return {Verdict::kOk, std::move(reply), ""};
  return {Verdict::kFatal, {}, reason + etcd_error_hint(message)};
}

// A reply and the member that sent it, for messages about its contents.
struct EtcdReply {
  Json body;
  std::string member;
};

[[noreturn]] void throw_bad_reply(const EtcdReply& reply, const std::string& what, const std::string& detail) {
  throw_error(ErrorKind::kComm, reply.member,
              "unexpected reply to " + what + ": " + detail + " (" + reply_excerpt(reply.body.dump()) + ")");
}

struct EtcdKeyValue {
  std::string value;
  int64_t mod_revision = 0;
};

// The key-values of a range response (none when the key is absent).
std::vector<EtcdKeyValue> range_kvs(const EtcdReply& reply, const Json& range, const std::string& what) {
  if (!range.is_object()) throw_bad_reply(reply, what, "a range response is not an object");
  auto kvs = range.find("kvs");
  if (kvs == range.end()) return {};
  if (!kvs->is_array()) throw_bad_reply(reply, what, "'kvs' is not an array");
  std::vector<EtcdKeyValue> out;
  for (const Json& kv : *kvs) {
    if (!kv.is_object()) throw_bad_reply(reply, what, "a key-value is not an object");
    std::optional<std::string> value = bytes_field(kv, "value");
    std::optional<int64_t> mod_revision = int_field(kv, "mod_revision");
    if (!value || !mod_revision) throw_bad_reply(reply, what, "a key-value's 'value' or 'mod_revision' is malformed");
    out.push_back({std::move(*value), *mod_revision});
  }
  return out;
}

// The responses of a txn, checked to be `count` objects holding `field`
// ("response_range", "response_put", "response_txn").
std::vector<const Json*> txn_responses(const EtcdReply& reply, const Json& txn, const char* field, size_t count,
                                       const std::string& what) {
  auto responses = txn.is_object() ? txn.find("responses") : txn.end();
  if (!txn.is_object() || responses == txn.end() || !responses->is_array() || responses->size() != count)
    throw_bad_reply(reply, what, "expected " + std::to_string(count) + " txn responses");
  std::vector<const Json*> out;
  for (const Json& response : *responses) {
    auto inner = response.is_object() ? response.find(field) : response.end();
    if (!response.is_object() || inner == response.end()) throw_bad_reply(reply, what, std::string("no ") + field);
    out.push_back(&*inner);
  }
  return out;
}

bool txn_succeeded(const EtcdReply& reply, const Json& txn, const std::string& what) {
  auto it = txn.is_object() ? txn.find("succeeded") : txn.end();
  if (!txn.is_object() || (it != txn.end() && !it->is_boolean()))
    throw_bad_reply(reply, what, "'succeeded' is not a boolean");
  return it != txn.end() && it->get<bool>();
}

Json range_op(const std::string& key, bool count_only) {
  Json range = {{"key", key}};
  if (count_only) range["count_only"] = true;
  return Json{{"request_range", std::move(range)}};
}

Json put_op(const std::string& key, const std::string& value, int64_t lease = 0) {
  Json put = {{"key", key}, {"value", base64_encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return Json{{"request_put", std::move(put)}};
}

std::string random_store_id() {
  std::random_device device;
  char id[40];
  std::snprintf(id, sizeof id, "%08x%08x-%d", device(), device(), static_cast<int>(::getpid()));
  return id;
}

}  // namespace

struct EtcdStore::Cluster {
  struct Member {
    HostPort address;
    std::string name;  // "etcd://host:port", for messages
    std::unique_ptr<httplib::ClientImpl> client;  // made on first use
    std::string token;  // signed in at this member: a lagging member may not know another's token yet
  };

  explicit Cluster(EtcdOptions given);
  // One gateway call (POST `path`), failing over across the members as the
  // header describes. A fatal error whose message holds `tolerated` comes
  // back as a reply carrying "error" instead of being thrown. `what` names
  // the call in messages ("put 'rank/3'").
  EtcdReply call(const std::string& path, const Json& body, const std::string& what,
                 const std::string& tolerated = "");

  EtcdOptions options;
  std::string description;

 private:
  std::unique_ptr<httplib::ClientImpl> make_client(const HostPort& address) const;
  Millis reply_limit() const { return std::min(options.connect_timeout, kMemberReplyLimit); }
  Attempt attempt(Member& member, const std::string& path, const std::string& body, const std::string& tolerated);
  Attempt post(Member& member, const std::string& path, const std::string& body, const std::string& tolerated);
  Attempt authenticate(Member& member);

  std::vector<Member> members_;
  size_t preferred_ = 0;  // the member that answered last, tried first
  std::mutex mu_;
};

EtcdStore::Cluster::Cluster(EtcdOptions given) : options(std::move(given)) {
  description = describe_etcd(options.members, options.tls);
  if (options.members.empty() || options.members.size() > kMaxEtcdMembers)
    throw_error(ErrorKind::kUsage, "etcd store " + description,
                "expected 1 to " + std::to_string(kMaxEtcdMembers) + " members, got " +
                    std::to_string(options.members.size()));
  if (!options.password.empty() && options.user.empty())
    throw_error(ErrorKind::kUsage, description,
                "a password without a user: etcd authenticates users; write etcd://user:password@host or set "
                "GRADMESH_ETCD_USER");
  const bool tls_files = !options.ca_file.empty() || !options.cert_file.empty() || !options.key_file.empty();
  if (tls_files && !options.tls)
    throw_error(ErrorKind::kUsage, description,
                "TLS files are given (GRADMESH_ETCD_CACERT, GRADMESH_ETCD_CERT or GRADMESH_ETCD_KEY) but the "
                "endpoint is plain etcd://; write etcds:// to use TLS");
  if (options.cert_file.empty() != options.key_file.empty())
    throw_error(ErrorKind::kUsage, description,
                "a client certificate needs both its certificate (GRADMESH_ETCD_CERT) and its key (GRADMESH_ETCD_KEY)");
  for (const std::string* file : {&options.ca_file, &options.cert_file, &options.key_file})
    if (!file->empty() && ::access(file->c_str(), R_OK) != 0)
      throw_error(ErrorKind::kIo, description, "TLS file " + *file + " cannot be read");
  options.connect_timeout = std::max(options.connect_timeout, Millis{1});
  options.retry_window = std::max(options.retry_window, Millis{0});
  for (const HostPort& address : options.members)
    members_.push_back({address, describe_etcd({address}, options.tls), nullptr, ""});
}

std::unique_ptr<httplib::ClientImpl> EtcdStore::Cluster::make_client(const HostPort& address) const {
  std::unique_ptr<httplib::ClientImpl> client;
  if (options.tls) {
    auto tls = options.cert_file.empty()
                   ? std::make_unique<httplib::SSLClient>(address.host, address.port)
                   : std::make_unique<httplib::SSLClient>(address.host, address.port, options.cert_file, options.key_file);
    if (!tls->is_valid())
      throw_error(ErrorKind::kUsage, description,
                  "cannot load the client certificate " + options.cert_file + " with its key " + options.key_file +
                      ": expected a matching pair of PEM files");
    if (!options.ca_file.empty()) tls->set_ca_cert_path(options.ca_file);
    tls->enable_server_certificate_verification(true);
    client = std::move(tls);
  } else {
    client = std::make_unique<httplib::ClientImpl>(address.host, address.port);
  }
  client->set_connection_timeout(options.connect_timeout);
  client->set_read_timeout(reply_limit());
  client->set_write_timeout(reply_limit());
  client->set_keep_alive(true);
  // Headers and body go out in separate writes: with Nagle's algorithm the
  // body would wait for the server's delayed ACK (40 ms per request).
  client->set_tcp_nodelay(true);
  return client;
}

EtcdReply EtcdStore::Cluster::call(const std::string& path, const Json& body, const std::string& what,
                                   const std::string& tolerated) {
  const std::string text = body.dump();
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point started = Clock::now();
  Millis backoff{50};
  bool warned = false;
  for (;;) {
    std::string failures;
    for (size_t i = 0; i < members_.size(); ++i) {
      const size_t index = (preferred_ + i) % members_.size();
      Member& member = members_[index];
      Attempt a = attempt(member, path, text, tolerated);
      if (a.verdict == Verdict::kOk) {
        if (warned) log_warn(description + ": " + member.name + " answers again");
        preferred_ = index;
        return {std::move(a.body), member.name};
      }
      if (a.verdict != Verdict::kTransient) throw_error(ErrorKind::kComm, member.name, what + ": " + a.reason);
      failures += (failures.empty() ? "" : "; ") + member.name + ": " + a.reason;
    }
    const auto waited = std::chrono::duration_cast<Millis>(Clock::now() - started);
    if (waited + backoff > options.retry_window) {
      const std::string how_long = options.retry_window.count() == 0
                                       ? ""
                                       : " for " + seconds_text(waited) + " (the store timeout is " +
                                             seconds_text(options.retry_window) + ")";
      throw_error(ErrorKind::kComm, "cannot reach any etcd member of " + description,
                  what + " failed on every member" + how_long + ": " + failures +
                      "; is etcd running and reachable at these addresses?");
    }
    if (!warned)
      log_warn(description + ": " + what + " failed on every member (" + failures + "); retrying for up to " +
               seconds_text(options.retry_window));
    warned = true;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, Millis{1000});
  }
}

Attempt EtcdStore::Cluster::attempt(Member& member, const std::string& path, const std::string& body,
                                    const std::string& tolerated) {
  if (!member.client) member.client = make_client(member.address);
  const bool authenticates = !options.user.empty();
  if (authenticates && member.token.empty()) {
    Attempt auth = authenticate(member);
    if (auth.verdict != Verdict::kOk) return auth;
  }
  Attempt a = post(member, path, body, tolerated);
  if (a.verdict != Verdict::kRejectedToken) return a;
  if (!authenticates) return {Verdict::kFatal, {}, a.reason};
  Attempt auth = authenticate(member);
  if (auth.verdict != Verdict::kOk) return auth;
  a = post(member, path, body, tolerated);
  if (a.verdict == Verdict::kRejectedToken) a.verdict = Verdict::kFatal;
  return a;
}

Attempt EtcdStore::Cluster::post(Member& member, const std::string& path, const std::string& body,
                                 const std::string& tolerated) {
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.body = body;
  request.set_header("Content-Type", "application/json");
  if (!member.token.empty()) request.set_header("Authorization", member.token);
  httplib::Response response;
  httplib::Error transport_error = httplib::Error::Success;
  bool sent = false;
  {
    ScopedSigpipeBlock no_sigpipe;
    sent = member.client->send(request, response, transport_error);
  }
  Json reply = Json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  // cpp-httplib 0.11 (Debian 12) cannot read HTTP trailers, which etcd's
  // gateway (grpc-gateway 1.9) sends after every error reply: the read fails
  // after the whole body arrived. A complete JSON body is that reply.
  const bool complete = response.status > 0 && !reply.is_discarded();
  if (!sent && !(transport_error == httplib::Error::Read && complete)) {
    const bool fatal = transport_error == httplib::Error::SSLServerVerification ||
                       transport_error == httplib::Error::SSLLoadingCerts;
    return {fatal ? Verdict::kFatal : Verdict::kTransient, {},
            transport_error_text(transport_error, reply_limit(), options.tls)};
  }
  const int status = response.status;
  if (reply.is_discarded() || !reply.is_object()) {
    const std::string reason = "the reply is not a JSON object (HTTP " + std::to_string(status) + ": " +
                               reply_excerpt(response.body) + ")";
    if (status >= 500) return {Verdict::kTransient, {}, reason};
    return {Verdict::kFatal, {}, reason + "; is this address an etcd client URL?"};
  }
  if (reply.contains("error")) return judge_error_reply(std::move(reply), status, tolerated);
  if (status != 200)
    return {status >= 500 ? Verdict::kTransient : Verdict::kFatal, {},
            "HTTP " + std::to_string(status) + ": " + reply_excerpt(response.body)};
  return {Verdict::kOk, std::move(reply), ""};
}

Attempt EtcdStore::Cluster::authenticate(Member& member) {
  member.token.clear();
  const Json request = {{"name", options.user}, {"password", options.password}};
  Attempt a = post(member, "/v3/auth/authenticate", request.dump(), "");
  if (a.verdict == Verdict::kTransient) return a;
  const std::string failed = "authentication failed as user '" + printable_key(options.user) + "': ";
  if (a.verdict != Verdict::kOk) {
    const bool disabled = a.reason.find("authentication is not enabled") != std::string::npos;
    return {Verdict::kFatal, {}, failed + a.reason +
                                     (disabled ? "; the cluster does not use authentication: remove the user from the "
                                                 "endpoint and GRADMESH_ETCD_USER"
                                               : "; check the password in the endpoint, GRADMESH_ETCD_PASSWORD or "
                                                 "GRADMESH_ETCD_PASSWORD_FILE")};
  }
  auto token = a.body.find("token");
  if (token == a.body.end() || !token->is_string() || token->get_ref<const std::string&>().empty())
    return {Verdict::kFatal, {}, failed + "the reply has no token (" + reply_excerpt(a.body.dump()) + ")"};
  member.token = token->get<std::string>();
  return {Verdict::kOk, {}, ""};
}

EtcdOptions etcd_options_from_environment(const StoreEndpoint& endpoint, Millis connect_timeout, Millis retry_window) {
  EtcdOptions o;
  o.members = endpoint.members;
  o.tls = endpoint.tls;
  o.user = endpoint.user.empty() ? env_string("GRADMESH_ETCD_USER") : endpoint.user;
  // A file or the environment keeps the password out of process listings
  // (ps shows argv); a file (a mounted Secret) keeps it out of environment dumps too.
  o.password = endpoint.password.empty() ? env_string("GRADMESH_ETCD_PASSWORD") : endpoint.password;
  const std::string password_file = env_string("GRADMESH_ETCD_PASSWORD_FILE");
  if (o.password.empty() && !password_file.empty())
    o.password = read_secret_file(password_file, "GRADMESH_ETCD_PASSWORD_FILE");
  o.ca_file = env_string("GRADMESH_ETCD_CACERT");
  o.cert_file = env_string("GRADMESH_ETCD_CERT");
  o.key_file = env_string("GRADMESH_ETCD_KEY");
  o.connect_timeout = connect_timeout;
  o.retry_window = retry_window;
  return o;
}

EtcdStore::EtcdStore(EtcdOptions options)
    : cluster_(std::make_unique<Cluster>(std::move(options))), store_id_(random_store_id()) {
  // Reaches (and authenticates at) a member now, so a bad endpoint or
  // password fails here rather than at the first rendezvous.
  cluster_->call("/v3/kv/range", Json{{"key", etcd_key("")}, {"count_only", true}}, "the first request");
}

EtcdStore::~EtcdStore() = default;

std::string EtcdStore::describe() const { return cluster_->description; }

void EtcdStore::set(const std::string& key, const std::string& value) {
  cluster_->call("/v3/kv/put", put_op(etcd_key(key), value)["request_put"], "put '" + printable_key(key) + "'");
}

std::string EtcdStore::get(const std::string& key, Millis timeout) {
  const std::string what = "range '" + printable_key(key) + "'";
  std::string value;
  const bool found = poll_until(timeout, [&] {
    const EtcdReply reply = cluster_->call("/v3/kv/range", Json{{"key", etcd_key(key)}}, what);
    std::vector<EtcdKeyValue> kvs = range_kvs(reply, reply.body, what);
    if (kvs.empty()) return false;
    value = std::move(kvs[0].value);
    return true;
  });
  if (!found) throw_store_timeout(describe(), timeout, {key});
  return value;
}

bool EtcdStore::check(const std::vector<std::string>& keys) {
  // One txn per kEtcdMaxTxnOps keys: each batch is a consistent snapshot, and
  // keys only appear during a rendezvous, so later batches cannot undo earlier ones.
  for (size_t begin = 0; begin < keys.size(); begin += kEtcdMaxTxnOps) {
    const size_t end = std::min(keys.size(), begin + kEtcdMaxTxnOps);
    Json ops = Json::array();
    for (size_t i = begin; i < end; ++i) ops.push_back(range_op(etcd_key(keys[i]), /*count_only=*/true));
    const std::string what = "txn of ranges ('" + printable_key(keys[begin]) + "', ...)";
    const EtcdReply reply = cluster_->call("/v3/kv/txn", Json{{"success", std::move(ops)}}, what);
    for (const Json* range : txn_responses(reply, reply.body, "response_range", end - begin, what)) {
      std::optional<int64_t> count = range->is_object() ? int_field(*range, "count") : std::nullopt;
      if (!count) throw_bad_reply(reply, what, "'count' is malformed");
      if (*count == 0) return false;
    }
  }
  return true;
}

void EtcdStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  wait_by_polling(*this, keys, timeout);
}

bool EtcdStore::remove(const std::string& key) {
  const std::string what = "deleterange '" + printable_key(key) + "'";
  const EtcdReply reply = cluster_->call("/v3/kv/deleterange", Json{{"key", etcd_key(key)}}, what);
  const std::optional<int64_t> deleted = int_field(reply.body, "deleted");
  if (!deleted) throw_bad_reply(reply, what, "'deleted' is malformed");
  return *deleted > 0;
}

std::string EtcdStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  const std::string what = "compare_set txn on '" + printable_key(key) + "'";
  const std::string k = etcd_key(key);
  // etcd fails a value compare on an absent key, so an empty `expected`
  // (absent or "") is an outer txn on create_revision == 0 (absent) around
  // the value compare.
  Json by_value = {
      {"compare", Json::array({{{"key", k}, {"target", "VALUE"}, {"result", "EQUAL"}, {"value", base64_encode(expected)}}})},
      {"success", Json::array({put_op(k, desired)})},
      {"failure", Json::array({range_op(k, /*count_only=*/false)})}};
  Json request = by_value;
  if (expected.empty())
    request = {{"compare", Json::array({{{"key", k}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}})},
               {"success", Json::array({put_op(k, desired)})},
               {"failure", Json::array({Json{{"request_txn", std::move(by_value)}}})}};
  const EtcdReply reply = cluster_->call("/v3/kv/txn", request, what);
  const Json* txn = &reply.body;
  if (txn_succeeded(reply, *txn, what)) return desired;
  if (expected.empty()) {
    txn = txn_responses(reply, *txn, "response_txn", 1, what)[0];
    if (txn_succeeded(reply, *txn, what)) return desired;
  }
  const std::vector<EtcdKeyValue> kvs = range_kvs(reply, *txn_responses(reply, *txn, "response_range", 1, what)[0], what);
  return kvs.empty() ? "" : kvs[0].value;
}

int64_t EtcdStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(add_mu_);
  const std::string k = etcd_key(key);
  const std::string receipt_key = base64_encode(kEtcdReceiptPrefix + store_id_);
  const std::string tag = std::to_string(++adds_) + " ";  // the receipt holds "<add number> <result>"
  const std::string what = "add txn on '" + printable_key(key) + "'";
  for (;;) {
    const EtcdReply read = cluster_->call(
        "/v3/kv/txn", Json{{"success", Json::array({range_op(k, false), range_op(receipt_key, false)})}}, what);
    const std::vector<const Json*> ranges = txn_responses(read, read.body, "response_range", 2, what);
    const std::vector<EtcdKeyValue> current = range_kvs(read, *ranges[0], what);
    const std::vector<EtcdKeyValue> receipt = range_kvs(read, *ranges[1], what);
    // This add was applied already: its reply was lost and it was sent again.
    if (!receipt.empty() && receipt[0].value.rfind(tag, 0) == 0) {
      const std::optional<int64_t> result = try_parse_int(receipt[0].value.substr(tag.size()));
      if (!result) throw_bad_reply(read, what, "the add receipt is malformed");
      return *result;
    }
    int64_t value = 0;
    if (!current.empty()) {
      const std::optional<int64_t> number = try_parse_int(current[0].value);
      if (!number)
        throw_error(ErrorKind::kFormat, describe(),
                    "add to key '" + printable_key(key) + "': its value '" + printable_key(current[0].value.substr(0, 64)) +
                        "' is not a decimal integer; add only works on keys that add created or that were set to a number");
      value = *number;
    }
    // Adding 0 polls a counter: the read is the answer, and a write would
    // make every poller's compare-and-swap race every other's.
    if (delta == 0 && !current.empty()) return value;
    const int64_t result = add_without_overflow(describe(), key, value, delta);
    if (receipt_lease_ == 0) receipt_lease_ = grant_lease(std::max(kMinReceiptTtl, 2 * cluster_->options.retry_window));
    const int64_t mod_revision = current.empty() ? 0 : current[0].mod_revision;
    const Json txn = {
        {"compare", Json::array({{{"key", k}, {"target", "MOD"}, {"result", "EQUAL"}, {"mod_revision", std::to_string(mod_revision)}}})},
        {"success", Json::array({put_op(k, std::to_string(result)), put_op(receipt_key, tag + std::to_string(result), receipt_lease_)})}};
    const EtcdReply written = cluster_->call("/v3/kv/txn", txn, what, "lease not found");
    if (written.body.contains("error")) {
      receipt_lease_ = 0;  // the receipt's lease expired while the store was idle: grant another
      continue;
    }
    if (txn_succeeded(written, written.body, what)) return result;
  }
}

int64_t EtcdStore::grant_lease(Millis ttl) {
  const int64_t seconds = std::max<int64_t>(1, (ttl.count() + 999) / 1000);
  const std::string what = "lease grant (" + std::to_string(seconds) + " s)";
  const EtcdReply reply = cluster_->call("/v3/lease/grant", Json{{"TTL", std::to_string(seconds)}}, what);
  const std::optional<int64_t> id = int_field(reply.body, "ID");
  if (!id || *id == 0) throw_bad_reply(reply, what, "no lease 'ID'");
  return *id;
}

void EtcdStore::keep_alive(int64_t lease) {
  const std::string what = "lease keepalive " + std::to_string(lease);
  const EtcdReply reply = cluster_->call("/v3/lease/keepalive", Json{{"ID", std::to_string(lease)}}, what);
  // A stream of one message: {"result": {"ID": ..., "TTL": ...}}.
  auto result = reply.body.find("result");
  if (result == reply.body.end() || !result->is_object()) throw_bad_reply(reply, what, "no 'result' object");
  const std::optional<int64_t> ttl = int_field(*result, "TTL");
  if (!ttl) throw_bad_reply(reply, what, "'TTL' is malformed");
  if (*ttl <= 0)
    throw_error(ErrorKind::kComm, describe(),
                "lease " + std::to_string(lease) +
                    " has expired or was revoked; its keys are gone: grant a new lease and set them again");
}

bool EtcdStore::set_expiring(const std::string& key, const std::string& value, Millis ttl) {
  std::lock_guard<std::mutex> lock(expiring_mu_);
  int64_t& lease = expiring_leases_[ttl.count()];
  if (lease != 0) {
    try {
      keep_alive(lease);
    } catch (const Error&) {
      lease = 0;  // expired (this process was stopped, or the store away, for longer than ttl): a new one
    }
  }
  if (lease == 0) lease = grant_lease(ttl);
  set_with_lease(key, value, lease);
  return true;
}

void EtcdStore::set_with_lease(const std::string& key, const std::string& value, int64_t lease) {
  cluster_->call("/v3/kv/put", put_op(etcd_key(key), value, lease)["request_put"],
                 "put '" + printable_key(key) + "' with lease " + std::to_string(lease));
}

void EtcdStore::revoke_lease(int64_t lease) {
  cluster_->call("/v3/lease/revoke", Json{{"ID", std::to_string(lease)}}, "lease revoke " + std::to_string(lease),
                 "lease not found");
}

}  // namespace gradmesh::comm
