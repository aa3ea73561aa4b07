// The launchers' watch over each other through a real redis-server that drops
// its connections, restarts without its data, or goes away: a store outage
// is never a node loss, watching never stops, what a node owns comes back,
// and an outage longer than the store timeout is the node's failure. Over a
// real etcd cluster, liveness is a lease the store itself lets expire.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "comm/etcd_cluster.h"
#include "comm/redis_server.h"
#include "gradmesh/comm/etcd_store.h"
#include "gradmesh/comm/redis_store.h"
#include "gradmesh/comm/store.h"
#include "gradmesh/elastic/peer_watch.h"
#include "gradmesh/elastic/rank_assignment.h"

namespace gradmesh::elastic {
namespace {

using comm::Millis;
using Clock = PeerWatch::Clock;
using gradmesh::testing::RedisServer;

constexpr Millis kLostAfter{1000};

class PeerWatchOverRedis : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gradmesh::testing::redis_server_installed()) GTEST_SKIP() << gradmesh::testing::redis_missing_message();
    server_ = std::make_unique<RedisServer>("watch-pw");
  }
  // A node's own fail-fast connection, as the supervisor has (no retry window).
  std::shared_ptr<comm::Store> node_store() const {
    auto redis = std::make_shared<comm::RedisStore>("127.0.0.1", server_->port(), "watch-pw", 0, Millis{2000});
    return std::make_shared<comm::PrefixStore>(redis, "run/0/agent");
  }
  std::unique_ptr<RedisServer> server_;
  const Clock::time_point t0_ = Clock::now();
};

TEST_F(PeerWatchOverRedis, DroppedConnectionsAreNeitherANodeLossNorTheEndOfWatching) {
  const auto store0 = node_store(), store1 = node_store();
  PeerWatch node0(*store0, 0, 2, kLostAfter), node1(*store1, 1, 2, kLostAfter);
  EXPECT_FALSE(node0.poll(t0_));
  EXPECT_FALSE(node1.poll(t0_));
  // Every client connection is closed by the server (CLIENT KILL), Redis stays up.
  server_->command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
  EXPECT_FALSE(node0.poll(t0_ + Millis{500}));
  EXPECT_TRUE(node0.in_outage());
  EXPECT_FALSE(node1.poll(t0_ + Millis{500}));
  // Both reconnect at their next poll; node 1's silence while node 0 could not
  // look (1.5 s, past the 1 s loss timeout) does not count.
  EXPECT_FALSE(node0.poll(t0_ + Millis{2000}));
  EXPECT_FALSE(node0.in_outage());
  EXPECT_FALSE(node1.poll(t0_ + Millis{2100}));
  EXPECT_FALSE(node0.poll(t0_ + Millis{2900}));
  // Watching goes on: a node that then really stops is still found.
  EXPECT_FALSE(node0.poll(t0_ + Millis{3500})) << "node 1 beat at 2.1 s, first seen changed at 2.9 s";
  const std::optional<PeerFailure> lost = node0.poll(t0_ + Millis{4000});
  ASSERT_TRUE(lost.has_value());
  EXPECT_TRUE(lost->lost);
  EXPECT_EQ(lost->node, 1);
}

TEST_F(PeerWatchOverRedis, ARestartedStoreGetsBackWhatEachNodeOwns) {
  const auto store0 = node_store(), store1 = node_store();
  RendezvousRequest request;
  request.nnodes = 2;
  request.node_rank = 1;
  request.node_label = "host pid 7";
  RankAssignment joined;
  joined.node_rank = 1;
  joined.nnodes = 2;
  joined.local_world_size = 3;
  store1->set("node/1/owner", "host pid 7");
  store1->set("node/1/nproc", "3");
  PeerWatch node0(*store0, 0, 2, kLostAfter);
  PeerWatch node1(*store1, 1, 2, kLostAfter, Millis{60'000}, [&] { republish_membership(*store1, request, joined); });
  EXPECT_FALSE(node1.poll(t0_));
  EXPECT_FALSE(node0.poll(t0_));
  server_->restart();
  EXPECT_EQ(server_->command({"EXISTS", "run/0/agent/node/1/nproc"}), "0") << "a restarted server has no old keys";
  EXPECT_FALSE(node1.poll(t0_ + Millis{500}));  // the dropped connection
  EXPECT_FALSE(node1.poll(t0_ + Millis{600}));  // reconnected: re-published
  EXPECT_EQ(server_->command({"GET", "run/0/agent/node/1/nproc"}), "3");
  EXPECT_EQ(server_->command({"GET", "run/0/agent/node/1/owner"}), "host pid 7");
  EXPECT_FALSE(node0.poll(t0_ + Millis{700}));
  EXPECT_FALSE(node0.poll(t0_ + Millis{1600})) << "node 1's keep-alive came back with the store";
}

TEST_F(PeerWatchOverRedis, AStoreGoneLongerThanTheTimeoutIsTheNodesFailureNamingIt) {
  const auto store0 = node_store();
  PeerWatch node0(*store0, 0, 2, kLostAfter, Millis{2000});
  EXPECT_FALSE(node0.poll(t0_));
  server_->stop();
  EXPECT_FALSE(node0.poll(t0_ + Millis{500}));
  EXPECT_FALSE(node0.poll(t0_ + Millis{2000})) << "1.5 s of outage is within the 2 s store timeout";
  const std::optional<PeerFailure> gone = node0.poll(t0_ + Millis{2600});
  ASSERT_TRUE(gone.has_value());
  EXPECT_TRUE(gone->store_lost);
  EXPECT_FALSE(gone->lost);
  EXPECT_NE(gone->reason.find("the store redis://127.0.0.1:" + std::to_string(server_->port()) + "/0"),
            std::string::npos)
      << gone->reason;
  EXPECT_NE(gone->reason.find("unreachable for 2.1 s (--store-timeout 2.0 s)"), std::string::npos) << gone->reason;
}

// etcd: each launcher's lease key lives while its polls renew it; when they
// stop, etcd deletes it after the timeout and the others find the node lost,
// whatever their own clocks say.
TEST(PeerWatchOverEtcd, ANodeWhoseLeaseExpiredIsLost) {
  if (!gradmesh::testing::etcd_installed()) GTEST_SKIP() << gradmesh::testing::etcd_missing_message();
  gradmesh::testing::EtcdCluster& cluster = gradmesh::testing::shared_etcd_cluster();
  cluster.ensure_running();
  cluster.delete_all_keys();
  const auto node_store = [&] {
    comm::EtcdOptions options;
    options.members = cluster.members();
    options.connect_timeout = Millis{2000};
    return std::make_shared<comm::PrefixStore>(std::make_shared<comm::EtcdStore>(options), "run/0/agent");
  };
  const auto store0 = node_store(), store1 = node_store();
  PeerWatch node0(*store0, 0, 2, kLostAfter), node1(*store1, 1, 2, kLostAfter);
  const Clock::time_point start = Clock::now();
  EXPECT_FALSE(node1.poll(start));
  EXPECT_FALSE(node0.poll(start));
  EXPECT_TRUE(store0->check({"lease/1"})) << "node 1's lease key";
  // Node 0 goes on polling, far past the timeout on its own clock: node 1 renews.
  for (int i = 1; i <= 6; ++i) {
    std::this_thread::sleep_for(Millis{300});
    EXPECT_FALSE(node1.poll(start + Millis{300 * i}));
    EXPECT_FALSE(node0.poll(start + Millis{300 * i} + Millis{60'000})) << "a renewed lease is alive";
  }
  // Node 1 stops renewing: etcd deletes its key within the lease's ttl (whole seconds).
  std::optional<PeerFailure> lost;
  for (int i = 0; i < 50 && !lost; ++i) {
    std::this_thread::sleep_for(Millis{100});
    lost = node0.poll(Clock::now());
  }
  ASSERT_TRUE(lost.has_value()) << "node 1's lease never expired";
  EXPECT_TRUE(lost->lost);
  EXPECT_EQ(lost->node, 1);
  EXPECT_NE(lost->reason.find("its lease in the store expired"), std::string::npos) << lost->reason;
}

}  // namespace
}  // namespace gradmesh::elastic
