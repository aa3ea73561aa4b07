#include "gradmesh/elastic/agent_http.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "gradmesh/core/error.h"
#include "gradmesh/core/secret.h"

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

}  // namespace

struct AgentHttpServer::Impl {
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> returned{false};  // listen_after_bind() returned
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
    if (auth.rfind("Bearer ", 0) == 0 && same_secret(auth.substr(7), token))
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
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404) reply(res, 404, {{"error", "no endpoint " + req.path + "; try /healthz, /readyz or /status"}});
  });
  // SO_REUSEADDR only: httplib also sets SO_REUSEPORT, with which a second
  // agent on the same port would bind too and take half the probes.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  impl_->host = options.host;
  impl_->port = options.port == 0 ? server.bind_to_any_port(options.host) : options.port;
  if (options.port != 0 && !server.bind_to_port(options.host, options.port)) impl_->port = -1;
  if (impl_->port < 0)
    throw_error(ErrorKind::kIo, "agent endpoint " + options.host + ":" + std::to_string(options.port),
                "cannot listen there (in use, or not an address of this host)");
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

int AgentHttpServer::port() const { return impl_->port; }

std::string AgentHttpServer::url() const {
  const std::string host = impl_->host.find(':') == std::string::npos ? impl_->host : "[" + impl_->host + "]";
  return "http://" + host + ":" + std::to_string(impl_->port);
}

}  // namespace gradmesh::elastic
