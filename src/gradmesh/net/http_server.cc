// Boost.Beast behind net::HttpServer (http_server.h).
//
// One Session per connection, on its own strand. Its loop: wait for the
// first byte of a request (idle_timeout), read the header (header_timeout,
// one deadline for the whole header: a timeout that restarted on every
// byte would let one header line every few seconds hold the connection for
// ever), route it, refuse an oversized body from its Content-Length, read
// the body (body_timeout), run the handler inline or on the worker pool,
// write the response (write_timeout), and go round again with whatever the
// client pipelined behind it still in the buffer.
#include "gradmesh/net/http_server.h"

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstdio>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include "gradmesh/core/error.h"

namespace gradmesh::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string HttpRequest::header(const std::string& name) const {
  for (const auto& [key, value] : headers)
    if (key.size() == name.size() &&
        std::equal(key.begin(), key.end(), name.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        }))
      return value;
  return "";
}

namespace http_server_internal {

class Session;

struct Shared {
  // Declared first, destroyed last: sessions still queued in the event loop
  // or the worker pool unregister themselves when those are destroyed.
  std::mutex sessions_mutex;
  std::unordered_set<Session*> sessions;
  std::atomic<int64_t> open{0}, refused{0}, header_timeouts{0}, body_timeouts{0}, requests{0};
  HttpServerOptions options;
  HttpRouter router;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  // Requests on the worker pool are no work of the event loop's: without
  // this guard its run() would return while one is still being answered.
  asio::executor_work_guard<asio::io_context::executor_type> keep_running = asio::make_work_guard(io);
  asio::thread_pool workers;
  std::atomic<bool> stopping{false}, closed{false};

  Shared(HttpServerOptions o, HttpRouter r)
      : options(std::move(o)), router(std::move(r)), io(std::max(1, options.io_threads)),
        workers(static_cast<size_t>(std::max(1, options.worker_threads))) {}
};

// {"error": message}: quotes, backslashes and control characters escaped
// (a message may quote a client's bytes); other bytes pass as they are.
std::string status_json(const std::string& message) {
  std::string escaped;
  for (const char c : message) {
    if (c == '"' || c == '\\') {
      escaped += '\\';
      escaped += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned>(c));
      escaped += code;
    } else {
      escaped += c;
    }
  }
  return "{\"error\":\"" + escaped + "\"}";
}

// Sends a streamed response's chunks from a worker thread through the
// session's strand, each write waiting for its bytes to leave.
class StrandChunkWriter final : public ChunkWriter {
 public:
  explicit StrandChunkWriter(std::shared_ptr<Session> session) : session_(std::move(session)) {}
  bool write(const std::string& chunk) override;
  bool finish();

 private:
  bool send(std::function<void(std::function<void(bool)>)> start);
  std::shared_ptr<Session> session_;
  bool failed_ = false;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Shared& shared, tcp::socket socket)
      : shared_(shared), stream_(std::move(socket)), deadline_(stream_.get_executor()) {
    std::lock_guard<std::mutex> lock(shared_.sessions_mutex);
    shared_.sessions.insert(this);
    ++shared_.open;
  }
  ~Session() {
    std::lock_guard<std::mutex> lock(shared_.sessions_mutex);
    shared_.sessions.erase(this);
    --shared_.open;
  }

  void start() { wait_for_request(); }

  // On stop: a connection waiting for its next request closes now; one in
  // the middle of a request finishes it and closes after the response.
  void on_stop() {
    auto self = weak_from_this().lock();  // null while its destructor waits for the registry's lock
    if (!self) return;
    asio::post(stream_.get_executor(), [self] {
      if (self->idle_) self->close();
    });
  }

  beast::tcp_stream& stream() { return stream_; }
  std::chrono::milliseconds write_timeout() const { return shared_.options.write_timeout; }

  // The deadline of the operation about to start: when it passes, the
  // socket's operations are cancelled and timed_out_ says why (beast's own
  // stream timeouts close the socket, which would leave no way to answer 408).
  void expires_after(std::chrono::milliseconds timeout) {
    timed_out_ = false;
    deadline_.expires_after(timeout);
    deadline_.async_wait([weak = weak_from_this()](beast::error_code ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      self->timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);
    });
  }
  void clear_deadline() { deadline_.cancel(); }
  bool server_closed() const { return shared_.closed.load(); }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

 private:
  void wait_for_request() {
    request_ = HttpRequest{};  // the last request's body is not kept while the connection idles
    if (shared_.stopping) return close();
    if (buffer_.size() > 0) return read_header();  // pipelined bytes already here
    // Asio reports a peer's end of stream once: another read would wait for
    // an event that never comes.
    if (peer_finished_) return close();
    idle_ = true;
    expires_after(shared_.options.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->idle_ = false;
      self->clear_deadline();
      if (ec) return self->close();
      self->buffer_.commit(n);
      self->read_header();
    });
  }

  void read_header() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(std::min<int64_t>(shared_.options.max_header_bytes, UINT32_MAX)));
    // No body limit yet: an oversized Content-Length is answered from the header (on_header).
    parser_->body_limit(std::numeric_limits<uint64_t>::max());
    expires_after(shared_.options.header_timeout);
    http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_header(ec);
    });
  }

  void on_header(beast::error_code ec) {
    clear_deadline();
    if (ec && timed_out_) {
      ++shared_.header_timeouts;
      return reply_and_close(408, "the request's headers did not arrive within " +
                                      std::to_string(shared_.options.header_timeout.count()) + " ms");
    }
    if (ec == http::error::header_limit)
      return reply_and_close(431, "the request's headers exceed " +
                                      std::to_string(shared_.options.max_header_bytes) + " bytes");
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset)
      return close();
    if (ec) return reply_and_close(400, "malformed request: " + ec.message());
    const auto& head = parser_->get();
    request_ = HttpRequest{};
    request_.method = std::string(head.method_string());
    request_.target = std::string(head.target());
    const size_t q = request_.target.find('?');
    request_.path = request_.target.substr(0, q);
    request_.query = q == std::string::npos ? "" : request_.target.substr(q + 1);
    for (const auto& field : head) request_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    beast::error_code peer_error;
    const auto peer = stream_.socket().remote_endpoint(peer_error);
    if (!peer_error) request_.remote = peer.address().to_string();
    keep_alive_ = head.keep_alive();
    const auto length = parser_->content_length();
    if (length && *length > static_cast<uint64_t>(shared_.options.max_body_bytes))
      return reply_and_close(413, "the request body (" + std::to_string(*length) +
                                      " bytes) is larger than the server accepts (at most " +
                                      std::to_string(shared_.options.max_body_bytes) + " bytes)");
    parser_->body_limit(static_cast<uint64_t>(shared_.options.max_body_bytes));  // chunked bodies
    route_ = shared_.router(request_);
    if (parser_->is_done()) return dispatch();
    if (beast::iequals(head[http::field::expect], "100-continue")) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, head.version());
      expires_after(shared_.options.write_timeout);
      return http::async_write(stream_, *cont, [self = shared_from_this(), cont](beast::error_code e, size_t) {
        if (e) return self->close();
        self->read_body();
      });
    }
    read_body();
  }

  void read_body() {
    expires_after(shared_.options.body_timeout);
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->clear_deadline();
      if (ec && self->timed_out_) {
        ++self->shared_.body_timeouts;
        return self->reply_and_close(408, "the request body did not arrive within " +
                                              std::to_string(self->shared_.options.body_timeout.count()) + " ms");
      }
      if (ec == http::error::body_limit)
        return self->reply_and_close(413, "the request body is larger than the server accepts (at most " +
                                              std::to_string(self->shared_.options.max_body_bytes) + " bytes)");
      if (ec) return self->close();
      self->dispatch();
    });
  }

  void dispatch() {
    ++shared_.requests;
    request_.body = std::move(parser_->get().body());
    parser_.reset();
    if (route_.lane == Lane::kDeferred && route_.start) return dispatch_deferred();
    if (route_.lane == Lane::kInline || !route_.handle) {
      auto response = std::make_shared<HttpResponse>();
      run_handler(*response);
      return write_response(response);
    }
    request_.gone = std::make_shared<std::atomic<bool>>(false);
    watch_for_hangup();
    asio::post(shared_.workers, [self = shared_from_this()] {
      auto response = std::make_shared<HttpResponse>();
      self->run_handler(*response);
      asio::post(self->stream_.get_executor(), [self, response] {
        // The watch's read is cancelled before the response goes out; what it
        // read (pipelined requests) stays in the buffer.
        self->handling_ = false;
        beast::error_code ignored;
        self->stream_.socket().cancel(ignored);
        if (response->stream) return asio::post(self->shared_.workers, [self, response] { self->stream_response(response); });
        self->write_response(response);
      });
    });
  }

  // The route starts the work and returns; the response is written when
  // `respond` is called, from whichever thread finished the work.
  void dispatch_deferred() {
    request_.gone = std::make_shared<std::atomic<bool>>(false);
    watch_for_hangup();
    auto once = std::make_shared<std::atomic<bool>>(false);
    Respond respond = [self = shared_from_this(), once](HttpResponse answer) {
      if (once->exchange(true)) return;
      auto response = std::make_shared<HttpResponse>(std::move(answer));
      asio::post(self->stream_.get_executor(), [self, response] {
        self->handling_ = false;
        beast::error_code ignored;
        self->stream_.socket().cancel(ignored);
        self->write_response(response);
      });
    };
    // The handler gets its own request and route: once it has called
    // `respond`, the connection may read its next request into the
    // session's while a worker is still returning from this one.
    auto request = std::make_shared<HttpRequest>(std::move(request_));
    request_.gone = request->gone;  // the hangup watch still marks it
    auto start = [request, handler = route_.start, respond] {
      try {
        handler(*request, respond);
      } catch (const std::exception& e) {
        HttpResponse failed;
        failed.status = 500;
        failed.body = status_json(std::string("internal error: ") + e.what());
        respond(std::move(failed));
      }
    };
    if (request->body.size() <= kDeferredInlineBytes) return start();
    asio::post(shared_.workers, start);
  }

  // While a worker handles the request, a read notices the client closing
  // its side (a pipelined request's bytes just wait in the buffer).
  void watch_for_hangup() {
    handling_ = true;
    if (buffer_.size() > static_cast<size_t>(shared_.options.max_header_bytes)) return;  // enough pipelined for now
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (ec && ec != asio::error::operation_aborted) self->peer_finished_ = true;
      if (!self->handling_) {
        self->buffer_.commit(n);
        return;
      }
      if (ec) {
        if (ec != asio::error::operation_aborted) *self->request_.gone = true;
        return;
      }
      self->buffer_.commit(n);
      self->watch_for_hangup();
    });
  }

  void run_handler(HttpResponse& response) {
    try {
      if (!route_.handle) {
        response.status = 404;
        response.body = status_json("no such endpoint: " + request_.method + " " + request_.path);
        return;
      }
      route_.handle(request_, response);
    } catch (const std::exception& e) {
      response = HttpResponse{};
      response.status = 500;
      response.body = status_json(std::string("internal error: ") + e.what());
    }
  }

  template <typename Message>
  void fill_head(Message& m, const HttpResponse& response) {
    m.result(static_cast<unsigned>(response.status));
    m.set(http::field::server, "gradmesh");
    if (!response.content_type.empty()) m.set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) m.set(name, value);
    m.keep_alive(keep_alive_ && !shared_.stopping);
  }

  void write_response(const std::shared_ptr<HttpResponse>& response) {
    auto message = std::make_shared<http::response<http::string_body>>();
    message->version(11);
    fill_head(*message, *response);
    message->body() = std::move(response->body);
    message->prepare_payload();
    const bool close_after = !message->keep_alive();
    expires_after(shared_.options.write_timeout);
    http::async_write(stream_, *message, [self = shared_from_this(), message, close_after](beast::error_code ec, size_t) {
      if (ec || close_after) return self->close();
      self->wait_for_request();
    });
  }

  // On a worker thread: the head, then the handler's chunks, then the last chunk.
  void stream_response(const std::shared_ptr<HttpResponse>& response) {
    auto head = std::make_shared<http::response<http::empty_body>>();
    head->version(11);
    fill_head(*head, *response);
    head->chunked(true);
    const bool close_after = !head->keep_alive();
    StrandChunkWriter writer(shared_from_this());
    std::promise<bool> sent;
    auto done = sent.get_future();
    asio::post(stream_.get_executor(), [self = shared_from_this(), head, &sent] {
      auto serializer = std::make_shared<http::response_serializer<http::empty_body>>(*head);
      self->expires_after(self->shared_.options.write_timeout);
      http::async_write_header(self->stream_, *serializer, [serializer, head, &sent](beast::error_code ec, size_t) {
        sent.set_value(!ec);
      });
    });
    bool ok = done.get();
    if (ok) {
      response->stream(writer);
      ok = writer.finish();
    }
    asio::post(stream_.get_executor(), [self = shared_from_this(), ok, close_after] {
      if (!ok || close_after) return self->close();
      self->wait_for_request();
    });
  }

  void reply_and_close(int status, const std::string& why) {
    auto message = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
    message->set(http::field::server, "gradmesh");
    message->set(http::field::content_type, "application/json");
    message->keep_alive(false);
    message->body() = status_json(why);
    message->prepare_payload();
    expires_after(shared_.options.write_timeout);
    http::async_write(stream_, *message, [self = shared_from_this(), message](beast::error_code, size_t) {
      self->close();
    });
  }

  Shared& shared_;
  beast::tcp_stream stream_;
  asio::steady_timer deadline_;
  std::atomic<bool> timed_out_{false};
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest request_;
  HttpRoute route_;
  bool keep_alive_ = true;
  std::atomic<bool> idle_{false};
  bool handling_ = false;  // a worker has the request
  bool peer_finished_ = false;  // the hangup watch read the client's end of stream
};

bool StrandChunkWriter::send(std::function<void(std::function<void(bool)>)> start) {
  if (failed_) return false;
  auto result = std::make_shared<std::promise<bool>>();
  auto done = result->get_future();
  asio::post(session_->stream().get_executor(), [start = std::move(start), result] {
    start([result](bool ok) { result->set_value(ok); });
  });
  // The event loop may have been stopped (a drain that ran out): the
  // posted write then never runs, and the worker must not wait for ever.
  while (done.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready)
    if (session_->server_closed()) {
      failed_ = true;
      return false;
    }
  failed_ = !done.get();
  return !failed_;
}

bool StrandChunkWriter::write(const std::string& chunk) {
  if (chunk.empty()) return !failed_;  // an empty chunk would end the stream
  auto data = std::make_shared<std::string>(chunk);
  return send([session = session_, data](std::function<void(bool)> done) {
    session->expires_after(session->write_timeout());
    asio::async_write(session->stream(), http::make_chunk(asio::buffer(*data)),
                      [data, done](beast::error_code ec, size_t) { done(!ec); });
  });
}

bool StrandChunkWriter::finish() {
  return send([session = session_](std::function<void(bool)> done) {
    session->expires_after(session->write_timeout());
    asio::async_write(session->stream(), http::make_chunk_last(), [done](beast::error_code ec, size_t) { done(!ec); });
  });
}

void accept(Shared& shared) {
  shared.acceptor.async_accept(asio::make_strand(shared.io), [&shared](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !shared.acceptor.is_open()) return;
    if (!ec) {
      if (shared.open.load() >= shared.options.max_connections) {
        // Refused with a response rather than left in the backlog, where it
        // would wait unseen and retry its SYN.
        ++shared.refused;
        static const std::string body = status_json("the server is at its connection limit");
        static const std::string busy =
            "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Type: "
            "application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
        auto s = std::make_shared<tcp::socket>(std::move(socket));
        asio::async_write(*s, asio::buffer(busy), [s](beast::error_code, size_t) {
          beast::error_code ignored;
          s->shutdown(tcp::socket::shutdown_both, ignored);
        });
      } else {
        std::make_shared<Session>(shared, std::move(socket))->start();
      }
    }
    accept(shared);
  });
}

}  // namespace http_server_internal

namespace hsi = http_server_internal;

struct HttpServer::Impl {
  hsi::Shared shared;
  Impl(HttpServerOptions options, HttpRouter router) : shared(std::move(options), std::move(router)) {}
};

HttpServer::HttpServer(HttpServerOptions options, HttpRouter router)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(router))) {}

HttpServer::~HttpServer() {
  stop(std::chrono::milliseconds(0));
  impl_->shared.workers.join();
}

int HttpServer::bind() {
  hsi::Shared& s = impl_->shared;
  const std::string where = s.options.what + s.options.host + ":" + std::to_string(s.options.port);
  try {
    const auto address = asio::ip::make_address(s.options.host == "localhost" ? "127.0.0.1" : s.options.host);
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(s.options.port));
    s.acceptor.open(endpoint.protocol());
    s.acceptor.set_option(asio::socket_base::reuse_address(true));
    s.acceptor.bind(endpoint);
    s.acceptor.listen(asio::socket_base::max_listen_connections);
    return s.acceptor.local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    throw_error(ErrorKind::kIo, where, std::string("cannot listen there: ") + e.what());
  }
}

void HttpServer::run() {
  hsi::Shared& s = impl_->shared;
  if (s.stopping) return;
  hsi::accept(s);
  std::vector<std::thread> threads;
  for (int i = 1; i < s.options.io_threads; ++i) threads.emplace_back([&s] { s.io.run(); });
  s.io.run();
  for (std::thread& t : threads) t.join();
}

void HttpServer::stop(std::chrono::milliseconds drain) {
  hsi::Shared& s = impl_->shared;
  if (s.stopping.exchange(true)) {
    // A second stop waits for the first's drain, without starting another.
    while (!s.closed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return;
  }
  asio::post(s.io, [&s] {
    beast::error_code ignored;
    s.acceptor.close(ignored);
    std::lock_guard<std::mutex> lock(s.sessions_mutex);
    for (hsi::Session* session : s.sessions) session->on_stop();
  });
  const auto deadline = std::chrono::steady_clock::now() + drain;
  while (s.open.load() > 0 && std::chrono::steady_clock::now() < deadline && !s.io.stopped())
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  s.closed = true;
  s.keep_running.reset();
  s.io.stop();
}

HttpServerCounters HttpServer::counters() const {
  const hsi::Shared& s = impl_->shared;
  return {s.open.load(), s.refused.load(), s.header_timeouts.load(), s.body_timeouts.load(), s.requests.load()};
}

}  // namespace gradmesh::net
