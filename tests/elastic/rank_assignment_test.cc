// The launchers' rendezvous, with nodes as threads over a real FileStore.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <set>
#include <thread>

#include "gradmesh/comm/file_store.h"
#include "gradmesh/core/error.h"
#include "gradmesh/elastic/rank_assignment.h"
#include "support/temp_dir.h"

namespace gradmesh::elastic {
namespace {

using comm::Millis;

RendezvousRequest request(int nnodes, int nproc, int node_rank, const std::string& label) {
  RendezvousRequest r;
  r.nnodes = nnodes;
  r.nproc_per_node = nproc;
  r.node_rank = node_rank;
  r.master_addr = "127.0.0.1";
  r.node_label = label;
  r.run_label = "rendezvous of run 'test'";
  r.join_timeout = Millis{5000};
  return r;
}

TEST(Rendezvous, AssignsDistinctNodesAndContiguousRanks) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  const std::vector<int> nproc = {2, 1, 3};  // heterogeneous worker counts
  std::vector<std::future<RankAssignment>> nodes;
  for (size_t i = 0; i < nproc.size(); ++i)
    nodes.push_back(std::async(std::launch::async, [&, i] {
      return join_rendezvous(store, request(3, nproc[i], -1, "node-thread-" + std::to_string(i)));
    }));
  std::vector<RankAssignment> got;
  for (auto& f : nodes) got.push_back(f.get());

  std::set<int> node_ranks, global_ranks;
  for (size_t i = 0; i < got.size(); ++i) {
    const RankAssignment& a = got[i];
    node_ranks.insert(a.node_rank);
    EXPECT_EQ(a.world_size, 6);
    EXPECT_EQ(a.nnodes, 3);
    EXPECT_EQ(a.local_world_size, nproc[i]);
    EXPECT_EQ(a.master_addr, got[0].master_addr);
    EXPECT_EQ(a.master_port, got[0].master_port);
    EXPECT_GT(a.master_port, 0);
    for (int l = 0; l < a.local_world_size; ++l) EXPECT_TRUE(global_ranks.insert(a.global_rank(l)).second);
  }
  EXPECT_EQ(node_ranks, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(global_ranks, (std::set<int>{0, 1, 2, 3, 4, 5}));
  // Ranks follow node order: node 0's workers come first.
  for (const RankAssignment& a : got) {
    int expected_base = 0;
    for (const RankAssignment& b : got)
      if (b.node_rank < a.node_rank) expected_base += b.local_world_size;
    EXPECT_EQ(a.rank_base, expected_base) << "node " << a.node_rank;
  }
}

TEST(Rendezvous, ExplicitNodeRanksAndPortAreKept) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  RendezvousRequest r0 = request(2, 1, 0, "a"), r1 = request(2, 1, 1, "b");
  r0.master_port = 29555;
  r1.master_port = 1;  // only node 0's choice counts
  auto second = std::async(std::launch::async, [&] { return join_rendezvous(store, r1); });
  const RankAssignment first = join_rendezvous(store, r0);
  const RankAssignment other = second.get();
  EXPECT_EQ(first.node_rank, 0);
  EXPECT_EQ(other.node_rank, 1);
  EXPECT_EQ(other.global_rank(0), 1);
  EXPECT_EQ(first.master_port, 29555);
  EXPECT_EQ(other.master_port, 29555);
}

// A live owner (its keep-alive moves) is a genuine duplicate: refused, naming both.
TEST(Rendezvous, TakenRankIsAUsageErrorNamingTheOwner) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  store.set("node/1/owner", "hostA pid 1");
  std::atomic<bool> alive{true};
  std::thread keep_alive([&] {
    while (alive) {
      store.add("alive/1", 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  try {
    join_rendezvous(store, request(2, 1, 1, "hostB pid 2"));
    ADD_FAILURE() << "a second node 1 must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("already taken by hostA pid 1, which is still running; this launcher is hostB pid 2"),
              std::string::npos)
        << e.what();
  }
  alive = false;
  keep_alive.join();
}

// A node that comes back with its explicit rank while its dead predecessor's
// claim is still there (it died between its claim and its node count): the
// rendezvous is open, so it takes the rank over, its keep-alive being silent.
TEST(Rendezvous, AReturningNodeTakesOverItsDeadPredecessorsRank) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  store.set("node/1/owner", "hostA pid 1");
  store.set("alive/1", "4");
  auto node0 = std::async(std::launch::async, [&] { return join_rendezvous(store, request(2, 1, 0, "hostB pid 3")); });
  const RankAssignment back = join_rendezvous(store, request(2, 1, 1, "hostB pid 2"));
  EXPECT_EQ(back.node_rank, 1);
  EXPECT_EQ(node0.get().world_size, 2);
  EXPECT_EQ(store.get("node/1/owner"), "hostB pid 2");
}

// Its generation already runs without it: it waits for the next one.
TEST(Rendezvous, AReturningNodeWhoseGenerationRunsWaitsForTheNext) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  // On this host (same label host): a process that is gone is dead at once.
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  store.set("node/0/nproc", "1");
  store.set("node/1/nproc", "1");
  store.set("node/1/owner", "hostB pid " + std::to_string(gone));
  EXPECT_FALSE(try_join_rendezvous(store, request(2, 1, 1, "hostB pid 2")).has_value());
  EXPECT_TRUE(rendezvous_begun(store));
}

TEST(Rendezvous, MissingNodeTimesOutNamingIt) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  RendezvousRequest r = request(3, 2, -1, "lonely pid 9");
  r.join_timeout = Millis{300};
  try {
    join_rendezvous(store, r);
    ADD_FAILURE() << "must time out";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << what;
    EXPECT_NE(what.find("1 of 3 nodes joined"), std::string::npos) << what;
    EXPECT_NE(what.find("missing node rank(s): 1, 2"), std::string::npos) << what;
    EXPECT_NE(what.find("node 0 = lonely pid 9"), std::string::npos) << what;
  }
}

// The first launcher is alive (this process, on this host): one too many.
TEST(Rendezvous, TooManyLaunchersAreRefused) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  (void)join_rendezvous(store, request(1, 1, -1, "hostT pid " + std::to_string(::getpid())));
  try {
    join_rendezvous(store, request(1, 1, -1, "hostT pid 2"));
    ADD_FAILURE() << "a second launcher for --nnodes 1 with the same run must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("every rank's launcher is running"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fresh --rdzv-id"), std::string::npos) << e.what();
  }
}

// Without --node-rank, a node coming back is one launcher more than
// --nnodes: it takes the rank of the launcher that is gone, and as that
// rank's generation runs without it, waits for the next one.
TEST(Rendezvous, AReturningNodeWithoutARankTakesTheRankOfALauncherThatIsGone) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  (void)join_rendezvous(store, request(1, 1, -1, "hostT pid " + std::to_string(gone)));
  EXPECT_FALSE(try_join_rendezvous(store, request(1, 1, -1, "hostT pid 2")).has_value());
}

TEST(Rendezvous, InterruptAbandonsTheWait) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  RendezvousRequest r = request(2, 1, -1, "x");
  int calls = 0;
  r.check_interrupt = [&calls] {
    if (++calls == 3) throw std::runtime_error("interrupted");
  };
  EXPECT_THROW(join_rendezvous(store, r), std::runtime_error);
  EXPECT_EQ(calls, 3);
}

RendezvousRequest elastic_request(int min_nodes, int max_nodes, Millis last_call, const std::string& label) {
  RendezvousRequest r = request(max_nodes, 1, -1, label);
  r.min_nnodes = min_nodes;
  r.last_call = last_call;
  return r;
}

TEST(ElasticRendezvous, ClosesWithMinAfterTheLastCall) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  const std::optional<RankAssignment> a = try_join_rendezvous(store, elastic_request(1, 2, Millis{100}, "only"));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->nnodes, 1);
  EXPECT_EQ(a->world_size, 1);
  EXPECT_EQ(store.get("closed"), "1");
  // A node arriving now is too late for this generation, not an error.
  EXPECT_FALSE(try_join_rendezvous(store, elastic_request(1, 2, Millis{100}, "late")));
  EXPECT_THROW(join_rendezvous(store, elastic_request(1, 2, Millis{100}, "late")), Error);
}

TEST(ElasticRendezvous, ClosesAtMaxWithContiguousRanks) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  // A long last call: the rendezvous closes because MAX joined, not because time passed.
  std::vector<std::future<std::optional<RankAssignment>>> nodes;
  for (int i = 0; i < 3; ++i)
    nodes.push_back(std::async(std::launch::async, [&, i] {
      return try_join_rendezvous(store, elastic_request(2, 3, Millis{60'000}, "n" + std::to_string(i)));
    }));
  std::set<int> ranks;
  for (auto& f : nodes) {
    const std::optional<RankAssignment> a = f.get();
    ASSERT_TRUE(a);
    EXPECT_EQ(a->nnodes, 3);
    EXPECT_EQ(a->world_size, 3);
    EXPECT_EQ(a->rank_base, a->node_rank);
    ranks.insert(a->global_rank(0));
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
}

TEST(ElasticRendezvous, FewerThanMinTimesOut) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  RendezvousRequest r = elastic_request(2, 3, Millis{10}, "alone");
  r.join_timeout = Millis{300};
  try {
    try_join_rendezvous(store, r);
    ADD_FAILURE() << "must time out";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("1 node(s) joined within 0.3 s, fewer than the 2 that --nnodes 2:3 needs"),
              std::string::npos)
        << e.what();
  }
}

TEST(FreePort, IsBindable) {
  const int port = find_free_port();
  ASSERT_GT(port, 0);
  ASSERT_LT(port, 65536);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << "port " << port;
  ::close(fd);
}

}  // namespace
}  // namespace gradmesh::elastic
