// The agent's endpoints: liveness, readiness that follows the agent's phase,
// the status document, bearer tokens (401 without or with a wrong one), and
// the default bind address: loopback only, not this host's other addresses.
#include "gradmesh/elastic/agent_http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "gradmesh/core/error.h"

namespace gradmesh::elastic {
namespace {

httplib::Result agent_get(const AgentHttpServer& server, const std::string& path, const std::string& token = "") {
  httplib::Client client("127.0.0.1", server.port());
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  return client.Get(path.c_str(), headers);
}

TEST(AgentHttp, ReadinessFollowsThePhase) {
  auto status = std::make_shared<AgentStatus>("job1");
  AgentHttpServer server({}, status);
  EXPECT_EQ(server.url(), "http://127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(agent_get(server, "/healthz")->status, 200);
  EXPECT_EQ(agent_get(server, "/readyz")->status, 503) << "joining the job: not ready";
  status->running(0, 3, 4);
  EXPECT_EQ(agent_get(server, "/readyz")->status, 200);
  const auto doc = nlohmann::json::parse(agent_get(server, "/status")->body);
  EXPECT_EQ(doc["phase"], "running");
  EXPECT_EQ(doc["run_id"], "job1");
  EXPECT_EQ(doc["node_rank"], 3);
  EXPECT_EQ(doc["workers"], 4);
  status->restarting("rank 2 exited with status 1");
  EXPECT_EQ(agent_get(server, "/readyz")->status, 503);
  status->running(1, 3, 4);
  EXPECT_EQ(nlohmann::json::parse(agent_get(server, "/status")->body)["restarts"], 1);
  status->finished(0, "done");
  EXPECT_EQ(agent_get(server, "/readyz")->status, 503);
  EXPECT_EQ(agent_get(server, "/healthz")->status, 200) << "alive until the process exits";
  EXPECT_EQ(nlohmann::json::parse(agent_get(server, "/status")->body)["exit_code"], 0);
  const auto missing = agent_get(server, "/metrics-nope");
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(missing->body.find("/healthz"), std::string::npos);
}

TEST(AgentHttp, ATokenIsRequiredOnEveryEndpoint) {
  auto status = std::make_shared<AgentStatus>("job2");
  AgentHttpOptions options;
  options.token = "t0ken-value";
  AgentHttpServer server(options, status);
  for (const char* path : {"/healthz", "/readyz", "/status"}) {
    EXPECT_EQ(agent_get(server, path)->status, 401) << path;
    EXPECT_EQ(agent_get(server, path, "t0ken-valuX")->status, 401) << path;
    EXPECT_EQ(agent_get(server, path, "t0ken-value-longer")->status, 401) << path;
  }
  EXPECT_EQ(agent_get(server, "/healthz", "t0ken-value")->status, 200);
  EXPECT_EQ(agent_get(server, "/status", "t0ken-value")->body.find("t0ken"), std::string::npos);
}

// An IPv4 address of this host other than loopback, or "".
std::string other_address() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) found = text;
  }
  ::freeifaddrs(list);
  return found;
}

TEST(AgentHttp, ListensOnLoopbackOnlyByDefault) {
  auto status = std::make_shared<AgentStatus>("job3");
  AgentHttpServer server({}, status);
  const std::string other = other_address();
  if (other.empty()) GTEST_SKIP() << "skipped: this host has no address besides loopback";
  httplib::Client client(other, server.port());
  client.set_connection_timeout(1, 0);
  EXPECT_FALSE(client.Get("/healthz")) << "answered on " << other;
  AgentHttpOptions everywhere;
  everywhere.host = "0.0.0.0";
  AgentHttpServer open(everywhere, status);
  httplib::Client reach(other, open.port());
  const auto r = reach.Get("/healthz");
  ASSERT_TRUE(r) << "bound to 0.0.0.0 it answers on " << other;
  EXPECT_EQ(r->status, 200);
}

TEST(AgentHttp, APortInUseIsNamed) {
  auto status = std::make_shared<AgentStatus>("job4");
  AgentHttpServer first({}, status);
  AgentHttpOptions same;
  same.port = first.port();
  try {
    AgentHttpServer second(same, status);
    FAIL() << "a second server bound the same port";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(first.port())), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradmesh::elastic
