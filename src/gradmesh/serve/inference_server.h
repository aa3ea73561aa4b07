// `gradmesh serve`'s HTTP server: the Open Inference Protocol v2 (KServe,
// Triton) over HTTP/1.1 for the models it holds, with dynamic batching per
// model, Prometheus metrics and bearer-token authentication.
//
//   GET  /v2/health/live, /v2/health/ready           (never need a token)
//   GET  /v2                                          server metadata
//   GET  /v2/models/{name}[/versions/{v}]            model metadata
//   GET  /v2/models/{name}[/versions/{v}]/ready
//   POST /v2/models/{name}[/versions/{v}]/infer      JSON tensors (infer_json.h)
//   POST /v2/models/{name}[/versions/{v}]/generate   a GPT's text (generation.h), whole
//   POST .../generate_stream                          the same as server-sent events
//   GET  /metrics                                     Prometheus text
// and, with grpc_port, the same over gRPC (grpc_front.h).
//
// Errors are the protocol's {"error": "..."}: 400 for a malformed request
// (the message names the field), 401 without the token, 404 for an unknown
// model, version or path, 413 for a body over the limit, 503 with
// Retry-After when a model's queue is full or the server is stopping.
// The HTTP front end is net::HttpServer (event-driven; its deadlines and
// limits are ServerOptions' below).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gradmesh/serve/batcher.h"
#include "gradmesh/serve/generation.h"
#include "gradmesh/serve/infer_json.h"
#include "gradmesh/serve/served_model.h"

namespace gradmesh::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                             // 0: any free port (bind() says which)
  std::string token;                           // non-empty: required as "Authorization: Bearer <token>"
  int64_t max_body_bytes = int64_t{64} << 20;  // larger bodies get 413
  RequestLimits limits;
  BatchOptions batch;
  GenerationOptions generation;
  int http_threads = 16;                       // requests handled at once (idle connections hold none)
  int64_t max_connections = 1024;              // more are answered 503 at once
  int64_t max_header_bytes = int64_t{64} << 10;  // larger request headers get 431
  double header_timeout_seconds = 10;          // a request's line and headers, from its first byte (408)
  double body_timeout_seconds = 60;            // its whole body (408)
  double idle_timeout_seconds = 60;            // a keep-alive connection between requests
  double drain_timeout_seconds = 30;           // stop(): how long requests and streams in flight may finish
  int grpc_port = -1;                          // >= 0: the protocol over gRPC too (0: any free port); -1: off
};

class InferenceServer {
 public:
  InferenceServer(std::vector<std::shared_ptr<ServedModel>> models, ServerOptions options);
  ~InferenceServer();
  InferenceServer(const InferenceServer&) = delete;
  InferenceServer& operator=(const InferenceServer&) = delete;

  // Binds and listens; returns the HTTP port. With options.grpc_port >= 0
  // the gRPC front end (grpc_front.h) starts here too. Error(kIo) naming
  // host:port when either cannot listen.
  int bind();
  // The gRPC front end's port after bind(); -1 when it is off.
  int grpc_port() const;
  // Answers requests until stop(). REQUIRES: bind() succeeded.
  void run();
  // Stops accepting connections, lets requests and streams in flight finish
  // (their batches and generations run) for up to drain_timeout_seconds,
  // closes what is left, then returns; run() returns too. Safe from any thread.
  void stop();

  // The /metrics text.
  std::string metrics_text() const;

  // Hot reload: every `interval_seconds` the server reads
  // `<checkpoints_dir>/latest`; when it names a step other than the version
  // served, `load` builds that checkpoint's model (its version: the step) and
  // the model is swapped without dropping a request: those that arrived
  // before finish on the old version, later ones run on the new, and every
  // response names its version. A checkpoint that fails to load is logged
  // and counted; the old version goes on serving. Call before
  // start_watching(). REQUIRES: `name` is served.
  void watch(const std::string& name, const std::string& checkpoints_dir,
             std::function<std::shared_ptr<ServedModel>(const std::string& step_dir)> load,
             double interval_seconds = 1.0);
  // Starts the watcher thread (if any model is watched); stop() ends it.
  void start_watching();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradmesh::serve
