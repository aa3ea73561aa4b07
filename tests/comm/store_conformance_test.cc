// One behavioural suite for every Store: FileStore, RedisStore (against a
// real redis-server), EtcdStore (against a real 3-member etcd cluster) and
// PrefixStore over a FileStore.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/etcd_cluster.h"
#include "comm/redis_server.h"
#include "gradmesh/comm/etcd_store.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/redis_store.h"
#include "gradmesh/comm/store.h"
#include "gradmesh/core/error.h"
#include "support/error_from.h"
#include "support/temp_dir.h"

namespace gradmesh::comm {
namespace {

using gradmesh::testing::TempDir;

constexpr Millis kShort{40};   // for waits that must time out
constexpr Millis kLong{5000};  // for waits that must succeed

// Each maker opens new handles on one store; set_up() returns a skip reason.
struct FileMaker {
  std::unique_ptr<TempDir> dir;
  std::string set_up() {
    dir = std::make_unique<TempDir>();
    return "";
  }
  std::shared_ptr<Store> open() { return std::make_shared<FileStore>(dir->path()); }
};

struct RedisMaker {
  int port = -1;
  std::string password;
  std::string set_up() {
    if (!gradmesh::testing::redis_server_installed()) return gradmesh::testing::redis_missing_message();
    auto& server = gradmesh::testing::shared_redis_server();
    server.command({"FLUSHALL"});
    port = server.port();
    password = server.password();
    return "";
  }
  std::shared_ptr<Store> open() { return std::make_shared<RedisStore>("127.0.0.1", port, password, 0, kLong); }
};

struct EtcdMaker {
  std::vector<HostPort> members;
  std::string set_up() {
    if (!gradmesh::testing::etcd_installed()) return gradmesh::testing::etcd_missing_message();
    auto& cluster = gradmesh::testing::shared_etcd_cluster();
    cluster.ensure_running();
    cluster.delete_all_keys();
    members = cluster.members();
    return "";
  }
  std::shared_ptr<Store> open() {
    EtcdOptions options;
    options.members = members;
    options.connect_timeout = kLong;
    return std::make_shared<EtcdStore>(options);
  }
};

struct PrefixedFileMaker {
  FileMaker files;
  std::string set_up() { return files.set_up(); }
  std::shared_ptr<Store> open() { return std::make_shared<PrefixStore>(files.open(), "run-7/2"); }
};

template <typename Maker>
class StoreConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string skip = maker_.set_up();
    if (!skip.empty()) GTEST_SKIP() << skip;
    store_ = maker_.open();
  }
  Maker maker_;
  std::shared_ptr<Store> store_;
};

using Makers = ::testing::Types<FileMaker, RedisMaker, EtcdMaker, PrefixedFileMaker>;
TYPED_TEST_SUITE(StoreConformance, Makers);


TYPED_TEST(StoreConformance, SetThenGetReturnsLatestValue) {
  this->store_->set("config/lr", "0.1");
  EXPECT_EQ(this->store_->get("config/lr", kLong), "0.1");
  this->store_->set("config/lr", "0.05");
  EXPECT_EQ(this->store_->get("config/lr", kLong), "0.05");
  this->store_->set("config/lr", "");
  EXPECT_EQ(this->store_->get("config/lr", kLong), "");
}

TYPED_TEST(StoreConformance, GetWaitsForAKeySetLaterByAnotherClient) {
  std::shared_ptr<Store> other = this->maker_.open();
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    other->set("rank/1/addr", "127.0.0.1:29500");
  });
  std::string value = this->store_->get("rank/1/addr", kLong);
  writer.join();
  EXPECT_EQ(value, "127.0.0.1:29500");
}

TYPED_TEST(StoreConformance, GetTimeoutNamesTheMissingKey) {
  Error e = gradmesh::testing::error_from([&] { this->store_->get("rank/3", kShort); });
  EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("timed out after 40 ms waiting for key: "), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("rank/3"), std::string::npos) << e.what();
}

TYPED_TEST(StoreConformance, WaitTimeoutNamesOnlyTheMissingKeys) {
  this->store_->set("present/one", "1");
  Error e = gradmesh::testing::error_from([&] { this->store_->wait({"present/one", "absent/two", "absent/three"}, kShort); });
  std::string message = e.what();
  EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << message;
  EXPECT_NE(message.find("keys: "), std::string::npos) << message;
  EXPECT_NE(message.find("absent/two"), std::string::npos) << message;
  EXPECT_NE(message.find("absent/three"), std::string::npos) << message;
  EXPECT_EQ(message.find("present/one"), std::string::npos) << message;
}

TYPED_TEST(StoreConformance, WaitReturnsOnceEveryKeyExists) {
  std::shared_ptr<Store> other = this->maker_.open();
  std::thread writer([&] {
    for (int r = 0; r < 4; ++r) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      other->set("joined/" + std::to_string(r), "yes");
    }
  });
  this->store_->wait({"joined/0", "joined/1", "joined/2", "joined/3"}, kLong);
  writer.join();
  EXPECT_TRUE(this->store_->check({"joined/0", "joined/1", "joined/2", "joined/3"}));
}

TYPED_TEST(StoreConformance, ZeroTimeoutLooksOnce) {
  this->store_->set("here", "x");
  EXPECT_EQ(this->store_->get("here", Millis{0}), "x");
  this->store_->wait({"here"}, Millis{0});
  EXPECT_EQ(gradmesh::testing::error_from([&] { this->store_->get("not-here", Millis{0}); }).kind(), ErrorKind::kTimeout);
}

TYPED_TEST(StoreConformance, AddStartsAtZeroAndTakesNegativeDeltas) {
  EXPECT_EQ(this->store_->add("count", 5), 5);
  EXPECT_EQ(this->store_->add("count", -7), -2);
  EXPECT_EQ(this->store_->get("count", kLong), "-2");
  this->store_->set("preset", "40");
  EXPECT_EQ(this->store_->add("preset", 2), 42);
}

TYPED_TEST(StoreConformance, AddFromManyThreadsIsAtomic) {
  constexpr int kThreads = 8;
  constexpr int kAdds = 100;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(this->store_->add("arrivals", 1));
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(this->store_->get("arrivals", kLong), std::to_string(kThreads * kAdds));
  // Atomic increments hand out every intermediate value exactly once.
  std::set<int64_t> all;
  for (const auto& values : seen) all.insert(values.begin(), values.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kAdds));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
}

TYPED_TEST(StoreConformance, AddToANonIntegerIsAFormatErrorNamingTheKey) {
  this->store_->set("counter/words", "twelve");
  Error e = gradmesh::testing::error_from([&] { this->store_->add("counter/words", 1); });
  EXPECT_EQ(e.kind(), ErrorKind::kFormat) << e.what();
  EXPECT_NE(std::string(e.what()).find("counter/words"), std::string::npos) << e.what();
  EXPECT_EQ(this->store_->get("counter/words", kLong), "twelve");
  this->store_->set("counter/spaced", " 3");
  EXPECT_EQ(gradmesh::testing::error_from([&] { this->store_->add("counter/spaced", 1); }).kind(), ErrorKind::kFormat);
}

TYPED_TEST(StoreConformance, AddThatOverflowsIsAFormatErrorAndKeepsTheValue) {
  this->store_->set("counter/max", "9223372036854775807");
  Error e = gradmesh::testing::error_from([&] { this->store_->add("counter/max", 1); });
  EXPECT_EQ(e.kind(), ErrorKind::kFormat) << e.what();
  EXPECT_NE(std::string(e.what()).find("counter/max"), std::string::npos) << e.what();
  EXPECT_EQ(this->store_->get("counter/max", kLong), "9223372036854775807");
}

TYPED_TEST(StoreConformance, CompareSetFollowsItsContract) {
  // Absent key: only an empty `expected` matches.
  EXPECT_EQ(this->store_->compare_set("leader", "someone", "rank-0"), "");
  EXPECT_FALSE(this->store_->check({"leader"}));
  EXPECT_EQ(this->store_->compare_set("leader", "", "rank-0"), "rank-0");
  // Wrong expectation: the value stays and is returned.
  EXPECT_EQ(this->store_->compare_set("leader", "rank-9", "rank-1"), "rank-0");
  EXPECT_EQ(this->store_->get("leader", kLong), "rank-0");
  // Right expectation: swapped.
  EXPECT_EQ(this->store_->compare_set("leader", "rank-0", "rank-1"), "rank-1");
  EXPECT_EQ(this->store_->get("leader", kLong), "rank-1");
  // Present key: an empty `expected` does not match.
  EXPECT_EQ(this->store_->compare_set("leader", "", "rank-2"), "rank-1");
}

TYPED_TEST(StoreConformance, CompareSetElectsExactlyOneWinner) {
  constexpr int kThreads = 8;
  std::vector<std::string> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { results[t] = this->store_->compare_set("election", "", "rank-" + std::to_string(t)); });
  for (std::thread& thread : threads) thread.join();
  std::string winner = this->store_->get("election", kLong);
  int wins = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(results[t], winner) << "thread " << t;
    wins += results[t] == "rank-" + std::to_string(t);
  }
  EXPECT_EQ(wins, 1);
}

TYPED_TEST(StoreConformance, RemoveAndCheck) {
  EXPECT_TRUE(this->store_->check({}));
  EXPECT_FALSE(this->store_->check({"a"}));
  this->store_->set("a", "1");
  this->store_->set("b", "2");
  EXPECT_TRUE(this->store_->check({"a", "b"}));
  EXPECT_FALSE(this->store_->check({"a", "b", "c"}));
  EXPECT_TRUE(this->store_->remove("a"));
  EXPECT_FALSE(this->store_->remove("a"));
  EXPECT_FALSE(this->store_->check({"a"}));
  EXPECT_TRUE(this->store_->check({"b"}));
  EXPECT_EQ(gradmesh::testing::error_from([&] { this->store_->get("a", kShort); }).kind(), ErrorKind::kTimeout);
}

TYPED_TEST(StoreConformance, BinaryValuesRoundTrip) {
  std::string every_byte;
  for (int round = 0; round < 300; ++round)
    for (int b = 0; b < 256; ++b) every_byte += static_cast<char>((b * 7 + round) & 0xff);
  std::string with_nul("a\0b\0\0c", 6);
  this->store_->set("blob", every_byte);
  this->store_->set("nul", with_nul);
  EXPECT_EQ(this->store_->get("blob", kLong), every_byte);
  EXPECT_EQ(this->store_->get("nul", kLong), with_nul);
  EXPECT_EQ(this->store_->compare_set("nul", with_nul, every_byte), every_byte);
  EXPECT_EQ(this->store_->get("nul", kLong), every_byte);
}

TYPED_TEST(StoreConformance, KeysWithSeparatorsAndOddBytesStayDistinct) {
  const std::vector<std::string> keys = {"a/b", "a:b", "a%2Fb", "a_2Fb", "../a", "..", ".", "a b", "caf\xc3\xa9",
                                         std::string("nul\0key", 7), std::string(400, 'k'),
                                         std::string(399, 'k') + "j", ""};
  for (size_t i = 0; i < keys.size(); ++i) this->store_->set(keys[i], "value-" + std::to_string(i));
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(this->store_->get(keys[i], kLong), "value-" + std::to_string(i)) << "key #" << i;
  EXPECT_TRUE(this->store_->check(keys));
}

TYPED_TEST(StoreConformance, PrefixStoresIsolateNamespaces) {
  auto generation0 = std::make_shared<PrefixStore>(this->store_, "run-a/0");
  auto generation1 = std::make_shared<PrefixStore>(this->store_, "run-a/1");
  generation0->set("rank/0", "old");
  generation1->set("rank/0", "new");
  EXPECT_EQ(generation0->get("rank/0", kLong), "old");
  EXPECT_EQ(generation1->get("rank/0", kLong), "new");
  EXPECT_EQ(this->store_->get("run-a/0/rank/0", kLong), "old");
  generation0->set("only-in-0", "x");
  EXPECT_FALSE(generation1->check({"only-in-0"}));
  EXPECT_EQ(generation0->add("count", 3), 3);
  EXPECT_EQ(generation1->add("count", 1), 1);
  EXPECT_TRUE(generation1->remove("rank/0"));
  EXPECT_EQ(generation0->get("rank/0", kLong), "old");
  Error e = gradmesh::testing::error_from([&] { generation1->wait({"only-in-0"}, kShort); });
  EXPECT_NE(std::string(e.what()).find("run-a/1/only-in-0"), std::string::npos) << e.what();
  EXPECT_NE(generation1->describe().find("run-a/1/"), std::string::npos) << generation1->describe();
}

}  // namespace
}  // namespace gradmesh::comm
