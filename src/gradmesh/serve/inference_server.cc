#include "gradmesh/serve/inference_server.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "gradmesh/config.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/net/http_listen.h"
#include "gradmesh/net/http_server.h"
#include "gradmesh/obs/prometheus.h"
#include "gradmesh/serve/grpc_front.h"

namespace gradmesh::serve {
namespace {

using Json = nlohmann::json;

// Seconds from 100 us to about 13 s.
std::vector<double> latency_bounds() { return obs::exponential_bounds(1e-4, 2, 18); }

Json spec_json(const TensorSpec& s) {
  return {{"name", s.name}, {"datatype", datatype_name(s.datatype)}, {"shape", s.shape}};
}

using net::HttpRequest;
using net::HttpResponse;

void reply(HttpResponse& res, int status, const std::string& body) {
  res.status = status;
  res.content_type = "application/json";
  res.body = body;
}

void reply_error(HttpResponse& res, int status, const std::string& message) {
  reply(res, status, error_json(message));
}

// A model's queue is full (or the server is stopping): 503 with Retry-After.
void reply_busy(HttpResponse& res, const std::string& model, const QueueFull& full) {
  res.headers.emplace_back("Retry-After", "1");
  reply_error(res, 503, "model '" + model + "' is busy: " + full.what() + "; retry later");
}

}  // namespace

// /v2/models/{name}[/versions/{version}][/{action}]: false for any other path.
// (Not in the anonymous namespace: Impl's route lambdas capture it.)
struct ModelPath {
  std::string name, version, action;
};
static bool parse_model_path(const std::string& path, ModelPath& out) {
  const std::string prefix = "/v2/models/";
  if (path.rfind(prefix, 0) != 0) return false;
  std::vector<std::string> parts;
  size_t at = prefix.size();
  while (at <= path.size()) {
    const size_t slash = path.find('/', at);
    parts.push_back(path.substr(at, slash == std::string::npos ? std::string::npos : slash - at));
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  for (const std::string& part : parts)
    if (part.empty()) return false;
  size_t next = 1;
  if (parts.size() >= 3 && parts[1] == "versions") {
    out.version = parts[2];
    next = 3;
  }
  if (parts.size() > next + 1) return false;
  out.name = parts[0];
  out.action = parts.size() == next + 1 ? parts[next] : "";
  return true;
}

struct InferenceServer::Impl final : ProtocolCore {
  // One loaded version of a model. Requests hold the version they arrived
  // for, so a hot reload never changes a request in flight.
  struct Version {
    std::shared_ptr<ServedModel> model;
    std::unique_ptr<GenerationScheduler> generator;  // a GPT with a text codec
    DynamicBatcher* batcher = nullptr;               // the name's (batches never mix versions)
  };
  struct Entry {
    std::unique_ptr<DynamicBatcher> batcher;
    mutable std::mutex mutex;
    std::shared_ptr<Version> current;
    // Hot reload (watch()): the checkpoints directory, its loader, the `latest` last read.
    std::string watch_dir;
    std::function<std::shared_ptr<ServedModel>(const std::string& step_dir)> load;
    std::string latest_seen;
    std::shared_ptr<Version> snapshot() const {
      std::lock_guard<std::mutex> lock(mutex);
      return current;
    }
  };
  // One generation request's events, from the scheduler thread to the HTTP thread.
  struct Channel {
    std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<GenerationEvent> events;
    std::string error;
    bool finished = false;
  };
  ServerOptions options;
  std::map<std::string, std::unique_ptr<Entry>> models;
  std::thread watcher;
  double watch_interval = 1.0;
  std::unique_ptr<net::HttpServer> http;
  std::unique_ptr<GrpcFront> grpc;
  int grpc_port = -1;
  std::atomic<bool> stopping{false};
  std::once_flag stopped;
  std::mutex run_mutex;
  std::condition_variable run_done;

  obs::MetricsRegistry metrics;
  obs::CounterFamily& requests = metrics.counter(
      "gradmesh_serve_requests_total", "Inference requests answered, by model and HTTP status.");
  obs::HistogramFamily& queue_seconds = metrics.histogram(
      "gradmesh_serve_queue_seconds", "Time an inference request waited for its batch to start.", latency_bounds());
  obs::HistogramFamily& compute_seconds = metrics.histogram(
      "gradmesh_serve_compute_seconds", "Time of the forward pass of the batch a request ran in.", latency_bounds());
  obs::HistogramFamily& request_seconds = metrics.histogram(
      "gradmesh_serve_request_seconds", "Time from a request's arrival to its response, by model.", latency_bounds());
  obs::HistogramFamily& batch_rows = metrics.histogram(
      "gradmesh_serve_batch_rows", "Rows per forward pass (dynamic batching), by model.",
      obs::exponential_bounds(1, 2, 10));
  obs::GaugeFamily& queue_depth =
      metrics.gauge("gradmesh_serve_queue_depth", "Requests waiting for a batch, by model.");
  obs::GaugeFamily& model_info =
      metrics.gauge("gradmesh_serve_model_info", "The version each model serves (always 1; one series per model).");
  obs::CounterFamily& generated_tokens =
      metrics.counter("gradmesh_serve_generated_tokens_total", "Tokens generated, by model (rate() gives tokens/s).");
  obs::HistogramFamily& first_token_seconds = metrics.histogram(
      "gradmesh_serve_time_to_first_token_seconds", "Time from a generate request's arrival to its first token.",
      latency_bounds());
  obs::HistogramFamily& generation_streams = metrics.histogram(
      "gradmesh_serve_generation_streams", "Sequences advanced together per generation step (continuous batching).",
      obs::exponential_bounds(1, 2, 8));
  obs::CounterFamily& reloads =
      metrics.counter("gradmesh_serve_reloads_total", "Hot reloads of a model from its checkpoints, by result.");

  // The version a request names (any: the one served); ProtocolError(404)
  // for an unknown model or version.
  std::shared_ptr<Version> lookup(const std::string& name, const std::string& version) const {
    const auto it = models.find(name);
    if (it == models.end()) throw ProtocolError(404, "model '" + name + "' is not served here");
    std::shared_ptr<Version> v = it->second->snapshot();
    if (!version.empty() && version != v->model->version())
      throw ProtocolError(404, "model '" + name + "' has no version '" + version + "'; it serves version '" +
                                   v->model->version() + "'");
    return v;
  }

  // lookup() for an HTTP route: replies the 404 and returns null.
  std::shared_ptr<Version> find(const ModelPath& where, HttpResponse& res) const {
    try {
      return lookup(where.name, where.version);
    } catch (const ProtocolError& e) {
      reply_error(res, e.status(), e.what());
      return nullptr;
    }
  }

  // ProtocolCore, for the gRPC front end (and the HTTP one's inference).
  bool ready() const override { return !stopping; }
  bool authorized(const std::string& authorization) const override {
    return options.token.empty() || bearer_token_matches(authorization, options.token);
  }
  ModelInfo model(const std::string& name, const std::string& version) const override {
    const std::shared_ptr<Version> v = lookup(name, version);
    return {v->model->name(), v->model->version(), "gradmesh_" + v->model->shape().kind, v->model->input(),
            v->model->outputs(), !stopping};
  }
  void count(const std::string& model, int status) {
    requests.add({{"model", model}, {"status", std::to_string(status)}});
  }

  // A request that its model accepts: the version it arrived for and its
  // rows. ProtocolError (404, 400; counted) for one it does not.
  struct Admitted {
    std::shared_ptr<Version> e;
    Tensor rows;
    double start = 0;
  };
  Admitted admit(const std::string& name, const std::string& version, const InferRequest& request) {
    Admitted a;
    a.start = now_seconds();
    a.e = lookup(name, version);
    try {
      if (request.inputs.size() != 1)
        throw_error(ErrorKind::kUsage, "inputs",
                    "holds " + std::to_string(request.inputs.size()) + " tensors; model '" + a.e->model->name() +
                        "' takes one, '" + a.e->model->input().name + "'");
      a.rows = a.e->model->rows_of(request.inputs[0]);
      a.e->model->check_outputs(request.outputs);
    } catch (const Error& error) {
      count(a.e->model->name(), 400);
      throw ProtocolError(400, error.what());
    }
    return a;
  }

  ProtocolError busy(const Admitted& a, const QueueFull& full) {
    count(a.e->model->name(), 503);
    return ProtocolError(503, "model '" + a.e->model->name() + "' is busy: " + full.what() + "; retry later");
  }

  InferReply finish(const Admitted& a, const InferRequest& request, BatchResult& result) {
    const obs::Labels model_label{{"model", a.e->model->name()}};
    InferReply reply{a.e->model->name(), a.e->model->version(), request.id,
                     a.e->model->outputs_of(result.output, request.outputs)};
    queue_seconds.observe(model_label, result.queue_seconds);
    compute_seconds.observe(model_label, result.compute_seconds);
    request_seconds.observe(model_label, now_seconds() - a.start);
    count(a.e->model->name(), 200);
    return reply;
  }

  void infer_async(const std::string& name, const std::string& version, InferRequest request,
                   InferDone done) override {
    auto req = std::make_shared<InferRequest>(std::move(request));
    Admitted a;
    try {
      a = admit(name, version, *req);
    } catch (const ProtocolError& refused) {
      return done(nullptr, &refused);
    }
    try {
      // On the batcher's thread, which nothing may throw into.
      a.e->batcher->submit(a.rows, a.e->model, [this, a, req, done](BatchResult* result, std::exception_ptr failure) {
        if (!failure) {
          try {
            InferReply reply = finish(a, *req, *result);
            return done(&reply, nullptr);
          } catch (...) {
            failure = std::current_exception();
          }
        }
        count(a.e->model->name(), 500);
        const ProtocolError refused(500, "inference failed: " + describe(failure));
        try {
          done(nullptr, &refused);
        } catch (...) {  // a front end that cannot even answer: its client's deadline ends the call
        }
      });
    } catch (const QueueFull& full) {
      const ProtocolError refused = busy(a, full);
      done(nullptr, &refused);
    }
  }

  InferReply infer(const std::string& name, const std::string& version, InferRequest request) override {
    std::promise<InferReply> answered;
    std::future<InferReply> answer = answered.get_future();
    infer_async(name, version, std::move(request), [&answered](InferReply* reply, const ProtocolError* refused) {
      if (refused)
        answered.set_exception(std::make_exception_ptr(*refused));
      else
        answered.set_value(std::move(*reply));
    });
    return answer.get();
  }

  std::shared_ptr<Version> make_version(std::shared_ptr<ServedModel> m, DynamicBatcher* batcher) {
    auto v = std::make_shared<Version>();
    v->model = std::move(m);
    v->batcher = batcher;
    if (v->model->sequences() && v->model->codec()) {
      obs::HistogramFamily* streams = &generation_streams;
      const std::string name = v->model->name();
      v->generator = std::make_unique<GenerationScheduler>(
          *v->model->sequences(), *v->model->codec(), options.generation,
          [streams, name](int64_t n, double) { streams->observe({{"model", name}}, static_cast<double>(n)); });
    }
    return v;
  }

  // The watcher thread: reloads a model when its checkpoints' `latest` names a new step.
  void watch_loop() {
    std::unique_lock<std::mutex> lock(run_mutex);
    while (!stopping) {
      lock.unlock();
      for (auto& [name, e] : models)
        if (!e->watch_dir.empty()) reload_if_new(name, *e);
      lock.lock();
      run_done.wait_for(lock, std::chrono::duration<double>(watch_interval), [this] { return stopping.load(); });
    }
  }

  void reload_if_new(const std::string& name, Entry& e) {
    std::ifstream in(e.watch_dir + "/latest");
    std::string latest;
    if (!(in >> latest) || latest == e.latest_seen) return;
    e.latest_seen = latest;
    const std::string old_version = e.snapshot()->model->version();
    if (latest == "step-" + old_version) return;
    std::shared_ptr<Version> fresh;
    try {
      fresh = make_version(e.load(e.watch_dir + "/" + latest), e.batcher.get());
    } catch (const std::exception& error) {
      // The old version keeps serving; the next `latest` is tried again.
      std::fprintf(stderr, "gradmesh serve: %s: could not load %s/%s, still serving version %s: %s\n", name.c_str(),
                   e.watch_dir.c_str(), latest.c_str(), old_version.c_str(), error.what());
      reloads.add({{"model", name}, {"result", "failed"}});
      return;
    }
    std::shared_ptr<Version> old;
    {
      std::lock_guard<std::mutex> lock(e.mutex);
      old = std::exchange(e.current, fresh);
    }
    std::fprintf(stderr, "gradmesh serve: %s: version %s -> %s (%s/%s)\n", name.c_str(), old_version.c_str(),
                 fresh->model->version().c_str(), e.watch_dir.c_str(), latest.c_str());
    reloads.add({{"model", name}, {"result", "ok"}});
    // The info series names the version served, and only that one.
    model_info.remove({{"model", name}, {"version", old_version}});
    model_info.set({{"model", name}, {"version", fresh->model->version()}}, 1);
    // Sequences already generating finish on the old version; then it goes.
    if (old->generator) old->generator->stop();
  }

  void metadata(const ModelPath& where, HttpResponse& res) {
    const std::shared_ptr<Version> e = find(where, res);
    if (!e) return;
    Json outputs = Json::array();
    for (const TensorSpec& s : e->model->outputs()) outputs.push_back(spec_json(s));
    reply(res, 200,
          Json{{"name", e->model->name()},
               {"versions", {e->model->version()}},
               {"platform", "gradmesh_" + e->model->shape().kind},
               {"inputs", {spec_json(e->model->input())}},
               {"outputs", outputs}}
              .dump());
  }


  // POST .../infer over HTTP: parsed and admitted on the calling thread (the
  // event loop, for a body that is not large), answered from the batcher's
  // thread when the batch has run; no thread waits in between.
  void start_infer(const ModelPath& where, const HttpRequest& req, const net::Respond& respond) {
    HttpResponse res;
    if (!find(where, res)) return respond(std::move(res));  // an unknown model or version is a 404
    InferRequest request;
    try {
      int64_t header_length = -1;
      const std::string text = req.header("Inference-Header-Content-Length");
      if (!text.empty()) {
        const std::optional<int64_t> n = try_parse_int(text, 0, options.max_body_bytes);
        if (!n) throw_error(ErrorKind::kUsage, "Inference-Header-Content-Length", "is '" + text + "'; expected a byte count");
        header_length = *n;
      }
      request = parse_infer_request(req.body, options.limits, header_length);
    } catch (const Error& error) {
      count(where.name, 400);
      reply_error(res, 400, error.what());
      return respond(std::move(res));
    }
    // Taken before the request moves (argument order is unspecified).
    const bool all_binary = request.binary_output;
    std::vector<std::string> binary = request.binary_outputs;
    infer_async(where.name, where.version, std::move(request),
                [respond, all_binary, binary = std::move(binary)](InferReply* answer, const ProtocolError* refused) {
                  HttpResponse out;
                  if (refused) {
                    if (refused->status() == 503) out.headers.emplace_back("Retry-After", "1");
                    reply_error(out, refused->status(), refused->what());
                  } else {
                    write_reply(*answer, all_binary, binary, out);
                  }
                  respond(std::move(out));
                });
  }

  static std::string describe(std::exception_ptr failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "an unknown exception";
    }
  }

  // The reply as JSON, or with the binary tensor data extension when asked.
  static void write_reply(const InferReply& answer, bool all_binary, const std::vector<std::string>& binary,
                          HttpResponse& res) {
    if (all_binary || !binary.empty()) {
      int64_t header_length = 0;
      std::string body = infer_response_binary(answer.model_name, answer.model_version, answer.id, answer.outputs,
                                               all_binary, binary, &header_length);
      res.status = 200;
      res.headers.emplace_back("Inference-Header-Content-Length", std::to_string(header_length));
      res.content_type = "application/octet-stream";
      res.body = std::move(body);
    } else {
      reply(res, 200, infer_response_json(answer.model_name, answer.model_version, answer.id, answer.outputs));
    }
  }

  // Starts the sequence; its events arrive in the returned channel. Replies
  // (and returns null) for a bad request or a full queue.
  std::shared_ptr<Channel> start_generation(const Version& e, const HttpRequest& req, HttpResponse& res,
                                            double start) {
    const std::string name = e.model->name();
    auto count = [&](int status) { requests.add({{"model", name}, {"status", std::to_string(status)}}); };
    if (!e.generator) {
      reply_error(res, 400, "model '" + name + "' does not generate text (only a GPT with its vocabulary does)");
      count(400);
      return nullptr;
    }
    auto channel = std::make_shared<Channel>();
    auto first = std::make_shared<bool>(true);
    try {
      std::string text;
      const GenerateParams params = parse_generate_request(req.body, &text);
      e.generator->submit(
          text, params,
          [this, channel, first, name, start](const GenerationEvent& event) {
            if (*first && event.tokens > 0) {
              *first = false;
              first_token_seconds.observe({{"model", name}}, now_seconds() - start);
            }
            std::lock_guard<std::mutex> lock(channel->mutex);
            channel->events.push_back(event);
            channel->finished = event.done;
            channel->changed.notify_all();
          },
          [channel](const std::string& error) {
            std::lock_guard<std::mutex> lock(channel->mutex);
            channel->error = error;
            channel->finished = true;
            channel->changed.notify_all();
          },
          channel->cancelled);
    } catch (const QueueFull& full) {
      reply_busy(res, name, full);
      count(503);
      return nullptr;
    } catch (const Error& error) {
      reply_error(res, 400, error.what());
      count(400);
      return nullptr;
    }
    return channel;
  }

  // A stream whose client left: its sequence ends at the next step, and the
  // tokens it generated still count.
  void count_cancelled(Channel& channel, const std::string& model, double start) {
    std::unique_lock<std::mutex> lock(channel.mutex);
    channel.changed.wait(lock, [&] { return channel.finished; });
    if (!channel.events.empty() && channel.events.back().done) generation_done(model, channel.events.back(), start);
  }

  // A generation's last event has been answered.
  void generation_done(const std::string& model, const GenerationEvent& last, double start) {
    generated_tokens.add({{"model", model}}, static_cast<double>(last.tokens));
    request_seconds.observe({{"model", model}}, now_seconds() - start);
  }

  Json generation_json(const Version& e, const std::string& text, const GenerationEvent& last) {
    Json j = {{"model_name", e.model->name()}, {"model_version", e.model->version()}, {"text_output", text}};
    if (last.done) j["finish_reason"] = last.finish_reason;
    j["tokens"] = last.tokens;
    return j;
  }

  void generate(const ModelPath& where, const HttpRequest& req, HttpResponse& res) {
    const double start = now_seconds();
    const std::shared_ptr<Version> e = find(where, res);
    if (!e) return;
    std::shared_ptr<Channel> channel = start_generation(*e, req, res, start);
    if (!channel) return;
    std::unique_lock<std::mutex> lock(channel->mutex);
    // A client that hangs up cancels its sequence at the next step, freeing its slot.
    while (!channel->changed.wait_for(lock, std::chrono::milliseconds(50), [&] { return channel->finished; }))
      if (req.client_gone()) *channel->cancelled = true;
    const std::string name = e->model->name();
    if (!channel->error.empty()) {
      reply_error(res, 500, "generation failed: " + channel->error);
      requests.add({{"model", name}, {"status", "500"}});
      return;
    }
    std::string text;
    for (const GenerationEvent& event : channel->events) text += event.text;
    const GenerationEvent& last = channel->events.back();
    reply(res, 200, generation_json(*e, text, last).dump(-1, ' ', false, Json::error_handler_t::replace));
    generation_done(name, last, start);
    requests.add({{"model", name}, {"status", "200"}});
  }

  // Server-sent events: one `data: {...}` per piece of text, the last with
  // finish_reason. A client that leaves cancels the sequence at its next step.
  void generate_stream(const ModelPath& where, const HttpRequest& req, HttpResponse& res) {
    const double start = now_seconds();
    const std::shared_ptr<Version> e = find(where, res);
    if (!e) return;
    std::shared_ptr<Channel> channel = start_generation(*e, req, res, start);
    if (!channel) return;
    requests.add({{"model", e->model->name()}, {"status", "200"}});
    res.headers.emplace_back("Cache-Control", "no-cache");
    res.content_type = "text/event-stream";
    res.stream = [this, e, channel, start](net::ChunkWriter& writer) {
      for (bool done = false; !done;) {
        std::unique_lock<std::mutex> lock(channel->mutex);
        channel->changed.wait(lock, [&] { return !channel->events.empty() || channel->finished; });
        std::string out;
        while (!channel->events.empty()) {
          const GenerationEvent event = channel->events.front();
          channel->events.pop_front();
          out += "data: " + generation_json(*e, event.text, event).dump(-1, ' ', false, Json::error_handler_t::replace) +
                 "\n\n";
          if (event.done) {
            done = true;
            generation_done(e->model->name(), event, start);
          }
        }
        if (!channel->error.empty()) {
          out += "event: error\ndata: " + error_json("generation failed: " + channel->error) + "\n\n";
          done = true;
        }
        lock.unlock();
        if (!out.empty() && !writer.write(out)) {
          *channel->cancelled = true;  // the client left: the sequence stops at its next step
          if (!done) count_cancelled(*channel, e->model->name(), start);
          return;
        }
      }
    };
  }

  // Health, server metadata and metrics run on the event loop (they never
  // block, so they answer while inference is saturated); the rest on the workers.
  net::HttpRoute route(const HttpRequest& head) {
    using net::Lane;
    const bool health = head.path.rfind("/v2/health/", 0) == 0;
    if (!options.token.empty() && !health) {
      const std::string auth = head.header("Authorization");
      if (!bearer_token_matches(auth, options.token))
        return {Lane::kInline, [auth](const HttpRequest&, HttpResponse& res) {
                  res.headers.emplace_back("WWW-Authenticate", "Bearer");
                  reply_error(res, 401, auth.empty() ? "this server requires \"Authorization: Bearer <token>\""
                                                     : "the bearer token is not the server's");
                }};
    }
    const bool get = head.method == "GET", post = head.method == "POST";
    if (get && head.path == "/v2/health/live")
      return {Lane::kInline, [](const HttpRequest&, HttpResponse& res) { reply(res, 200, Json{{"live", true}}.dump()); }};
    if (get && head.path == "/v2/health/ready")
      return {Lane::kInline, [this](const HttpRequest&, HttpResponse& res) {
                const bool ready = !stopping;
                reply(res, ready ? 200 : 503, Json{{"ready", ready}}.dump());
              }};
    if (get && head.path == "/v2")
      return {Lane::kInline, [](const HttpRequest&, HttpResponse& res) {
                reply(res, 200,
                      Json{{"name", "gradmesh"}, {"version", GRADMESH_VERSION}, {"extensions", Json::array()}}.dump());
              }};
    if (get && head.path == "/metrics")
      return {Lane::kInline, [this](const HttpRequest&, HttpResponse& res) {
                res.content_type = "text/plain; version=0.0.4";
                res.body = render_metrics();
              }};
    ModelPath where;
    if (!parse_model_path(head.path, where)) return {};
    if (get && where.action.empty())
      return {Lane::kInline, [this, where](const HttpRequest&, HttpResponse& res) { metadata(where, res); }};
    if (get && where.action == "ready")
      return {Lane::kInline, [this, where](const HttpRequest&, HttpResponse& res) {
                if (const std::shared_ptr<Version> e = find(where, res))
                  reply(res, 200, Json{{"name", e->model->name()}, {"ready", !stopping.load()}}.dump());
              }};
    if (post && where.action == "infer")
      return net::HttpRoute::deferred(
          [this, where](const HttpRequest& req, const net::Respond& respond) { start_infer(where, req, respond); });
    if (post && where.action == "generate")
      return {Lane::kWorker, [this, where](const HttpRequest& req, HttpResponse& res) { generate(where, req, res); }};
    if (post && where.action == "generate_stream")
      return {Lane::kWorker,
              [this, where](const HttpRequest& req, HttpResponse& res) { generate_stream(where, req, res); }};
    return {};
  }

  net::HttpServerOptions http_options() const {
    net::HttpServerOptions o;
    o.host = options.host;
    o.port = options.port;
    o.worker_threads = options.http_threads;
    o.max_connections = options.max_connections;
    o.max_body_bytes = options.max_body_bytes;
    o.max_header_bytes = options.max_header_bytes;
    o.header_timeout = std::chrono::milliseconds(static_cast<int64_t>(options.header_timeout_seconds * 1000));
    o.body_timeout = std::chrono::milliseconds(static_cast<int64_t>(options.body_timeout_seconds * 1000));
    o.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(options.idle_timeout_seconds * 1000));
    return o;
  }

  std::string render_metrics() {
    for (auto& [name, e] : models) queue_depth.set({{"model", name}}, static_cast<double>(e->batcher->queue_depth()));
    return metrics.render();
  }
};

InferenceServer::InferenceServer(std::vector<std::shared_ptr<ServedModel>> models, ServerOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  for (std::shared_ptr<ServedModel>& m : models) {
    const std::string name = m->name();
    if (impl_->models.count(name)) throw_error(ErrorKind::kUsage, "model '" + name + "'", "is given twice");
    auto e = std::make_unique<Impl::Entry>();
    obs::HistogramFamily* rows = &impl_->batch_rows;
    e->batcher = std::make_unique<DynamicBatcher>(
        [](const Tensor& batch, const void* model) { return static_cast<const ServedModel*>(model)->forward(batch); },
        impl_->options.batch,
        [rows, name](int64_t n, double) { rows->observe({{"model", name}}, static_cast<double>(n)); });
    e->current = impl_->make_version(m, e->batcher.get());
    impl_->model_info.set({{"model", name}, {"version", m->version()}}, 1);
    impl_->models.emplace(name, std::move(e));
  }
  impl_->http = std::make_unique<net::HttpServer>(
      impl_->http_options(), [impl = impl_.get()](const HttpRequest& head) { return impl->route(head); });
}

InferenceServer::~InferenceServer() { stop(); }

int InferenceServer::bind() {
  const int port = impl_->http->bind();
  const ServerOptions& o = impl_->options;
  if (o.grpc_port >= 0) {
    impl_->grpc = std::make_unique<GrpcFront>(*impl_, GrpcOptions{o.host, o.grpc_port, o.max_body_bytes, o.limits});
    impl_->grpc_port = impl_->grpc->start();
  }
  return port;
}

int InferenceServer::grpc_port() const { return impl_->grpc_port; }

void InferenceServer::run() {
  if (impl_->stopping) return;
  impl_->http->run();  // returns once stop() has drained
}

void InferenceServer::stop() {
  std::call_once(impl_->stopped, [this] {
    {
      std::lock_guard<std::mutex> lock(impl_->run_mutex);
      impl_->stopping = true;
    }
    impl_->run_done.notify_all();  // the watcher waits on it between polls
    // Requests and streams in flight finish first (their handlers wait on
    // the batchers and generators, which run until below), for up to the drain timeout.
    const auto drain = std::chrono::milliseconds(static_cast<int64_t>(impl_->options.drain_timeout_seconds * 1000));
    std::thread grpc_drain([this, drain] {
      if (impl_->grpc) impl_->grpc->stop(drain);
    });
    impl_->http->stop(drain);
    grpc_drain.join();
    if (impl_->watcher.joinable()) impl_->watcher.join();
    for (auto& [name, e] : impl_->models) {
      e->batcher->stop();
      if (e->current->generator) e->current->generator->stop();
    }
  });
}

std::string InferenceServer::metrics_text() const { return impl_->render_metrics(); }

void InferenceServer::watch(const std::string& name, const std::string& checkpoints_dir,
                            std::function<std::shared_ptr<ServedModel>(const std::string& step_dir)> load,
                            double interval_seconds) {
  const auto it = impl_->models.find(name);
  GRADMESH_CHECK(it != impl_->models.end(), "watch() of a model not served: " + name);
  GRADMESH_CHECK(!impl_->watcher.joinable(), "watch() after the watcher started");
  it->second->watch_dir = checkpoints_dir;
  it->second->load = std::move(load);
  impl_->watch_interval = interval_seconds;
}

void InferenceServer::start_watching() {
  bool any = false;
  for (auto& [name, e] : impl_->models) any = any || !e->watch_dir.empty();
  if (any && !impl_->watcher.joinable()) impl_->watcher = std::thread([this] { impl_->watch_loop(); });
}

}  // namespace gradmesh::serve
