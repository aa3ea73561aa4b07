#include "gradmesh/elastic/agent_http.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "gradmesh/core/error.h"
#include "gradmesh/config.h"
#include "gradmesh/net/http_listen.h"
#include "gradmesh/obs/dashboard_page.h"
#include "gradmesh/obs/run_exposition.h"
#include "gradmesh/obs/run_log.h"

namespace gradmesh::elastic {
namespace {

using Json = nlohmann::json;

void reply(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(body.dump() + "\n", "application/json");
}

Json status_json(const AgentSnapshot& s) {
  Json j = {{"phase", agent_phase_name(s.phase)}, {"run_id", s.run_id}, {"generation", s.generation},
            {"workers", s.workers},           {"restarts", s.restarts}};
  j["node_rank"] = s.node_rank >= 0 ? Json(s.node_rank) : Json(nullptr);
  if (s.phase == AgentPhase::kFinished) j["exit_code"] = s.exit_code;
  if (!s.message.empty()) j["message"] = s.message;
  return j;
}

// The agent's figures when no run feeds it (a node without rank 0's file).
std::string agent_only_exposition(const AgentSnapshot& s) {
  return obs::render_run_exposition(obs::RunLog{}, s.run_id, s.generation, s.restarts, s.workers,
                                    agent_phase_name(s.phase));
}

std::string sse(const std::string& name, const std::string& data) { return "event: " + name + "\ndata: " + data + "\n\n"; }

// Each open stream holds one of the server's threads (8 by default) for as
// long as the page is open: past this many, another page is turned away, so
// /metrics and the page itself are always answered.
constexpr int kMaxEventStreams = 4;

// The stream of one dashboard connection: hello, then everything the feed
// has, then each new event as it comes, a comment every second of silence
// (proxies close idle connections, and a write is how a closed one is seen).
void serve_events(const std::shared_ptr<MetricsFeed>& feed, const std::shared_ptr<const AgentStatus>& status,
                  const std::shared_ptr<std::atomic<int>>& streams, httplib::Response& res) {
  if (streams->fetch_add(1) >= kMaxEventStreams) {
    streams->fetch_sub(1);
    res.set_header("Retry-After", "10");
    reply(res, 503, {{"error", "the dashboard already streams to " + std::to_string(kMaxEventStreams) +
                                   " pages; close one and reload"}});
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto next = std::make_shared<size_t>(0);
  auto greeted = std::make_shared<bool>(false);
  res.set_chunked_content_provider("text/event-stream", [feed, status, next, greeted](size_t, httplib::DataSink& sink) {
    if (!*greeted) {
      const AgentSnapshot s = status->snapshot();
      const std::vector<AgentSnapshot> history = status->history();
      const Json hello = {{"run_id", s.run_id}, {"node_rank", s.node_rank}, {"version", GRADMESH_VERSION},
                          {"started", history.empty() ? s.time : history.front().time}};
      const std::string text = sse("hello", hello.dump());
      *greeted = true;
      return sink.write(text.data(), text.size());
    }
    bool over = false;
    const std::vector<MetricsFeed::Event> events = feed->events_since(*next, std::chrono::seconds(1), &over);
    std::string text;
    for (const MetricsFeed::Event& e : events) text += sse(e.name, e.data);
    if (over) {
      // The run's last word: the page stops listening (no reconnection) and
      // the stream ends with its last chunk, as a finished response does.
      text += sse("end", Json{{"events", *next}}.dump());
      if (!sink.write(text.data(), text.size())) return false;
      sink.done();
      return true;
    }
    if (text.empty()) {
      if (feed->stopping()) {
        sink.done();
        return true;
      }
      text = ": idle\n\n";
    }
    return sink.write(text.data(), text.size());
  }, [streams](bool) { streams->fetch_sub(1); });
}

}  // namespace

struct AgentHttpServer::Impl {
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> returned{false};  // listen_after_bind() returned
  std::shared_ptr<std::atomic<int>> streams = std::make_shared<std::atomic<int>>(0);  // open event streams
  std::string host;
  int port = 0;
};

AgentHttpServer::AgentHttpServer(const AgentHttpOptions& options, std::shared_ptr<const AgentStatus> status)
    : impl_(std::make_unique<Impl>()) {
  httplib::Server& server = impl_->server;
  const std::string token = options.token;
  server.set_pre_routing_handler([token](const httplib::Request& req, httplib::Response& res) {
    if (token.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    if (bearer_token_matches(auth, token))
      return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer");
    reply(res, 401, {{"error", auth.empty() ? "this agent requires \"Authorization: Bearer <token>\""
                                            : "the bearer token is not the agent's"}});
    return httplib::Server::HandlerResponse::Handled;
  });
  server.Get("/healthz", [status](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, {{"status", "alive"}, {"phase", agent_phase_name(status->snapshot().phase)}});
  });
  server.Get("/readyz", [status](const httplib::Request&, httplib::Response& res) {
    const AgentSnapshot s = status->snapshot();
    reply(res, s.phase == AgentPhase::kRunning ? 200 : 503, {{"ready", s.phase == AgentPhase::kRunning},
                                                            {"phase", agent_phase_name(s.phase)}});
  });
  server.Get("/status", [status](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, status_json(status->snapshot()));
  });
  const std::shared_ptr<MetricsFeed> feed = options.feed;
  server.Get("/metrics", [status, feed](const httplib::Request&, httplib::Response& res) {
    res.set_content(feed ? feed->prometheus_text() : agent_only_exposition(status->snapshot()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  if (options.dashboard && feed) {
    server.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(obs::dashboard_page_html(), "text/html; charset=utf-8");
    });
    const std::shared_ptr<std::atomic<int>> streams = impl_->streams;
    server.Get("/events", [feed, status, streams](const httplib::Request&, httplib::Response& res) {
      serve_events(feed, status, streams, res);
    });
  }
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404)
      reply(res, 404, {{"error", "no endpoint " + req.path + "; try /healthz, /readyz, /status or /metrics"}});
  });
  impl_->host = options.host;
  impl_->port = bind_alone(server, options.host, options.port, options.dashboard ? "dashboard " : "agent endpoint ");
  impl_->thread = std::thread([this] {
    impl_->server.listen_after_bind();
    impl_->returned = true;
  });
}

AgentHttpServer::~AgentHttpServer() {
  // stop() does nothing until the server runs: let a fresh thread get there first.
  for (int i = 0; i < 5000 && !impl_->server.is_running() && !impl_->returned; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

bool AgentHttpServer::finish_streams(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (impl_->streams->load() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

int AgentHttpServer::port() const { return impl_->port; }

std::string AgentHttpServer::url() const {
  const std::string host = impl_->host.find(':') == std::string::npos ? impl_->host : "[" + impl_->host + "]";
  return "http://" + host + ":" + std::to_string(impl_->port);
}

}  // namespace gradmesh::elastic
