// The dashboard's server side: the page, the event stream (hello, the
// agent's states, the run's metrics lines from the start and then live) and
// /metrics, fed through a real file store the way rank 0 publishes its file.
#include "gradmesh/elastic/metrics_feed.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <sys/stat.h>

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

  explicit Dashboard(size_t thinning_step = size_t{32} << 20) {
    status->rendezvous(0);
    status->running(0, 0, 1);
    feed = std::make_shared<MetricsFeed>("file://" + dir.path() + "/store", "run1", status, std::chrono::milliseconds(20),
                                         thinning_step);
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

// Every event the feed holds, as one connection would receive it.
std::vector<MetricsFeed::Event> all_events(MetricsFeed& feed) {
  std::vector<MetricsFeed::Event> out;
  size_t next = 0;
  for (;;) {
    std::vector<MetricsFeed::Event> more = feed.events_since(next, std::chrono::milliseconds(300));
    if (more.empty()) return out;
    out.insert(out.end(), more.begin(), more.end());
  }
}

TEST(Dashboard, ALongHistoryIsThinnedAndOddLinesDoNotStopTheFeed) {
  Dashboard d(/*thinning_step=*/20'000);
  // A usage line with fields of the wrong types, a line cut off by a kill:
  // the feed reads on.
  append_line(d.metrics, R"({"type":"usage","example_prices":"yes","ranks":{"cpu_seconds":7},"time":1.0})");
  append_line(d.metrics, R"({"type":"step","step":1,"cutoff)");
  for (int step = 2; step <= 400; ++step) append_line(d.metrics, step_line(step));
  d.publish(d.metrics);
  std::vector<MetricsFeed::Event> events;
  for (int i = 0; i < 200; ++i) {
    events = all_events(*d.feed);
    if (d.get("/metrics").find("gradmesh_train_step{run_id=\"run1\"} 400") != std::string::npos) break;
  }
  EXPECT_NE(d.get("/metrics").find("gradmesh_train_step{run_id=\"run1\"} 400"), std::string::npos);
  size_t steps = 0, bytes = 0;
  for (const MetricsFeed::Event& e : events) {
    steps += e.data.find("\"type\":\"step\"") != std::string::npos;
    bytes += e.data.size();
    EXPECT_EQ(e.data.find("cutoff"), std::string::npos) << "the cut-off line is not streamed";
  }
  // 399 step lines of ~110 bytes (44 kB) against a 20 kB thinning step: the
  // first ~180 kept, then every second, then every fourth...
  EXPECT_LT(steps, 300u);
  EXPECT_GT(steps, 150u);
  EXPECT_LT(bytes, 40'000u);
}

TEST(Dashboard, OnlyARegularFileNamedMetricsJsonlIsRead) {
  Dashboard d;
  const std::string fifo = d.dir.path() + "/metrics.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  d.publish(fifo);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // several polls: none may block
  append_line(d.dir.path() + "/other.txt", step_line(5));
  d.publish(d.dir.path() + "/other.txt");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(d.get("/metrics").find("gradmesh_train_step"), std::string::npos);
  // And the feed still stops at once (its destructor joins the thread).
}

}  // namespace
}  // namespace gradmesh::elastic
