// The dashboard's server side: the page, the event stream (hello, the
// agent's states, the run's metrics lines from the start and then live) and
// /metrics, fed through a real file store the way rank 0 publishes its file.
#include "gradmesh/elastic/metrics_feed.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "gradmesh/comm/file_store.h"
#include "gradmesh/elastic/agent_http.h"
#include "support/temp_dir.h"

namespace gradmesh::elastic {
namespace {

using TempDir = gradmesh::testing::TempDir;

void append_line(const std::string& path, const std::string& line) {
  std::ofstream(path, std::ios::app | std::ios::binary) << line << "\n";
}

std::string step_line(int step) {
  return R"({"type":"step","step":)" + std::to_string(step) +
         R"(,"epoch":0,"loss":0.5,"samples_per_s":1000,"rank_phase_ms":[[0.1,0.5,1.0,0.3,0.1]],"time":1.0})";
}

struct Dashboard {
  TempDir dir;
  std::string metrics = dir.path() + "/metrics.jsonl";
  std::shared_ptr<AgentStatus> status = std::make_shared<AgentStatus>("run1");
  std::shared_ptr<MetricsFeed> feed;
  std::unique_ptr<AgentHttpServer> server;

  Dashboard() {
    status->rendezvous(0);
    status->running(0, 0, 1);
    feed = std::make_shared<MetricsFeed>("file://" + dir.path() + "/store", "run1", status, std::chrono::milliseconds(20));
    AgentHttpOptions options;
    options.feed = feed;
    options.dashboard = true;
    server = std::make_unique<AgentHttpServer>(options, status);
  }
  void publish(const std::string& path) {
    comm::FileStore store(dir.path() + "/store");
    publish_metrics_path(store, "run1", path);
  }
  std::string get(const std::string& path) {
    httplib::Client client("127.0.0.1", server->port());
    auto r = client.Get(path.c_str());
    return r ? r->body : "";
  }
};

TEST(Dashboard, ServesAPageThatNeedsNothingFromElsewhere) {
  Dashboard d;
  const std::string page = d.get("/");
  EXPECT_NE(page.find("EventSource(\"events\")"), std::string::npos);
  EXPECT_NE(page.find("id=\"heatmap\""), std::string::npos);
  EXPECT_EQ(page.find("src=\"http"), std::string::npos) << "no external script";
  EXPECT_EQ(page.find("href=\"http"), std::string::npos) << "no external stylesheet";
}

TEST(Dashboard, StreamsTheHistoryThenNewLinesAsTheyAreWritten) {
  Dashboard d;
  append_line(d.metrics, R"({"type":"run","run_id":"run1","model":"mlp","time":1.0})");
  append_line(d.metrics, "this line is not JSON");
  append_line(d.metrics, step_line(50));
  d.publish(d.metrics);
  std::string received;
  bool appended = false, done = false;
  httplib::Client client("127.0.0.1", d.server->port());
  client.set_read_timeout(std::chrono::seconds(10));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  client.Get("/events", [&](const char* data, size_t size) {
    received.append(data, size);
    if (!appended && received.find("\"step\":50") != std::string::npos) {
      // Written after the stream caught up: it must arrive live.
      append_line(d.metrics, step_line(100));
      appended = true;
    }
    done = received.find("\"step\":100") != std::string::npos;
    return !done && std::chrono::steady_clock::now() < deadline;
  });
  ASSERT_TRUE(done) << received;
  const size_t hello = received.find("event: hello\ndata: {");
  const size_t agent = received.find("event: agent\ndata: {");
  const size_t run = received.find("event: metrics\ndata: {\"type\":\"run\"");
  ASSERT_NE(hello, std::string::npos) << received;
  ASSERT_NE(agent, std::string::npos) << received;
  ASSERT_NE(run, std::string::npos) << received;
  EXPECT_LT(hello, agent);
  EXPECT_NE(received.find("\"kind\":\"running\""), std::string::npos);
  EXPECT_EQ(received.find("not JSON"), std::string::npos) << "a malformed line is not streamed";
  EXPECT_LT(received.find("\"step\":50"), received.find("\"step\":100"));
  // Prometheus sees the same run.
  const std::string metrics = d.get("/metrics");
  EXPECT_NE(metrics.find("gradmesh_train_step{run_id=\"run1\"} 100"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("gradmesh_agent_workers{run_id=\"run1\"} 1"), std::string::npos) << metrics;
}

TEST(Dashboard, ARunOnAnotherHostLeavesTheAgentsOwnStateOnly) {
  Dashboard d;
  d.publish(d.dir.path() + "/not-on-this-host/metrics.jsonl");
  d.status->finished(0, "every worker exited with status 0");
  std::string received;
  httplib::Client client("127.0.0.1", d.server->port());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  client.Get("/events", [&](const char* data, size_t size) {
    received.append(data, size);
    return received.find("\"kind\":\"finished\"") == std::string::npos && std::chrono::steady_clock::now() < deadline;
  });
  EXPECT_NE(received.find("\"exit_code\":0"), std::string::npos) << received;
  EXPECT_EQ(received.find("event: metrics"), std::string::npos);
  EXPECT_EQ(d.get("/metrics").find("gradmesh_train_step"), std::string::npos);
}

}  // namespace
}  // namespace gradmesh::elastic
