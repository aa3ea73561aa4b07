// The agent's HTTP endpoints: what Kubernetes' liveness and readiness probes
// (through `gradmesh probe`) and an operator ask a node's `gradmesh launch`.
//
//   GET /healthz  200 while the agent runs: liveness
//   GET /readyz   200 while this node's workers run, else 503: readiness
//   GET /status   the phase, run id, node rank, generation, workers, restarts
//   GET /metrics  Prometheus text: the agent's state and, with a metrics
//                 feed, the run's progress, per-rank figures and cost
//
// The dashboard server (`gradmesh launch --dashboard-port`) is the same
// server with a feed and the dashboard on: it adds
//   GET /         the live dashboard page (self-contained: no CDN)
//   GET /events   its server-sent events (metrics_feed.h), the history first;
//                 once the feed has ended, an `end` event and the stream's
//                 last chunk
//
// Bodies are JSON. The server binds 127.0.0.1 unless told otherwise (a
// probe runs inside the pod; nothing outside it needs these), and with a
// token every endpoint asks for "Authorization: Bearer <token>", as
// `gradmesh serve --token-file` does; a wrong or missing token is 401.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "gradmesh/elastic/agent_status.h"
#include "gradmesh/elastic/metrics_feed.h"

namespace gradmesh::elastic {

struct AgentHttpOptions {
  std::string host = "127.0.0.1";
  int port = 0;       // 0: any free port (port() tells which)
  std::string token;  // empty: no authentication
  std::shared_ptr<MetricsFeed> feed;  // the run's metrics for /metrics (and the dashboard)
  bool dashboard = false;             // serve / and /events (needs `feed`)
};

class AgentHttpServer {
 public:
  // Listens before it returns; Error(kIo) naming host:port when it cannot bind.
  AgentHttpServer(const AgentHttpOptions& options, std::shared_ptr<const AgentStatus> status);
  ~AgentHttpServer();
  AgentHttpServer(const AgentHttpServer&) = delete;
  AgentHttpServer& operator=(const AgentHttpServer&) = delete;

  // Waits up to `timeout` for every open event stream to have sent its end
  // (the feed must have ended, MetricsFeed::finish); false when one has not,
  // a page that stopped reading. The launcher calls it before it returns.
  bool finish_streams(std::chrono::milliseconds timeout);

  int port() const;
  std::string url() const;  // "http://127.0.0.1:PORT"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradmesh::elastic
