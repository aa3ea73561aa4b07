// EtcdStore against real etcd clusters: endpoints, failover through a killed
// and restarted member, a cluster that is down, lost replies, leases,
// authentication, TLS and replies that are not etcd's.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/etcd_cluster.h"
#include "gradmesh/comm/endpoint.h"
#include "gradmesh/comm/etcd_store.h"
#include "gradmesh/comm/store.h"
#include "gradmesh/core/error.h"
#include "support/error_from.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace gradmesh::comm {
namespace {

using gradmesh::testing::EtcdCluster;
using gradmesh::testing::ScopedEnv;
using gradmesh::testing::TempDir;

constexpr Millis kEtcdRequest{3000};        // connection and request timeout of the stores under test
constexpr Millis kEtcdRetryWindow{15'000};  // rides out an election after a killed leader


bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

EtcdOptions etcd_test_options(std::vector<HostPort> members, Millis retry_window = Millis{0}) {
  EtcdOptions options;
  options.members = std::move(members);
  options.connect_timeout = kEtcdRequest;
  options.retry_window = retry_window;
  return options;
}

// ---- endpoints (no server) ----

TEST(EtcdEndpoint, ParsesMembersDefaultPortsAndTls) {
  StoreEndpoint e = parse_store_endpoint("etcd://h1:2380,h2,[::1]:2381/");
  EXPECT_EQ(e.scheme, StoreEndpoint::Scheme::kEtcd);
  ASSERT_EQ(e.members.size(), 3u);
  EXPECT_EQ(e.members[0].host, "h1");
  EXPECT_EQ(e.members[0].port, 2380);
  EXPECT_EQ(e.members[1].port, kDefaultEtcdPort);
  EXPECT_EQ(e.members[2].host, "::1");
  EXPECT_FALSE(e.tls);
  EXPECT_EQ(e.describe(), "etcd://h1:2380,h2:2379,[::1]:2381");

  e = parse_store_endpoint("ETCDS://trainer:pa%40ss@etcd-0.internal");
  EXPECT_TRUE(e.tls);
  EXPECT_EQ(e.user, "trainer");
  EXPECT_EQ(e.password, "pa@ss");
  EXPECT_EQ(e.describe(), "etcds://etcd-0.internal:2379");
  EXPECT_STREQ(password_variable(e.scheme), "GRADMESH_ETCD_PASSWORD");
}

TEST(EtcdEndpoint, RedactionAndWorkerEndpointsHideThePassword) {
  const std::string endpoint = "etcd://trainer:hunter2-etcd@h1:2379,h2:2379";
  EXPECT_EQ(redact_endpoint(endpoint), "etcd://trainer:***@h1:2379,h2:2379");
  EXPECT_EQ(endpoint_without_password(endpoint), "etcd://trainer:@h1:2379,h2:2379");
  const StoreEndpoint worker = parse_store_endpoint(endpoint_without_password(endpoint));
  EXPECT_EQ(worker.user, "trainer");
  EXPECT_EQ(worker.password, "");
  EXPECT_FALSE(contains(parse_store_endpoint(endpoint).describe(), "hunter2"));
}

TEST(EtcdEndpoint, RejectsMalformedEndpointsSayingWhatWasExpected) {
  std::string seventeen = "etcd://";
  for (int i = 0; i < 17; ++i) seventeen += (i ? ",h" : "h") + std::to_string(i);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"etcd://", "missing host"},
      {"etcd:///", "missing host"},
      {"etcd://u:pw@", "missing host"},
      {"etcd://h1,,h2", "an empty member"},
      {"etcd://h1:2379,", "an empty member"},
      {"etcd://h1:99999", "port '99999'"},
      {"etcd://h1:2379,h2:x", "port 'x'"},
      {"etcd://h1:2379/runs/7", "a path is not supported"},
      {"etcd://h1:2379?timeout=3", "query parameters"},
      {"etcd://::1:2379", "etcd://[::1]:2379"},
      {"etcd://secret@h1", "needs a ':' before the password"},
      {seventeen, "17 members; at most 16"},
  };
  for (const auto& [endpoint, explanation] : cases) {
    Error e = gradmesh::testing::error_from([&] { parse_store_endpoint(endpoint); });
    const std::string message = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << message;
    EXPECT_TRUE(contains(message, "etcd://[user:password@]host:port[,host:port...]")) << message;
    EXPECT_TRUE(contains(message, explanation)) << endpoint << " -> " << message;
  }
  Error e = gradmesh::testing::error_from([&] { parse_store_endpoint("etcd://trainer:hunter2-etcd@h1:abc"); });
  EXPECT_FALSE(contains(e.what(), "hunter2")) << e.what();
}

// ---- a cluster that is down ----

TEST(EtcdStoreWithoutCluster, NoMemberAnsweringIsACommErrorNamingEveryMember) {
  std::vector<HostPort> members;
  for (int i = 0; i < 3; ++i) members.push_back({"127.0.0.1", EtcdCluster::unused_loopback_port()});
  const std::string cluster = describe_etcd(members, false);
  Error e = gradmesh::testing::error_from([&] { EtcdStore store(etcd_test_options(members)); });
  std::string message = e.what();
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << message;
  EXPECT_TRUE(contains(message, "cannot reach any etcd member of " + cluster + ": ")) << message;
  for (const HostPort& m : members)
    EXPECT_TRUE(contains(message, describe_etcd({m}, false) + ": cannot connect")) << message;

  // Within a retry window, the message says how long it tried.
  e = gradmesh::testing::error_from([&] { EtcdStore store(etcd_test_options(members, Millis{300})); });
  message = e.what();
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << message;
  EXPECT_TRUE(contains(message, "(the store timeout is 0.3 s)")) << message;
}

TEST(EtcdStoreWithoutCluster, OpenStoreChecksCredentialsAndTlsSettings) {
  const std::string port = std::to_string(EtcdCluster::unused_loopback_port());
  {
    ScopedEnv ca("GRADMESH_ETCD_CACERT", "/etc/ssl/certs/ca-certificates.crt");
    Error e = gradmesh::testing::error_from([&] { open_store("etcd://127.0.0.1:" + port, kEtcdRequest, Millis{0}); });
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
    EXPECT_TRUE(contains(e.what(), "write etcds:// to use TLS")) << e.what();
  }
  Error e = gradmesh::testing::error_from([&] { open_store("etcd://:lonely-pw@127.0.0.1:" + port, kEtcdRequest, Millis{0}); });
  EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
  EXPECT_TRUE(contains(e.what(), "a password without a user")) << e.what();
  EXPECT_FALSE(contains(e.what(), "lonely-pw")) << e.what();
}

// ---- the shared 3-member cluster ----

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gradmesh::testing::etcd_installed()) GTEST_SKIP() << gradmesh::testing::etcd_missing_message();
    cluster_ = &gradmesh::testing::shared_etcd_cluster();
    cluster_->ensure_running();
    cluster_->delete_all_keys();
  }
  void TearDown() override {
    if (cluster_ != nullptr) cluster_->ensure_running();
  }
  // The member that is leader now (-1 when none says so).
  int leader() const {
    for (int i = 0; i < cluster_->size(); ++i) {
      if (!cluster_->running(i)) continue;
      const std::string status = cluster_->post_to(i, "/v3/maintenance/status", "{}");
      const size_t id_at = status.find("\"member_id\":\"");
      const size_t leader_at = status.find("\"leader\":\"");
      if (id_at == std::string::npos || leader_at == std::string::npos) continue;
      const std::string id = status.substr(id_at + 13, status.find('"', id_at + 13) - id_at - 13);
      const std::string lead = status.substr(leader_at + 10, status.find('"', leader_at + 10) - leader_at - 10);
      if (id == lead) return i;
    }
    return -1;
  }
  EtcdCluster* cluster_ = nullptr;
};

TEST_F(EtcdStoreTest, OpenStoreReachesTheClusterAndDescribesItsMembers) {
  std::shared_ptr<Store> store = open_store(cluster_->endpoint(), kEtcdRequest, Millis{0});
  EXPECT_EQ(store->describe(), cluster_->endpoint());
  store->set("k", "v");
  EXPECT_EQ(store->get("k", kEtcdRequest), "v");
  EXPECT_EQ(open_store(cluster_->endpoint(), kEtcdRequest, Millis{0})->get("k", kEtcdRequest), "v");
  // The key is "gradmesh/kv/k" in etcd (base64 Z3JhZG1lc2gva3Yvaw==).
  EXPECT_TRUE(contains(cluster_->post("/v3/kv/range", R"({"key":"Z3JhZG1lc2gva3Yvaw=="})"), "\"count\":\"1\""));
}

// Kills the leader, which the store tries first: every call goes on through
// the others while they elect a new one, and the restarted member catches up.
TEST_F(EtcdStoreTest, KeepsWorkingThroughAKilledAndRestartedLeader) {
  const int victim = leader();
  ASSERT_GE(victim, 0) << "no member reports a leader";
  std::vector<HostPort> members = cluster_->members();
  std::swap(members[0], members[victim]);
  EtcdStore store(etcd_test_options(members, kEtcdRetryWindow));
  EXPECT_EQ(store.add("count", 1), 1);
  EXPECT_EQ(store.compare_set("leader", "", "rank-0"), "rank-0");

  cluster_->kill(victim);
  store.set("written-while-down", "yes");
  EXPECT_EQ(store.get("written-while-down", kEtcdRequest), "yes");
  EXPECT_EQ(store.add("count", 2), 3);
  EXPECT_EQ(store.compare_set("leader", "rank-0", "rank-1"), "rank-1");
  EXPECT_EQ(store.compare_set("leader", "rank-0", "rank-2"), "rank-1");
  EXPECT_TRUE(store.check({"written-while-down", "count", "leader"}));
  EXPECT_TRUE(store.remove("written-while-down"));
  store.set("written-while-down", "again");

  cluster_->restart(victim);
  EtcdStore alone(etcd_test_options({cluster_->members()[victim]}, kEtcdRetryWindow));
  EXPECT_EQ(alone.get("written-while-down", kEtcdRequest), "again");
  EXPECT_EQ(alone.get("count", kEtcdRequest), "3");
  EXPECT_EQ(store.add("count", 1), 4);
}

// A call whose reply is lost after etcd applied it is sent again to another
// member: add must count once and compare_set must report its own swap. The
// proxy in front of member 0 forwards a txn with a compare, then answers 503
// as a member that lost its leader would.
class LossyEtcdProxy {
 public:
  explicit LossyEtcdProxy(int member_port) : member_port_(member_port) {
    server_.Post(".*", [this](const httplib::Request& req, httplib::Response& res) { forward(req, res); });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~LossyEtcdProxy() {
    server_.stop();
    thread_.join();
  }
  LossyEtcdProxy(const LossyEtcdProxy&) = delete;
  LossyEtcdProxy& operator=(const LossyEtcdProxy&) = delete;

  int port() const { return port_; }
  void lose_next_txn_reply() { to_lose_ = 1; }
  int lost() const { return lost_; }

 private:
  void forward(const httplib::Request& req, httplib::Response& res) {
    httplib::Client member("127.0.0.1", member_port_);
    httplib::Result r = member.Post(req.path, req.body, "application/json");
    if (!r) {
      res.status = 502;
      return;
    }
    if (req.path == "/v3/kv/txn" && contains(req.body, "\"compare\"") && to_lose_.exchange(0) == 1) {
      ++lost_;
      res.status = 503;
      res.set_content(R"({"error":"etcdserver: request timed out","message":"etcdserver: request timed out","code":14})",
                      "application/json");
      return;
    }
    res.status = r->status;
    res.set_content(r->body, "application/json");
  }

  int member_port_;
  int port_ = -1;
  std::atomic<int> to_lose_{0};
  std::atomic<int> lost_{0};
  httplib::Server server_;
  std::thread thread_;
};

// Polling a counter (add 0) reads it: no write, so many pollers do not race
// each other's compare-and-swap. An absent counter is created at 0, as
// Redis' INCRBY creates it.
TEST_F(EtcdStoreTest, AddingZeroReadsTheCounterWithoutWriting) {
  EtcdStore store(etcd_test_options(cluster_->members()));
  EXPECT_EQ(store.add("polled", 5), 5);
  const auto revision = [&] {
    return nlohmann::json::parse(cluster_->post("/v3/kv/range", R"({"key":"AA=="})"))["header"]["revision"]
        .get<std::string>();
  };
  const std::string before = revision();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(store.add("polled", 0), 5);
  EXPECT_EQ(revision(), before) << "adding 0 wrote to the store";
  EXPECT_EQ(store.add("fresh", 0), 0);
  EXPECT_TRUE(store.check({"fresh"}));
}

TEST_F(EtcdStoreTest, ACallWhoseReplyWasLostTakesEffectOnce) {
  LossyEtcdProxy proxy(cluster_->client_port(0));
  const std::vector<HostPort> via_proxy = {{"127.0.0.1", proxy.port()}, cluster_->members()[1]};
  {
    EtcdStore store(etcd_test_options(via_proxy));
    EXPECT_EQ(store.add("count", 5), 5);
    proxy.lose_next_txn_reply();
    EXPECT_EQ(store.add("count", 5), 10);
    EXPECT_EQ(proxy.lost(), 1) << "the proxy lost no reply: the test did not exercise a resend";
    EXPECT_EQ(store.get("count", kEtcdRequest), "10");
  }
  EtcdStore store(etcd_test_options(via_proxy));  // a new store tries the proxy first again
  proxy.lose_next_txn_reply();
  EXPECT_EQ(store.compare_set("leader", "", "rank-3"), "rank-3");
  EXPECT_EQ(proxy.lost(), 2);
  EXPECT_EQ(store.compare_set("leader", "", "rank-4"), "rank-3");
}

TEST_F(EtcdStoreTest, AKeyOnALeaseThatIsNotKeptAliveDisappears) {
  EtcdStore store(etcd_test_options(cluster_->members()));
  const int64_t lease = store.grant_lease(Millis{1000});
  store.set_with_lease("heartbeat/0", "alive", lease);
  store.set("plain", "stays");
  EXPECT_TRUE(store.check({"heartbeat/0"}));
  EXPECT_TRUE(poll_until(Millis{20'000}, [&] { return !store.check({"heartbeat/0"}); }))
      << "the key outlived its lease";
  EXPECT_TRUE(store.check({"plain"}));
  Error e = gradmesh::testing::error_from([&] { store.keep_alive(lease); });
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
  EXPECT_TRUE(contains(e.what(), "lease " + std::to_string(lease) + " has expired")) << e.what();
}

TEST_F(EtcdStoreTest, KeepAliveHoldsALeasedKeyAndRevokeDeletesIt) {
  EtcdStore store(etcd_test_options(cluster_->members()));
  const int64_t lease = store.grant_lease(Millis{1000});
  store.set_with_lease("heartbeat/1", "alive", lease);
  // 2.5 times the ttl, kept alive every 100 ms.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
  while (std::chrono::steady_clock::now() < until) {
    store.keep_alive(lease);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(store.check({"heartbeat/1"})) << "a key whose lease was kept alive disappeared";
  store.revoke_lease(lease);
  EXPECT_FALSE(store.check({"heartbeat/1"}));
  store.revoke_lease(lease);  // already ended: not an error
  Error e = gradmesh::testing::error_from([&] { store.set_with_lease("heartbeat/1", "late", lease); });
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
  EXPECT_TRUE(contains(e.what(), "lease not found")) << e.what();
  EXPECT_FALSE(store.check({"heartbeat/1"}));
}

// ---- replies that are not etcd's ----

// A loopback HTTP server answering every POST with one canned reply, but the
// store's first request (a count-only range) with a valid empty one when the
// canned reply is meant for later calls (it starts with '{').
class CannedHttpServer {
 public:
  CannedHttpServer(int status, std::string body) : status_(status), body_(std::move(body)) {
    server_.Post(".*", [this](const httplib::Request& req, httplib::Response& res) {
      const bool probe = contains(req.body, "count_only") && body_.front() == '{';
      res.status = probe ? 200 : status_;
      res.set_content(probe ? "{}" : body_, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~CannedHttpServer() {
    server_.stop();
    thread_.join();
  }
  CannedHttpServer(const CannedHttpServer&) = delete;
  CannedHttpServer& operator=(const CannedHttpServer&) = delete;
  int port() const { return port_; }

 private:
  int status_;
  std::string body_;
  int port_ = -1;
  httplib::Server server_;
  std::thread thread_;
};

TEST(EtcdStoreWithoutCluster, AReplyThatIsNotJsonNamesTheMemberAndTheCall) {
  CannedHttpServer garbage(200, "<html>surprise</html>");
  const std::string member = "etcd://127.0.0.1:" + std::to_string(garbage.port());
  Error e = gradmesh::testing::error_from([&] { EtcdStore store(etcd_test_options({{"127.0.0.1", garbage.port()}})); });
  const std::string message = e.what();
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << message;
  EXPECT_TRUE(contains(message, member + ": the first request: the reply is not a JSON object (HTTP 200")) << message;
  EXPECT_TRUE(contains(message, "is this address an etcd client URL")) << message;
}

TEST(EtcdStoreWithoutCluster, AReplyLackingItsFieldsIsACommErrorNotACrash) {
  for (const char* body : {R"({"kvs":"not-an-array"})", R"({"kvs":[{"value":"not base64!"}]})", R"({"kvs":[7]})"}) {
    CannedHttpServer odd(200, body);
    EtcdStore store(etcd_test_options({{"127.0.0.1", odd.port()}}));
    Error e = gradmesh::testing::error_from([&] { store.get("rank/0", kEtcdRequest); });
    EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
    EXPECT_TRUE(contains(e.what(), "unexpected reply to range 'rank/0'")) << e.what();
    EXPECT_EQ(gradmesh::testing::error_from([&] { store.add("n", 1); }).kind(), ErrorKind::kComm);
    EXPECT_EQ(gradmesh::testing::error_from([&] { store.grant_lease(Millis{1000}); }).kind(), ErrorKind::kComm);
  }
}

// ---- authentication (a private 1-member cluster) ----

constexpr const char* kEtcdTrainerPassword = "trainer-pw-8e2";

// A cluster with authentication on: root (etcd requires it to enable
// authentication) and "trainer", whose role may only read and write keys
// under "gradmesh/" (base64 Z3JhZG1lc2gv; the range ends before "gradmesh0").
// Tokens unused for a second expire (etcd's default is 5 minutes).
EtcdCluster& etcd_auth_cluster() {
  static std::unique_ptr<EtcdCluster> cluster;
  if (!cluster) {
    cluster = std::make_unique<EtcdCluster>(1, gradmesh::testing::EtcdTlsFiles{},
                                            std::vector<std::string>{"--auth-token-ttl", "1"});
    cluster->post("/v3/auth/role/add", R"({"name":"root"})");
    cluster->post("/v3/auth/user/add", R"({"name":"root","password":"root-pw-5c1"})");
    cluster->post("/v3/auth/user/grant", R"({"user":"root","role":"root"})");
    cluster->post("/v3/auth/role/add", R"({"name":"gradmesh"})");
    cluster->post("/v3/auth/role/grant",
                  R"({"name":"gradmesh","perm":{"permType":"READWRITE","key":"Z3JhZG1lc2gv","range_end":"Z3JhZG1lc2gw"}})");
    cluster->post("/v3/auth/user/add", std::string(R"({"name":"trainer","password":")") + kEtcdTrainerPassword + "\"}");
    cluster->post("/v3/auth/user/grant", R"({"user":"trainer","role":"gradmesh"})");
    cluster->post("/v3/auth/enable", "{}");
  }
  return *cluster;
}

class EtcdAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gradmesh::testing::etcd_installed()) GTEST_SKIP() << gradmesh::testing::etcd_missing_message();
    cluster_ = &etcd_auth_cluster();
    cluster_->ensure_running();
  }
  EtcdOptions trainer_options(const std::string& password, Millis retry_window = Millis{0}) const {
    EtcdOptions options = etcd_test_options(cluster_->members(), retry_window);
    options.user = "trainer";
    options.password = password;
    return options;
  }
  EtcdCluster* cluster_ = nullptr;
};

TEST_F(EtcdAuthTest, AUserGetsInWithThePasswordFromTheEndpointTheEnvironmentOrAFile) {
  std::shared_ptr<Store> store =
      open_store(cluster_->endpoint(std::string("trainer:") + kEtcdTrainerPassword), kEtcdRequest, Millis{0});
  store->set("k", "v");  // the role allows "gradmesh/" only: the store needs no more
  EXPECT_EQ(store->get("k", kEtcdRequest), "v");
  EXPECT_EQ(store->add("n", 1), 1);
  EXPECT_EQ(store->describe(), "etcd://" + cluster_->hosts());
  {
    ScopedEnv password("GRADMESH_ETCD_PASSWORD", kEtcdTrainerPassword);
    EXPECT_EQ(open_store(cluster_->endpoint("trainer:"), kEtcdRequest, Millis{0})->get("k", kEtcdRequest), "v");
  }
  TempDir dir;
  dir.write("etcd-password", std::string(kEtcdTrainerPassword) + "\n");
  ScopedEnv user("GRADMESH_ETCD_USER", "trainer");
  ScopedEnv file("GRADMESH_ETCD_PASSWORD_FILE", dir.file("etcd-password").c_str());
  EXPECT_EQ(open_store(cluster_->endpoint(), kEtcdRequest, Millis{0})->get("k", kEtcdRequest), "v");
}

TEST_F(EtcdAuthTest, AWrongPasswordIsRefusedWithoutEchoingIt) {
  Error e = gradmesh::testing::error_from([&] { EtcdStore store(trainer_options("not-the-pw-4b1")); });
  const std::string message = e.what();
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << message;
  EXPECT_TRUE(contains(message, describe_etcd({cluster_->members()[0]}, false) +
                                    ": the first request: authentication failed as user 'trainer': etcdserver: "
                                    "authentication failed"))
      << message;
  EXPECT_TRUE(contains(message, "GRADMESH_ETCD_PASSWORD_FILE")) << message;
  EXPECT_FALSE(contains(message, "not-the-pw-4b1")) << message;
}

TEST_F(EtcdAuthTest, NoUserAgainstAProtectedClusterSaysWhatToSet) {
  Error e = gradmesh::testing::error_from([&] { EtcdStore store(etcd_test_options(cluster_->members())); });
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
  EXPECT_TRUE(contains(e.what(), "the cluster requires authentication")) << e.what();
  EXPECT_TRUE(contains(e.what(), "GRADMESH_ETCD_USER")) << e.what();
}

// A token etcd has forgotten (unused for --auth-token-ttl) is rejected as
// "invalid auth token"; the store signs in again and the call goes through.
TEST_F(EtcdAuthTest, AnExpiredTokenIsRenewed) {
  EtcdStore store(trainer_options(kEtcdTrainerPassword));
  store.set("before", "1");
  // A token signed in after the store's last call, and unused since: when
  // etcd has forgotten it, it has forgotten the store's too.
  const std::string signed_in = cluster_->post(
      "/v3/auth/authenticate", std::string(R"({"name":"trainer","password":")") + kEtcdTrainerPassword + "\"}");
  const std::string token_onwards = signed_in.substr(signed_in.find("\"token\":\"") + 9);
  const std::string probe_token = token_onwards.substr(0, token_onwards.find('"'));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // the ttl (1 s) and etcd's 1 s sweep, with margin
  EXPECT_THROW(cluster_->post("/v3/kv/range", R"({"key":"Z3JhZG1lc2gva3YvYmVmb3Jl"})", probe_token), std::exception)
      << "etcd still knows a token unused for longer than --auth-token-ttl: the test cannot tell renewal";
  store.set("after", "2");
  EXPECT_EQ(store.get("before", kEtcdRequest), "1");
  EXPECT_EQ(store.get("after", kEtcdRequest), "2");
}

// ---- TLS (a private 1-member cluster that requires client certificates) ----

constexpr const char* kOpensslBinary = "/usr/bin/openssl";

// A CA, a server certificate for 127.0.0.1 and a client certificate, made
// with the openssl command in `dir`; false when it failed.
bool make_etcd_test_pki(const TempDir& dir) {
  dir.write("pki.sh", R"sh(set -e
cd "$(dirname "$0")"
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 $ec -keyout ca.key -out ca.pem -days 2 -subj /CN=gradmesh-test-ca
# etcd's gateway presents the server certificate to its own gRPC port as a client.
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > server.ext
printf 'extendedKeyUsage=clientAuth\n' > client.ext
for who in server client; do
  openssl req $ec -keyout $who.key -out $who.csr -subj /CN=$who
  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out $who.pem -extfile $who.ext
done
)sh");
  return std::system(("sh '" + dir.file("pki.sh") + "' >'" + dir.file("pki.log") + "' 2>&1").c_str()) == 0;
}

class EtcdTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gradmesh::testing::etcd_installed()) GTEST_SKIP() << gradmesh::testing::etcd_missing_message();
    if (::access(kOpensslBinary, X_OK) != 0)
      GTEST_SKIP() << "skipped: " << kOpensslBinary << " not found; install the openssl package to run the etcd TLS tests";
    if (!cluster_) {
      pki_ = std::make_unique<TempDir>();
      ASSERT_TRUE(make_etcd_test_pki(*pki_)) << gradmesh::testing::read_file(pki_->file("pki.log"));
      cluster_ = std::make_unique<EtcdCluster>(
          1, gradmesh::testing::EtcdTlsFiles{pki_->file("server.pem"), pki_->file("server.key"), pki_->file("ca.pem"),
                                             pki_->file("ca.pem"), pki_->file("client.pem"), pki_->file("client.key")});
    }
  }
  static void TearDownTestSuite() {
    cluster_.reset();
    pki_.reset();
  }
  static std::unique_ptr<TempDir> pki_;
  static std::unique_ptr<EtcdCluster> cluster_;
};

std::unique_ptr<TempDir> EtcdTlsTest::pki_;
std::unique_ptr<EtcdCluster> EtcdTlsTest::cluster_;

TEST_F(EtcdTlsTest, ACaAndAClientCertificateFromTheEnvironmentGetIn) {
  ScopedEnv ca("GRADMESH_ETCD_CACERT", pki_->file("ca.pem").c_str());
  ScopedEnv cert("GRADMESH_ETCD_CERT", pki_->file("client.pem").c_str());
  ScopedEnv key("GRADMESH_ETCD_KEY", pki_->file("client.key").c_str());
  std::shared_ptr<Store> store = open_store(cluster_->endpoint(), kEtcdRequest, Millis{0});
  EXPECT_EQ(store->describe(), "etcds://" + cluster_->hosts());
  store->set("secure", "yes");
  EXPECT_EQ(store->get("secure", kEtcdRequest), "yes");
  EXPECT_EQ(store->add("n", 2), 2);
}

TEST_F(EtcdTlsTest, WithoutTheClientCertificateOrTheCaTheMemberIsNotReached) {
  EtcdOptions no_cert = etcd_test_options(cluster_->members());
  no_cert.tls = true;
  no_cert.ca_file = pki_->file("ca.pem");
  EXPECT_EQ(gradmesh::testing::error_from([&] { EtcdStore store(no_cert); }).kind(), ErrorKind::kComm);

  EtcdOptions wrong_ca = no_cert;
  wrong_ca.ca_file = pki_->file("client.pem");  // not the CA that signed the member's certificate
  wrong_ca.cert_file = pki_->file("client.pem");
  wrong_ca.key_file = pki_->file("client.key");
  Error e = gradmesh::testing::error_from([&] { EtcdStore store(wrong_ca); });
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
  EXPECT_TRUE(contains(e.what(), "etcds://" + cluster_->hosts())) << e.what();
}

TEST_F(EtcdTlsTest, PlainHttpToATlsMemberSaysToUseEtcds) {
  Error e = gradmesh::testing::error_from([&] { EtcdStore store(etcd_test_options(cluster_->members())); });
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
  EXPECT_TRUE(contains(e.what(), "a member that serves TLS closes plain connections: etcds://")) << e.what();
}

}  // namespace
}  // namespace gradmesh::comm
