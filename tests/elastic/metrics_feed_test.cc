// The dashboard's server side: the page, the event stream (hello, the
// agent's states, the run's metrics lines from the start and then live) and
// /metrics, fed through a real file store the way rank 0 publishes its file.
#include "gradmesh/elastic/metrics_feed.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

  explicit Dashboard(size_t thinning_step = size_t{32} << 20,
                     std::chrono::milliseconds interval = std::chrono::milliseconds(20)) {
    status->rendezvous(0);
    status->running(0, 0, 1);
    feed = std::make_shared<MetricsFeed>("file://" + dir.path() + "/store", "run1", status, interval, thinning_step);
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

// The data of each `event: NAME` in a stream, in order.
std::vector<std::string> stream_data(const std::string& stream, const std::string& name) {
  std::vector<std::string> out;
  const std::string head = "event: " + name + "\ndata: ";
  for (size_t at = stream.find(head); at != std::string::npos; at = stream.find(head, at + 1)) {
    const size_t from = at + head.size();
    out.push_back(stream.substr(from, stream.find('\n', from) - from));
  }
  return out;
}

std::vector<std::string> file_lines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A page that is open when the run ends: its stream carries every line of
// the file, then the launcher's `finished`, then `end`, and then ends as a
// complete chunked response. The feed polls every 10 s here, so only the
// last read can have seen what the run wrote just before it ended.
TEST(Dashboard, APageOpenAtTheEndGetsEveryLineTheFinishedEventAndACleanEnd) {
  // 5,000 lines of 1 kB: more than one read's 4 MiB.
  const std::string padding(900, 'x');
  for (const int lines : {1, 300, 5'000}) {
    SCOPED_TRACE(std::to_string(lines) + " lines");
    Dashboard d(size_t{32} << 20, std::chrono::seconds(10));
    std::string received;
    bool connected = false;
    std::mutex mutex;
    std::condition_variable cv;
    std::string outcome;  // "200", or why the stream failed
    std::thread page([&] {
      httplib::Client client("127.0.0.1", d.server->port());
      client.set_read_timeout(std::chrono::seconds(20));
      const httplib::Result r = client.Get("/events", [&](const char* data, size_t size) {
        std::lock_guard<std::mutex> lock(mutex);
        received.append(data, size);
        connected = true;
        cv.notify_all();
        return true;
      });
      outcome = r ? std::to_string(r->status) : "cut: " + httplib::to_string(r.error());
    });
    {
      std::unique_lock<std::mutex> lock(mutex);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return connected; }));
    }
    // The run: its path published and its lines written, then its end, at once.
    d.publish(d.metrics);
    append_line(d.metrics, R"({"type":"run","run_id":"run1","model":"mlp","time":1.0})");
    {
      std::ofstream out(d.metrics, std::ios::app | std::ios::binary);
      for (int step = 1; step < lines; ++step) {
        std::string line = step_line(step);
        if (lines > 1000) line.insert(line.size() - 1, ",\"note\":\"" + padding + "\"");
        out << line << "\n";
      }
    }
    d.status->finished(0, "every worker exited with status 0");
    EXPECT_TRUE(d.feed->finish(std::chrono::seconds(10)));
    EXPECT_TRUE(d.server->finish_streams(std::chrono::seconds(10)));
    page.join();
    EXPECT_EQ(outcome, "200") << "the stream ends as a complete response";
    EXPECT_EQ(stream_data(received, "metrics"), file_lines(d.metrics)) << "every line of the file, in order";
    const std::vector<std::string> agent = stream_data(received, "agent");
    ASSERT_FALSE(agent.empty());
    EXPECT_NE(agent.back().find("\"kind\":\"finished\""), std::string::npos) << agent.back();
    const size_t end = received.find("event: end\n");
    ASSERT_NE(end, std::string::npos) << received.substr(received.size() - std::min<size_t>(received.size(), 500));
    EXPECT_GT(end, received.rfind("\"kind\":\"finished\""));
    EXPECT_EQ(received.find("event:", end + 1), std::string::npos) << "nothing after the end";
  }
}

// A page that connects after the end gets the whole run and the end at once;
// a feed that ended still answers /metrics.
TEST(Dashboard, APageOpenedAfterTheEndGetsTheWholeRunAndTheEnd) {
  Dashboard d;
  append_line(d.metrics, step_line(7));
  d.publish(d.metrics);
  d.status->finished(0, "every worker exited with status 0");
  ASSERT_TRUE(d.feed->finish(std::chrono::seconds(10)));
  EXPECT_TRUE(d.feed->ended());
  httplib::Client client("127.0.0.1", d.server->port());
  client.set_read_timeout(std::chrono::seconds(10));
  const httplib::Result r = client.Get("/events");
  ASSERT_TRUE(r);
  EXPECT_EQ(stream_data(r->body, "metrics"), std::vector<std::string>{step_line(7)});
  EXPECT_EQ(stream_data(r->body, "end"), std::vector<std::string>{"{\"events\":4}"}) << r->body;
  EXPECT_NE(d.get("/metrics").find("gradmesh_train_step{run_id=\"run1\"} 7"), std::string::npos);
}

}  // namespace
}  // namespace gradmesh::elastic
