// ShardFiles (shard_files.h) over HTTP: a set's files under a base URL, read
// with "Range: bytes=a-b" requests through a BlockCache (block_cache.h).
//
// Every range reply is judged before its body is read: it must be 206 with
// exactly the Content-Range asked for, whose total must be the size
// index.json records, and its body must be exactly that long; the body goes
// straight into the caller's buffer, so a hostile server can neither overrun
// it nor make the reader allocate what it announces. A server that ignores
// Range (200 with the whole file) is refused before its body is downloaded.
// Connection failures, cut transfers, timeouts and 5xx replies are tried again
// a few times with a doubling wait (MdsReadOptions); other replies are not,
// since asking again gets the same answer.
//
// Thread-safety: each request takes an httplib::Client (one keep-alive
// connection) from a mutex-guarded pool and gives it back after, so the
// loader's threads read in parallel on connections of their own.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/resource_usage.h"
#include "gradmesh/core/sigpipe_block.h"
#include "gradmesh/core/text_format.h"
#include "gradmesh/data/block_cache.h"
#include "gradmesh/data/mds.h"
#include "gradmesh/data/shard_files.h"

namespace gradmesh::data {

namespace {

using Millis = std::chrono::milliseconds;

// Opening a set reads every shard's first bytes; this many at a time, so
// that thousands of shards cost thousands of round trips divided by this.
constexpr size_t kOpenConnections = 8;
// Idle connections kept for reuse; more threads than this open their own and close them after.
constexpr size_t kIdleConnections = 32;

// A base URL cut where httplib wants it: the client takes scheme://host:port,
// each request a path.
struct HttpBase {
  std::string origin;  // "http://host:port"
  std::string path;    // "/path/to/set", without a trailing slash
};

HttpBase parse_http_base(const std::string& url) {
  const size_t scheme_end = url.find("://");
  std::string scheme = url.substr(0, scheme_end);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t host_begin = scheme_end + 3;
  const size_t path_begin = std::min(url.find('/', host_begin), url.size());
  const std::string authority = url.substr(host_begin, path_begin - host_begin);
  if (authority.empty()) throw_error(ErrorKind::kUsage, url, "names no host (expected http://host:port/path/to/set)");
  if (authority.find('@') != std::string::npos)
    throw_error(ErrorKind::kUsage, url,
                "carries credentials, but a set is read over HTTP without authentication: serve it where a plain "
                "GET can read it (a private network, or a proxy that adds the credentials)");
  if (url.find_first_of("?#") != std::string::npos)
    throw_error(ErrorKind::kUsage, url,
                "has a query or a fragment; the base URL names the set's directory, under which index.json and "
                "the shards are read");
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
  if (scheme == "https")
    throw_error(ErrorKind::kUsage, url, "https:// needs cpp-httplib built with OpenSSL, which this build's is not");
#endif
  std::string path = url.substr(path_begin);
  while (!path.empty() && path.back() == '/') path.pop_back();
  return {scheme + "://" + authority, path};
}

// A file name as one URL path segment: all but RFC 3986's unreserved characters percent-encoded.
std::string http_path_segment(const std::string& name) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(c);
    } else {
      out += {'%', kHex[u >> 4], kHex[u & 15]};
    }
  }
  return out;
}

std::string http_status_text(int status) {
  std::string hint;
  if (status == 401 || status == 403) hint = " (not allowed; a set is read over HTTP without credentials)";
  else if (status == 404) hint = " (Not Found)";
  else if (status == 416) hint = " (Range Not Satisfiable: the file is shorter than index.json says?)";
  else if (status >= 300 && status < 400) hint = " (a redirect, which is not followed: give the final URL)";
  else if (status >= 500) hint = " (a server error)";
  return "HTTP " + std::to_string(status) + hint;
}

bool transport_error_is_transient(httplib::Error error) {
  return error != httplib::Error::SSLServerVerification && error != httplib::Error::SSLLoadingCerts &&
         error != httplib::Error::Canceled;
}

std::string http_transport_text(httplib::Error error, Millis timeout) {
  switch (error) {
    case httplib::Error::Connection: return "cannot connect (connection refused or host unreachable)";
    case httplib::Error::ConnectionTimeout: return "no connection within " + duration_text(timeout);
    case httplib::Error::Read: return "no reply within " + duration_text(timeout) + ", or the connection was closed";
    case httplib::Error::Write: return "the connection was closed while sending the request";
    case httplib::Error::SSLConnection: return "the TLS handshake failed (does the server speak https?)";
    case httplib::Error::SSLServerVerification:
      return "the server's certificate does not verify against the system's CAs, or names another host";
    default: return "the request failed (" + httplib::to_string(error) + ")";
  }
}

// What one request came to.
struct HttpAttempt {
  bool ok = false;
  bool transient = false;  // the link or the server failed, not the request: worth another try
  ErrorKind kind = ErrorKind::kIo;
  std::string reason;
};

std::string range_text(int64_t begin, int64_t end) { return std::to_string(begin) + "-" + std::to_string(end - 1); }

// A reply to "Range: bytes=begin-(end-1)" of a file index.json says has
// `total` bytes, judged on its status and headers alone.
HttpAttempt judge_range_reply(const httplib::Response& reply, int64_t begin, int64_t end, int64_t total) {
  if (reply.status == 200)
    return {false, false, ErrorKind::kIo,
            "the server answered 200 with the whole file instead of 206 Partial Content: it ignores Range "
            "requests, which reading a set over HTTP needs (nginx, Apache, Caddy and object stores serve them)"};
  if (reply.status != 206) return {false, reply.status >= 500, ErrorKind::kIo, http_status_text(reply.status)};
  const std::string expected = "bytes " + range_text(begin, end) + "/" + std::to_string(total);
  const std::string range = reply.get_header_value("Content-Range");
  long long first = 0, last = 0, size = 0;
  if (std::sscanf(range.c_str(), "bytes %lld-%lld/%lld", &first, &last, &size) == 3 && size != total)
    return {false, false, ErrorKind::kFormat,
            "is " + std::to_string(size) + " bytes on the server (Content-Range \"" + range + "\"); index.json says " +
                std::to_string(total) + " (truncated or replaced?)"};
  if (range != expected)
    return {false, false, ErrorKind::kIo,
            "the server answered Content-Range \"" + range + "\" to a request for \"" + expected + "\""};
  return {true, false, ErrorKind::kIo, ""};
}

class HttpShardFiles final : public ShardFiles {
 public:
  HttpShardFiles(const std::string& base_url, const MdsReadOptions& options)
      : base_(parse_http_base(base_url)), options_(options) {
    options_.retries = std::max(options_.retries, 0);
    options_.timeout = std::max(options_.timeout, Millis{1});
    options_.retry_backoff = std::max(options_.retry_backoff, Millis{0});
  }

  std::string where(const std::string& file) const override { return base_.origin + path_of(file); }
  std::optional<std::string> read_whole(const std::string& file, int64_t max_bytes) const override;
  std::vector<std::string> open(const std::vector<std::string>& files, const std::vector<int64_t>& sizes,
                                int64_t head_bytes) override;

  void read(size_t f, int64_t offset, void* out, int64_t bytes) const override {
    if (cache_) cache_->read(f, offset, out, bytes);
    else read_once(f, offset, out, bytes);
  }
  void read_once(size_t f, int64_t offset, void* out, int64_t bytes) const override {
    if (bytes > 0) get_range(f, offset, offset + bytes, static_cast<char*>(out));
  }
  int64_t bytes_fetched() const override { return fetched_.load(); }

 private:
  std::string path_of(const std::string& file) const { return base_.path + "/" + http_path_segment(file); }
  std::unique_ptr<httplib::Client> take_client() const;
  void give_back(std::unique_ptr<httplib::Client> client) const;
  void received(size_t bytes) const {
    fetched_ += static_cast<int64_t>(bytes);
    count_io(IoCounter::kDatasetRead, bytes);
  }
  // Runs `once` on a pooled client until it succeeds, fails for good, or
  // the retries are spent; then Error(its kind) naming `where`.
  template <class Once>
  void with_retries(const std::string& where, Once once) const;
  HttpAttempt get_range_once(httplib::Client& client, size_t f, int64_t begin, int64_t end, char* out) const;
  // Bytes [begin, end) of file f into `out`, in one request (retried).
  void get_range(size_t f, int64_t begin, int64_t end, char* out) const;

  HttpBase base_;
  MdsReadOptions options_;
  std::vector<std::string> paths_;  // each file's request path
  std::vector<int64_t> sizes_;      // as index.json says
  std::unique_ptr<BlockCache> cache_;  // none when the budget holds no block
  mutable std::mutex pool_mu_;
  mutable std::vector<std::unique_ptr<httplib::Client>> idle_;  // guarded by pool_mu_
  mutable std::atomic<int64_t> fetched_{0};
};

std::unique_ptr<httplib::Client> HttpShardFiles::take_client() const {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!idle_.empty()) {
      std::unique_ptr<httplib::Client> client = std::move(idle_.back());
      idle_.pop_back();
      return client;
    }
  }
  auto client = std::make_unique<httplib::Client>(base_.origin);
  if (!client->is_valid()) throw_error(ErrorKind::kUsage, base_.origin, "not a URL cpp-httplib can connect to");
  client->set_connection_timeout(options_.timeout);
  client->set_read_timeout(options_.timeout);
  client->set_write_timeout(options_.timeout);
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);  // a request's lines may go out in several writes: none waits for an ACK
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  client->enable_server_certificate_verification(true);
#endif
  return client;
}

void HttpShardFiles::give_back(std::unique_ptr<httplib::Client> client) const {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (idle_.size() < kIdleConnections) idle_.push_back(std::move(client));
}

template <class Once>
void HttpShardFiles::with_retries(const std::string& where, Once once) const {
  Millis wait = options_.retry_backoff;
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<httplib::Client> client = take_client();
    HttpAttempt a;
    {
      ScopedSigpipeBlock no_sigpipe;  // httplib may write to a connection the server has closed
      a = once(*client);
    }
    if (a.ok) {
      give_back(std::move(client));
      return;
    }
    // A failed connection may be left mid-reply: dropping it makes the next request open a fresh one.
    if (!a.transient || attempt >= options_.retries)
      throw_error(a.kind, where, a.reason + (attempt > 0 ? " (" + std::to_string(attempt + 1) + " tries)" : ""));
    if (attempt == 0)
      log_warn(where + ": " + a.reason + "; trying again, up to " + std::to_string(options_.retries) +
               (options_.retries == 1 ? " more time" : " more times"));
    std::this_thread::sleep_for(wait);
    wait *= 2;
  }
}

HttpAttempt HttpShardFiles::get_range_once(httplib::Client& client, size_t f, int64_t begin, int64_t end,
                                           char* out) const {
  const int64_t want = end - begin;
  int64_t got = 0;
  HttpAttempt verdict{true, false, ErrorKind::kIo, ""};
  // identity: a compressed body would not be the range's bytes.
  const httplib::Headers headers = {{"Range", "bytes=" + range_text(begin, end)}, {"Accept-Encoding", "identity"}};
  const httplib::Result result = client.Get(
      paths_[f], headers,
      [&](const httplib::Response& reply) {
        verdict = judge_range_reply(reply, begin, end, sizes_[f]);
        return verdict.ok;
      },
      [&](const char* data, size_t n) {
        if (static_cast<int64_t>(n) > want - got) {
          verdict = {false, false, ErrorKind::kIo, "the server sent more than the " + std::to_string(want) +
                                                       " bytes of its Content-Range"};
          return false;
        }
        std::memcpy(out + got, data, n);
        got += static_cast<int64_t>(n);
        received(n);
        return true;
      });
  if (!verdict.ok) return verdict;
  if (!result) {
    const std::string part = got > 0 ? " after " + std::to_string(got) + " of " + std::to_string(want) + " bytes" : "";
    return {false, transport_error_is_transient(result.error()), ErrorKind::kIo,
            http_transport_text(result.error(), options_.timeout) + part};
  }
  if (got != want)
    return {false, false, ErrorKind::kIo,
            "the server sent " + std::to_string(got) + " bytes of the " + std::to_string(want) + " asked for"};
  return verdict;
}

void HttpShardFiles::get_range(size_t f, int64_t begin, int64_t end, char* out) const {
  with_retries(base_.origin + paths_[f] + ": bytes " + range_text(begin, end),
               [&](httplib::Client& client) { return get_range_once(client, f, begin, end, out); });
}

std::optional<std::string> HttpShardFiles::read_whole(const std::string& file, int64_t max_bytes) const {
  const std::string path = path_of(file);
  std::string body;
  bool missing = false;
  with_retries(base_.origin + path, [&](httplib::Client& client) {
    body.clear();
    HttpAttempt verdict{true, false, ErrorKind::kIo, ""};
    const httplib::Result result = client.Get(
        path, httplib::Headers(),
        [&](const httplib::Response& reply) {
          missing = reply.status == 404;
          if (reply.status != 200 && !missing)
            verdict = {false, reply.status >= 500, ErrorKind::kIo, http_status_text(reply.status)};
          return reply.status == 200;
        },
        [&](const char* data, size_t n) {
          if (static_cast<int64_t>(body.size() + n) > max_bytes) {
            verdict = {false, false, ErrorKind::kFormat, "larger than " + std::to_string(max_bytes >> 20) + " MiB"};
            return false;
          }
          body.append(data, n);
          received(n);
          return true;
        });
    if (missing || !verdict.ok) return verdict;
    if (!result)
      return HttpAttempt{false, transport_error_is_transient(result.error()), ErrorKind::kIo,
                         http_transport_text(result.error(), options_.timeout)};
    return verdict;
  });
  if (missing) return std::nullopt;
  return body;
}

std::vector<std::string> HttpShardFiles::open(const std::vector<std::string>& files,
                                              const std::vector<int64_t>& sizes, int64_t head_bytes) {
  sizes_ = sizes;
  for (const std::string& file : files) paths_.push_back(path_of(file));
  // Every reply's Content-Range total is checked against sizes_, so reading
  // each shard's head also checks its size.
  std::vector<std::string> heads(files.size());
  std::vector<std::exception_ptr> errors(files.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto read_heads = [&] {
    for (size_t f = next++; f < files.size() && !failed; f = next++) {
      try {
        heads[f].resize(static_cast<size_t>(std::min(head_bytes, sizes_[f])));
        read_once(f, 0, heads[f].data(), static_cast<int64_t>(heads[f].size()));
      } catch (...) {
        errors[f] = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < std::min(kOpenConnections, files.size()); ++t) {
    try {
      threads.emplace_back(read_heads);
    } catch (const std::system_error&) {
      break;  // no more threads to be had: fewer connections read the rest
    }
  }
  read_heads();
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  if (options_.cache_bytes >= options_.cache_block_bytes && options_.cache_block_bytes > 0)
    cache_ = std::make_unique<BlockCache>(sizes_, options_.cache_block_bytes, options_.cache_bytes,
                                          [this](size_t f, int64_t begin, int64_t end, char* out) {
                                            get_range(f, begin, end, out);
                                          });
  return heads;
}

}  // namespace

std::unique_ptr<ShardFiles> open_http_shard_files(const std::string& base_url, const MdsReadOptions& options) {
  return std::make_unique<HttpShardFiles>(base_url, options);
}

}  // namespace gradmesh::data
