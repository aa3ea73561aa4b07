#include "gradmesh/comm/redis_store.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "gradmesh/comm/endpoint.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/sigpipe_block.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::comm {
namespace {

// compare_set on the server: Lua scripts run atomically in Redis.
// KEYS[1] = key, ARGV[1] = expected, ARGV[2] = desired. An absent key
// matches only an empty `expected` and reads back as "".
constexpr const char* kCompareSetScript = R"lua(
local current = redis.call('GET', KEYS[1])
if (current == false and ARGV[1] == '') or current == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return ARGV[2]
end
if current == false then return '' end
return current
)lua";

const char* reply_type_name(int type) {
  switch (type) {
    case REDIS_REPLY_STRING: return "string";
    case REDIS_REPLY_ARRAY: return "array";
    case REDIS_REPLY_INTEGER: return "integer";
    case REDIS_REPLY_NIL: return "nil";
    case REDIS_REPLY_STATUS: return "status";
    case REDIS_REPLY_ERROR: return "error";
    default: return "unknown";
  }
}

std::string reply_text(const redisReply& reply) { return std::string(reply.str, reply.len); }

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

struct timeval to_timeval(Millis timeout) {
  struct timeval tv;
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  return tv;
}

}  // namespace

void RedisStore::ContextDeleter::operator()(redisContext* context) const { redisFree(context); }
void RedisStore::ReplyDeleter::operator()(redisReply* reply) const { freeReplyObject(reply); }

RedisStore::RedisStore(std::string host, int port, std::string password, int db, Millis connect_timeout,
                       std::string user, Millis retry_window)
    : host_(std::move(host)),
      port_(port),
      password_(std::move(password)),
      db_(db),
      connect_timeout_(std::max(connect_timeout, Millis{1})),
      user_(std::move(user)),
      retry_window_(std::max(retry_window, Millis{0})) {
  // Connects now, so a bad endpoint or password fails here rather than at the
  // first rendezvous (a server that is down is waited for within the window).
  run({}, "");
}

RedisStore::~RedisStore() = default;

std::string RedisStore::describe() const { return describe_redis(host_, port_, db_); }

void RedisStore::connect_locked() {
  context_.reset();
  transient_ = false;
  std::unique_ptr<redisContext, ContextDeleter> context(
      redisConnectWithTimeout(host_.c_str(), port_, to_timeval(connect_timeout_)));
  if (!context) throw_error(ErrorKind::kComm, "cannot connect to " + describe(), "out of memory");
  transient_ = context->err != 0;
  if (context->err)
    throw_error(ErrorKind::kComm, "cannot connect to " + describe(),
                std::string(context->errstr) + "; is redis-server running and reachable at this address?");
  // Bounds every command, so a hung server cannot block a rank forever.
  redisSetTimeout(context.get(), to_timeval(connect_timeout_));
  redisEnableKeepAlive(context.get());
  context_ = std::move(context);

  if (!password_.empty()) {
    std::vector<std::string> auth = {"AUTH"};
    if (!user_.empty()) auth.push_back(user_);
    auth.push_back(password_);
    Reply reply = run_locked(auth, "");
    if (reply->type == REDIS_REPLY_ERROR) {
      std::string text = reply_text(*reply);
      context_.reset();
      bool server_has_none = text.find("without any password configured") != std::string::npos;
      throw_error(ErrorKind::kComm, describe(),
                  "authentication failed: " + text +
                      (server_has_none ? "; the server has no password: remove it from the endpoint and GRADMESH_REDIS_PASSWORD"
                                       : "; check the password in the endpoint or GRADMESH_REDIS_PASSWORD"));
    }
  }
  Reply ping = run_locked({"PING"}, "");
  // A server still loading its data set answers LOADING: it will serve soon.
  if (ping->type == REDIS_REPLY_ERROR && starts_with(reply_text(*ping), "LOADING")) {
    context_.reset();
    transient_ = true;
    throw_error(ErrorKind::kComm, describe(), "the server is loading its data set (" + reply_text(*ping) + ")");
  }
  if (ping->type == REDIS_REPLY_ERROR) {
    std::string text = reply_text(*ping);
    context_.reset();
    if (starts_with(text, "NOAUTH"))
      throw_error(ErrorKind::kComm, describe(),
                  "the server requires a password (" + text +
                      "); put it in the endpoint (redis://:password@host:port) or in GRADMESH_REDIS_PASSWORD");
    throw_error(ErrorKind::kComm, describe(), "PING failed: " + text);
  }
  if (db_ != 0) {
    Reply select = run_locked({"SELECT", std::to_string(db_)}, "");
    if (select->type == REDIS_REPLY_ERROR) {
      std::string text = reply_text(*select);
      context_.reset();
      throw_error(ErrorKind::kComm, describe(),
                  "cannot select database " + std::to_string(db_) + ": " + text +
                      "; the server has fewer databases ('databases' in redis.conf)");
    }
  }
}

RedisStore::Reply RedisStore::run_locked(const std::vector<std::string>& args, const std::string& key) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const std::string& arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  Reply reply;
  {
    ScopedSigpipeBlock no_sigpipe;  // hiredis writes with write(2)
    reply.reset(static_cast<redisReply*>(
        redisCommandArgv(context_.get(), static_cast<int>(args.size()), argv.data(), lengths.data())));
  }
  if (reply) return reply;
  // No reply: the connection is unusable (closed, reset or timed out).
  std::string why = context_->errstr;
  bool timed_out = context_->err == REDIS_ERR_IO && (why == std::strerror(EAGAIN) || why == std::strerror(EWOULDBLOCK));
  bool garbled = context_->err == REDIS_ERR_PROTOCOL;
  context_.reset();
  transient_ = !garbled;
  std::string what = args[0] + (key.empty() ? "" : " '" + printable_key(key) + "'");
  if (garbled)
    throw_error(ErrorKind::kComm, describe(),
                "the reply to " + what + " is not Redis protocol (" + why + "); is this port a redis-server?");
  if (timed_out) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f", static_cast<double>(connect_timeout_.count()) / 1000.0);
    throw_error(ErrorKind::kComm, describe(),
                "no reply to " + what + " within " + seconds + " s; the server is overloaded or hung");
  }
  throw_error(ErrorKind::kComm, describe(),
              "connection lost during " + what + ": " + why + "; is redis-server still running?");
}

RedisStore::Reply RedisStore::run(const std::vector<std::string>& args, const std::string& key, bool repeatable) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto started = std::chrono::steady_clock::now();
  Millis backoff{50};
  bool warned = false;
  for (;;) {
    bool sent = false;
    try {
      if (!context_) connect_locked();
      if (args.empty()) return Reply();  // connect only (the constructor): connecting already PINGed
      sent = true;
      Reply reply = run_locked(args, key);
      if (warned)
        log_warn(describe() + " is reachable again after " +
                 seconds_text(std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - started)));
      return reply;
    } catch (const Error& e) {
      const auto waited = std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - started);
      const bool retry = transient_ && (repeatable || !sent) && retry_window_.count() > 0;
      if (!retry) throw;
      if (waited + backoff > retry_window_)
        throw_error(ErrorKind::kComm, describe(),
                    "unreachable for " + seconds_text(waited) + " (the store timeout is " +
                        seconds_text(retry_window_) + "): " + e.what());
      if (!warned)
        log_warn(std::string(e.what()) + "; reconnecting for up to " + seconds_text(retry_window_));
      warned = true;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, Millis{1000});
  }
}

void RedisStore::throw_unexpected(const redisReply& reply, const std::string& command, const std::string& key) const {
  std::string what = command + " '" + printable_key(key) + "'";
  if (reply.type == REDIS_REPLY_ERROR) throw_error(ErrorKind::kComm, describe(), what + " failed: " + reply_text(reply));
  throw_error(ErrorKind::kComm, describe(),
              std::string("unexpected ") + reply_type_name(reply.type) + " reply to " + what);
}

void RedisStore::set(const std::string& key, const std::string& value) {
  Reply reply = run({"SET", key, value}, key);
  if (reply->type != REDIS_REPLY_STATUS) throw_unexpected(*reply, "SET", key);
}

std::string RedisStore::get(const std::string& key, Millis timeout) {
  std::string value;
  bool found = poll_until(timeout, [&] {
    Reply reply = run({"GET", key}, key);
    if (reply->type == REDIS_REPLY_NIL) return false;
    if (reply->type != REDIS_REPLY_STRING) throw_unexpected(*reply, "GET", key);
    value = reply_text(*reply);
    return true;
  });
  if (!found) throw_store_timeout(describe(), timeout, {key});
  return value;
}

int64_t RedisStore::add(const std::string& key, int64_t delta) {
  Reply reply = run({"INCRBY", key, std::to_string(delta)}, key, /*repeatable=*/false);
  if (reply->type == REDIS_REPLY_INTEGER) return reply->integer;
  if (reply->type == REDIS_REPLY_ERROR) {
    std::string text = reply_text(*reply);
    if (text.find("not an integer") != std::string::npos || text.find("overflow") != std::string::npos)
      throw_error(ErrorKind::kFormat, describe(),
                  "add to key '" + printable_key(key) + "': " + text +
                      "; add only works on keys that add created or that were set to a decimal number");
  }
  throw_unexpected(*reply, "INCRBY", key);
}

std::string RedisStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  Reply reply = run({"EVAL", kCompareSetScript, "1", key, expected, desired}, key);
  if (reply->type != REDIS_REPLY_STRING) throw_unexpected(*reply, "EVAL (compare_set)", key);
  return reply_text(*reply);
}

bool RedisStore::check(const std::vector<std::string>& keys) {
  if (keys.empty()) return true;
  std::vector<std::string> args = {"EXISTS"};
  args.insert(args.end(), keys.begin(), keys.end());
  Reply reply = run(args, keys[0]);
  if (reply->type != REDIS_REPLY_INTEGER) throw_unexpected(*reply, "EXISTS", keys[0]);
  // EXISTS counts each argument, so repeated keys still add up to keys.size().
  return reply->integer == static_cast<long long>(keys.size());
}

void RedisStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  wait_by_polling(*this, keys, timeout);
}

bool RedisStore::remove(const std::string& key) {
  Reply reply = run({"DEL", key}, key);
  if (reply->type != REDIS_REPLY_INTEGER) throw_unexpected(*reply, "DEL", key);
  return reply->integer > 0;
}

}  // namespace gradmesh::comm
