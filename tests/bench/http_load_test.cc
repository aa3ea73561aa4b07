// The open-loop load generator against a real HTTP server on loopback: every
// scheduled request is sent and answered and counted once, statuses are
// counted, a server that closes each connection is followed with new ones,
// and a port where nothing listens is a usage error.
#include "gradmesh/bench/http_load.h"

#include <gtest/gtest.h>

#include <thread>

#include "gradmesh/core/error.h"
#include "gradmesh/net/http_server.h"

namespace gradmesh::bench {
namespace {

class HttpLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    net::HttpServerOptions options;
    options.port = 0;
    server_ = std::make_unique<net::HttpServer>(options, [](const net::HttpRequest& head) -> net::HttpRoute {
      if (head.path != "/echo") return {};
      return {net::Lane::kWorker, [](const net::HttpRequest& req, net::HttpResponse& res) { res.body = req.body; }};
    });
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    server_->stop(std::chrono::milliseconds(2000));
    thread_.join();
  }
  HttpLoadOptions options(const std::string& path) const {
    HttpLoadOptions o;
    o.port = port_;
    o.method = "POST";
    o.path = path;
    o.body = "hello";
    o.rate = 400;
    o.connections = 4;
    o.seconds = 1;
    o.warmup_seconds = 0.25;
    return o;
  }

  std::unique_ptr<net::HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(HttpLoadTest, EveryScheduledRequestIsSentAnsweredAndCountedOnce) {
  const HttpLoadResult r = run_http_load(options("/echo"));
  EXPECT_EQ(r.scheduled, 400) << "rate x seconds, the warm-up's 100 not counted";
  EXPECT_EQ(r.answered, 400);
  EXPECT_EQ(r.non_2xx, 0);
  EXPECT_EQ(r.unanswered, 0);
  EXPECT_EQ(r.reconnects, 0) << "keep-alive connections are reused";
  EXPECT_GT(r.p50_ms, 0);
  EXPECT_LE(r.p50_ms, r.p99_ms);
  EXPECT_LE(r.p99_ms, r.max_ms);
  const std::string json = format_http_load_json(options("/echo"), r);
  EXPECT_NE(json.find("\"answered\": 400"), std::string::npos) << json;
}

TEST_F(HttpLoadTest, StatusesOutsideTwoHundredAreCounted) {
  const HttpLoadResult r = run_http_load(options("/missing"));
  EXPECT_EQ(r.answered, 400);
  EXPECT_EQ(r.non_2xx, 400);
}

TEST_F(HttpLoadTest, AServerThatClosesEachConnectionIsFollowedWithNewOnes) {
  HttpLoadOptions o = options("/echo");
  o.headers = {{"Connection", "close"}};
  const HttpLoadResult r = run_http_load(o);
  EXPECT_EQ(r.answered, 400);
  EXPECT_EQ(r.unanswered, 0);
  EXPECT_GE(r.reconnects, 400);
}

TEST(HttpLoad, NothingListeningAndBadUrlsAreUsageErrors) {
  HttpLoadOptions o;
  o.port = 1;  // reserved: nothing listens there
  o.rate = 100;
  o.seconds = 0.2;
  o.warmup_seconds = 0;
  try {
    run_http_load(o);
    ADD_FAILURE() << "ran against a closed port";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("nothing listens at 127.0.0.1:1"), std::string::npos) << e.what();
  }
  HttpLoadOptions parsed;
  parse_http_url("http://localhost:8000/v2/health/ready", parsed, "url");
  EXPECT_EQ(parsed.host, "localhost");
  EXPECT_EQ(parsed.port, 8000);
  EXPECT_EQ(parsed.path, "/v2/health/ready");
  for (const std::string bad : {"https://x:1/", "http://:80/", "http://x:99999/", "ftp://x"})
    EXPECT_THROW(parse_http_url(bad, parsed, "url"), Error) << bad;
}

}  // namespace
}  // namespace gradmesh::bench
