// net::HttpServer over real sockets on loopback, driven by a raw client so
// that a test can be the slow, pipelining or greedy client it is about:
// deadlines that do not restart on each byte, limits on headers, bodies and
// connections, pipelined requests answered in order, the inline lane
// answering while every worker is busy, streams that notice a client gone,
// and a stop that drains what is in flight.
#include "gradmesh/net/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gradmesh::net {
namespace {

using std::chrono::milliseconds;

// A blocking loopback client; every read gives up after 20 s, so a server
// that never answers fails the test instead of hanging it.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    timeval tv{20, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawClient() { ::close(fd_); }
  bool connected() const { return connected_; }
  bool send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  void finish_sending() { ::shutdown(fd_, SHUT_WR); }
  // Everything until the server closes the connection (or 20 s pass).
  std::string read_to_close() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd_, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
    closed_by_server_ = n == 0;
    return out;
  }
  // Whether the last read_to_close ended because the server closed (not a timeout).
  bool closed_by_server() const { return closed_by_server_; }
  // Reads until `text` has appeared `count` times, the connection closes, or 20 s pass.
  std::string read_until(const std::string& text, int count = 1) {
    std::string out;
    char buf[4096];
    while (occurrences(out, text) < count) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  static int occurrences(const std::string& haystack, const std::string& needle) {
    int n = 0;
    for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
    return n;
  }

 private:
  int fd_;
  bool connected_ = false;
  bool closed_by_server_ = false;
};

std::string get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + extra + "\r\n";
}

class HttpServerTest : public ::testing::Test {
 protected:
  void start(HttpServerOptions options = {}) {
    options.port = 0;
    server_ = std::make_unique<HttpServer>(options, [this](const HttpRequest& head) { return route(head); });
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released_ = true;
    }
    released_cv_.notify_all();
    if (server_) server_->stop(milliseconds(2000));
    if (thread_.joinable()) thread_.join();
  }

  HttpRoute route(const HttpRequest& head) {
    if (head.path == "/health") return {Lane::kInline, [](const HttpRequest&, HttpResponse& r) { r.body = "ok"; }};
    if (head.path == "/echo")
      return {Lane::kWorker, [](const HttpRequest& req, HttpResponse& r) {
                r.body = req.method + " " + req.target + " " + req.header("x-tag") + " " + req.body;
              }};
    if (head.path == "/later")  // answered from another thread after the route returns
      return HttpRoute::deferred([this](const HttpRequest& req, Respond respond) {
                std::lock_guard<std::mutex> lock(mutex_);
                later_.emplace_back([body = req.body, respond] {
                  HttpResponse r;
                  r.body = "later " + body;
                  respond(r);
                  respond(r);  // a second call does nothing
                });
              });
    if (head.path == "/block")  // holds its worker until the test releases it
      return {Lane::kWorker, [this](const HttpRequest&, HttpResponse& r) {
                ++blocked_;
                std::unique_lock<std::mutex> lock(mutex_);
                released_cv_.wait(lock, [this] { return released_; });
                r.body = "released";
              }};
    if (head.path == "/stream")
      return {Lane::kWorker, [this](const HttpRequest&, HttpResponse& r) {
                r.content_type = "text/event-stream";
                r.stream = [this](ChunkWriter& w) {
                  for (int i = 0; i < 1000; ++i) {
                    if (!w.write("data: " + std::to_string(i) + "\n\n")) {
                      stream_stopped_at_ = i;
                      return;
                    }
                    if (i >= 2 && !endless_) return;
                    std::this_thread::sleep_for(milliseconds(10));
                  }
                };
              }};
    return {};
  }

  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mutex_;
  std::condition_variable released_cv_;
  bool released_ = false;
  std::atomic<int> blocked_{0};
  std::atomic<int> stream_stopped_at_{-1};
  std::atomic<bool> endless_{false};  // set by the test thread, read by the stream handler
  std::vector<std::function<void()>> later_;  // deferred answers the test sends; under mutex_
};

TEST_F(HttpServerTest, AnswersKeepAliveAndPipelinedRequestsInOrder) {
  start();
  RawClient c(port_);
  ASSERT_TRUE(c.connected());
  // Three pipelined requests in one write, the last closing the connection.
  ASSERT_TRUE(c.send(get("/echo?a=1", "X-Tag: one\r\n") + get("/health") +
                     "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"));
  const std::string all = c.read_to_close();
  const size_t first = all.find("GET /echo?a=1 one "), second = all.find("\r\n\r\nok"),
               third = all.find("POST /echo  hello");
  ASSERT_NE(first, std::string::npos) << all;
  ASSERT_NE(second, std::string::npos) << all;
  ASSERT_NE(third, std::string::npos) << all;
  EXPECT_LT(first, second);
  EXPECT_LT(second, third);
  EXPECT_EQ(RawClient::occurrences(all, "HTTP/1.1 200 OK"), 3) << all;
  EXPECT_EQ(RawClient::occurrences(all, "Connection: close"), 1) << all;

  RawClient missing(port_);
  ASSERT_TRUE(missing.send(get("/nothing", "Connection: close\r\n")));
  const std::string not_found = missing.read_to_close();
  EXPECT_NE(not_found.find("HTTP/1.1 404"), std::string::npos) << not_found;
  EXPECT_NE(not_found.find("no such endpoint: GET /nothing"), std::string::npos) << not_found;
}

// A client that sends its requests and then closes its side (as `nc` or a
// script piping into a socket does) gets every answer, and then the server
// closes too, also when a worker had the request while the end of stream came.
TEST_F(HttpServerTest, AClientThatClosesItsSideGetsItsAnswersAndThenTheClose) {
  start();
  for (const std::string& requests : {get("/echo?a=1"), get("/health"), get("/echo?a=2") + get("/health")}) {
    RawClient c(port_);
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.send(requests));
    c.finish_sending();
    const std::string all = c.read_to_close();
    EXPECT_TRUE(c.closed_by_server()) << "the server kept the connection open after the client's end: " << requests;
    EXPECT_EQ(RawClient::occurrences(all, "HTTP/1.1 200 OK"), RawClient::occurrences(requests, "GET ")) << all;
  }
}

// A deferred route returns at once and answers later from another thread;
// the connection keeps its order (a pipelined request waits for the
// deferred answer) and no worker is held meanwhile.
TEST_F(HttpServerTest, ADeferredRouteAnswersFromAnotherThreadInOrder) {
  HttpServerOptions options;
  options.worker_threads = 1;
  start(options);
  RawClient c(port_);
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send("POST /later HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" + get("/health")));
  for (int i = 0; i < 2000; ++i) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!later_.empty()) break;
    std::this_thread::sleep_for(milliseconds(5));
  }
  RawClient other(port_);  // the single worker is free while the answer is pending
  ASSERT_TRUE(other.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"));
  EXPECT_NE(other.read_to_close().find("POST /echo  hi"), std::string::npos);
  std::thread answer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ASSERT_EQ(later_.size(), 1u);
    answer = std::thread(later_.front());
  }
  answer.join();
  const std::string both = c.read_until("HTTP/1.1 200 OK", 2);
  const size_t deferred = both.find("later abc"), health = both.find("\r\n\r\nok");
  ASSERT_NE(deferred, std::string::npos) << both;
  ASSERT_NE(health, std::string::npos) << both;
  EXPECT_LT(deferred, health) << "the pipelined request is answered after the deferred one";
}

// A header line every 300 ms kept the old server's worker for ever (its
// timeout restarted on every byte); here the whole header has one deadline.
TEST_F(HttpServerTest, ATricklingClientGetsA408AndHoldsNothing) {
  HttpServerOptions o;
  o.header_timeout = milliseconds(1000);
  o.worker_threads = 1;
  start(o);
  RawClient slow(port_);
  ASSERT_TRUE(slow.send("GET /echo HTTP/1.1\r\n"));
  std::thread trickle([&] {
    for (int i = 0; i < 20; ++i) {
      if (!slow.send("X-Line-" + std::to_string(i) + ": y\r\n")) return;
      std::this_thread::sleep_for(milliseconds(300));
    }
  });
  // Meanwhile other clients are answered.
  RawClient other(port_);
  ASSERT_TRUE(other.send(get("/echo", "Connection: close\r\n")));
  EXPECT_NE(other.read_to_close().find("200 OK"), std::string::npos);
  const std::string answer = slow.read_to_close();
  trickle.join();
  EXPECT_NE(answer.find("HTTP/1.1 408"), std::string::npos) << answer;
  EXPECT_NE(answer.find("headers did not arrive within 1000 ms"), std::string::npos) << answer;
  EXPECT_EQ(server_->counters().header_timeouts, 1);
}

TEST_F(HttpServerTest, ASlowBodyGetsA408) {
  HttpServerOptions o;
  o.body_timeout = milliseconds(800);
  start(o);
  RawClient slow(port_);
  ASSERT_TRUE(slow.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n\r\n"));
  std::thread trickle([&] {
    for (int i = 0; i < 20 && slow.send(std::string(1024, 'a')); ++i) std::this_thread::sleep_for(milliseconds(200));
  });
  const std::string answer = slow.read_until("\r\n\r\n{");
  trickle.join();
  EXPECT_NE(answer.find("HTTP/1.1 408"), std::string::npos) << answer;
  EXPECT_EQ(server_->counters().body_timeouts, 1);
}

TEST_F(HttpServerTest, OversizedBodiesAndHeadersAreRefusedBeforeTheyArrive) {
  HttpServerOptions o;
  o.max_body_bytes = 1000;
  o.max_header_bytes = 2000;
  start(o);
  RawClient big(port_);
  // Only the header is sent: the answer comes from Content-Length alone.
  ASSERT_TRUE(big.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n\r\n"));
  const std::string refused = big.read_to_close();
  EXPECT_NE(refused.find("HTTP/1.1 413"), std::string::npos) << refused;
  EXPECT_NE(refused.find("(50000000 bytes) is larger than the server accepts (at most 1000 bytes)"), std::string::npos) << refused;

  RawClient chunked(port_);  // no Content-Length: the limit applies as the chunks arrive
  ASSERT_TRUE(chunked.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" +
                           std::string(2000, 'b') + "\r\n0\r\n\r\n"));
  EXPECT_NE(chunked.read_to_close().find("HTTP/1.1 413"), std::string::npos);

  RawClient headers(port_);
  std::string many = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 200; ++i) many += "X-Filler-" + std::to_string(i) + ": zzzzzzzzzz\r\n";
  ASSERT_TRUE(headers.send(many + "\r\n"));
  const std::string too_many = headers.read_to_close();
  EXPECT_NE(too_many.find("HTTP/1.1 431"), std::string::npos) << too_many.substr(0, 200);
}

// Every worker blocked (inference saturated): health, on the inline lane,
// still answers; more slow connections than workers hold nothing.
TEST_F(HttpServerTest, TheInlineLaneAnswersWhileEveryWorkerIsBusy) {
  HttpServerOptions o;
  o.worker_threads = 2;
  start(o);
  std::vector<std::unique_ptr<RawClient>> busy;
  for (int i = 0; i < 2; ++i) {
    busy.push_back(std::make_unique<RawClient>(port_));
    ASSERT_TRUE(busy.back()->send(get("/block")));
  }
  while (blocked_.load() < 2) std::this_thread::sleep_for(milliseconds(5));
  std::vector<std::unique_ptr<RawClient>> idle;  // 40 half-sent requests
  for (int i = 0; i < 40; ++i) {
    idle.push_back(std::make_unique<RawClient>(port_));
    ASSERT_TRUE(idle.back()->send("GET /health HTTP/1.1\r\nHost"));
  }
  RawClient health(port_);
  ASSERT_TRUE(health.send(get("/health", "Connection: close\r\n")));
  EXPECT_NE(health.read_to_close().find("200 OK"), std::string::npos);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
  }
  released_cv_.notify_all();
  for (auto& c : busy) EXPECT_NE(c->read_until("released").find("released"), std::string::npos);
}

TEST_F(HttpServerTest, ConnectionsOverTheLimitGetA503AtOnce) {
  HttpServerOptions o;
  o.max_connections = 2;
  start(o);
  RawClient a(port_), b(port_);
  ASSERT_TRUE(a.send(get("/health")));
  ASSERT_TRUE(b.send(get("/health")));
  a.read_until("ok");
  b.read_until("ok");
  RawClient third(port_);
  const std::string refused = third.read_to_close();
  EXPECT_NE(refused.find("HTTP/1.1 503"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos) << refused;
  EXPECT_EQ(server_->counters().refused_connections, 1);
}

TEST_F(HttpServerTest, StreamsAreChunkedAndStopWhenTheClientGoes) {
  start();
  {
    RawClient c(port_);
    ASSERT_TRUE(c.send(get("/stream", "Connection: close\r\n")));
    const std::string all = c.read_to_close();
    EXPECT_NE(all.find("Transfer-Encoding: chunked"), std::string::npos) << all;
    EXPECT_NE(all.find("data: 2\n\n"), std::string::npos) << all;
    EXPECT_NE(all.find("\r\n0\r\n\r\n"), std::string::npos) << "the last chunk: " << all;
  }
  endless_ = true;
  {
    RawClient c(port_);
    ASSERT_TRUE(c.send(get("/stream")));
    c.read_until("data: 3\n\n");
  }  // the client hangs up
  for (int i = 0; i < 2000 && stream_stopped_at_.load() < 0; ++i) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_GE(stream_stopped_at_.load(), 3) << "the stream never noticed the client had gone";
  EXPECT_LT(stream_stopped_at_.load(), 999);
}

TEST_F(HttpServerTest, StopFinishesRequestsInFlightAndClosesIdleConnections) {
  start();
  RawClient idle(port_);
  ASSERT_TRUE(idle.send(get("/health")));
  idle.read_until("ok");
  RawClient working(port_);
  ASSERT_TRUE(working.send(get("/block")));
  while (blocked_.load() < 1) std::this_thread::sleep_for(milliseconds(5));
  std::thread stopper([this] { server_->stop(milliseconds(20'000)); });
  EXPECT_EQ(idle.read_to_close(), "") << "an idle keep-alive connection is closed at once";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
  }
  released_cv_.notify_all();
  const std::string answer = working.read_to_close();
  EXPECT_NE(answer.find("200 OK"), std::string::npos) << answer;
  EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
  EXPECT_NE(answer.find("released"), std::string::npos) << answer;
  stopper.join();
  thread_.join();
  EXPECT_FALSE(RawClient(port_).connected()) << "no longer listening";
}

TEST_F(HttpServerTest, ExpectContinueGetsA100BeforeTheBody) {
  start();
  RawClient c(port_);
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_NE(c.read_until("\r\n\r\n").find("HTTP/1.1 100 Continue"), std::string::npos);
  ASSERT_TRUE(c.send("abc"));
  EXPECT_NE(c.read_until("abc").find("POST /echo  abc"), std::string::npos);
}

}  // namespace
}  // namespace gradmesh::net
