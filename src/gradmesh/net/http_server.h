// An event-driven HTTP/1.1 server (Boost.Beast over Asio) for gradmesh's
// endpoints that face clients: connections cost no thread while idle or
// while a client trickles its bytes, and every way a client can hold the
// server is bounded.
//
// - Connections are served by a few event-loop threads (io_threads). A
//   request runs on them when its route is fast (health, metrics: the
//   "inline" lane, answered even while every worker is busy) and otherwise
//   on a pool of worker threads, which may block (inference, generation).
// - Deadlines: the request line and headers must arrive within
//   header_timeout of the request's first byte; the whole body within
//   body_timeout; an idle keep-alive connection closes after idle_timeout;
//   a response that the client does not read within write_timeout is cut.
//   A timeout restarts on nothing the client sends.
// - Limits: header bytes (431), body bytes (413, decided from
//   Content-Length before any of the body is read), connections at once
//   (max_connections: further ones are accepted and closed at once, so the
//   backlog never fills), listen backlog SOMAXCONN.
// - Keep-alive and pipelining: requests on one connection are read and
//   answered in order; "Connection: close" and HTTP/1.0 end it after the
//   response.
// - Streaming: a handler may answer with a chunked stream (server-sent
//   events); each write waits for the bytes to leave, and returns false once
//   the client has gone, so a generator can stop at its next token.
// - stop(drain): stops accepting, lets requests in flight (streams too)
//   finish for up to `drain`, then closes what is left.
// Boost's headers stay inside http_server.cc.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gradmesh::net {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // target up to '?'
  std::string query;   // after '?', "" when none
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote;  // the peer's address
  // The first header of that name (case-insensitive), "" when absent.
  std::string header(const std::string& name) const;
  // Whether the client has closed its side while a worker handles the
  // request (a long generation can then stop early).
  bool client_gone() const { return gone && gone->load(); }
  std::shared_ptr<std::atomic<bool>> gone;
};

// Writes a streamed response's chunks. write() blocks until the chunk is
// sent; false: the client has gone (or the server is closing the
// connection), and later writes do nothing.
class ChunkWriter {
 public:
  virtual ~ChunkWriter() = default;
  virtual bool write(const std::string& chunk) = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Set: the response is streamed (chunked transfer encoding) after the
  // headers, by this function on the worker thread; `body` is ignored.
  std::function<void(ChunkWriter&)> stream;
};

enum class Lane {
  kInline,    // quick and never blocking: runs on the event loop
  kWorker,    // may block: runs on the worker pool
  kDeferred,  // starts work elsewhere and answers when it is done (`start`, below)
};

// Sends a deferred request's response; callable from any thread, once
// (later calls do nothing).
using Respond = std::function<void(HttpResponse)>;

struct HttpRoute {
  HttpRoute() = default;  // no route: 404
  HttpRoute(Lane on, std::function<void(const HttpRequest&, HttpResponse&)> handler)
      : lane(on), handle(std::move(handler)) {}
  static HttpRoute deferred(std::function<void(const HttpRequest&, Respond respond)> start) {
    HttpRoute r;
    r.lane = Lane::kDeferred;
    r.start = std::move(start);
    return r;
  }

  Lane lane = Lane::kWorker;
  std::function<void(const HttpRequest&, HttpResponse&)> handle;
  // kDeferred: starts the request's work without blocking (a batcher's
  // queue) and returns; whoever finishes the work calls `respond`. It runs
  // on the event loop for a body up to kDeferredInlineBytes, else on a
  // worker: no thread waits for the work, and a small request costs no
  // hand-off to a worker.
  std::function<void(const HttpRequest&, Respond respond)> start;
};
inline constexpr size_t kDeferredInlineBytes = size_t{64} << 10;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int io_threads = 1;
  int worker_threads = 16;
  int64_t max_connections = 1024;
  int64_t max_header_bytes = int64_t{64} << 10;
  int64_t max_body_bytes = int64_t{64} << 20;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{60'000};
  std::chrono::milliseconds idle_timeout{60'000};
  std::chrono::milliseconds write_timeout{30'000};
  std::string what = "HTTP server on ";  // names the server in errors
};

// Picks the route for a request whose headers have arrived (the body not
// yet): its lane, and the handler that will answer it.
using HttpRouter = std::function<HttpRoute(const HttpRequest& head)>;

// What the server has seen, for /metrics and tests.
struct HttpServerCounters {
  int64_t open_connections = 0;
  int64_t refused_connections = 0;  // over max_connections
  int64_t header_timeouts = 0;
  int64_t body_timeouts = 0;
  int64_t requests = 0;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpRouter router);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens (backlog SOMAXCONN); returns the port. Error(kIo)
  // naming host:port when it cannot.
  int bind();
  // Serves until stop() has drained. REQUIRES: bind() succeeded.
  void run();
  // Stops accepting, waits up to `drain` for requests and streams in
  // flight, closes the rest; run() then returns. Safe from any thread,
  // also before run().
  void stop(std::chrono::milliseconds drain = std::chrono::milliseconds{30'000});

  HttpServerCounters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradmesh::net
