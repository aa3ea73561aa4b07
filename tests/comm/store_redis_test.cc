// RedisStore against a real redis-server: authentication, distinct failure
// messages, databases, ACL users, lost connections and odd replies.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "comm/redis_server.h"
#include "gradmesh/comm/redis_store.h"
#include "gradmesh/comm/store.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm {
namespace {

using gradmesh::testing::RedisServer;

constexpr Millis kConnect{2000};

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gradmesh::testing::redis_server_installed()) GTEST_SKIP() << gradmesh::testing::redis_missing_message();
    server_ = &gradmesh::testing::shared_redis_server();
    server_->command({"FLUSHALL"});
  }
  // The error a connection attempt to `endpoint` throws.
  static Error open_error(const std::string& endpoint) {
    try {
      open_store(endpoint, kConnect, Millis{0});  // no retry window: the first failure is the answer
    } catch (const Error& e) {
      return e;
    }
    ADD_FAILURE() << "opened " << endpoint;
    return Error(ErrorKind::kInternal, "no error");
  }
  std::string base() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  RedisServer* server_ = nullptr;
};

// Sets an environment variable for one scope and unsets it after.
class ScopedSetEnv {
 public:
  ScopedSetEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedSetEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

TEST_F(RedisStoreTest, OpensWithThePasswordFromTheEndpoint) {
  std::shared_ptr<Store> store = open_store(server_->endpoint(), kConnect);
  store->set("k", "v");
  EXPECT_EQ(store->get("k", kConnect), "v");
  EXPECT_EQ(store->describe(), "redis://" + base() + "/0");
}

TEST_F(RedisStoreTest, WrongPasswordIsRefusedWithoutEchoingIt) {
  Error e = open_error("redis://:not-the-pw-9f3@" + base());
  std::string message = e.what();
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << message;
  EXPECT_NE(message.find("redis://" + base() + "/0"), std::string::npos) << message;
  EXPECT_NE(message.find("authentication failed: WRONGPASS"), std::string::npos) << message;
  EXPECT_NE(message.find("GRADMESH_REDIS_PASSWORD"), std::string::npos) << message;
  EXPECT_EQ(message.find("not-the-pw-9f3"), std::string::npos) << message;
}

TEST_F(RedisStoreTest, MissingPasswordAgainstAProtectedServerSaysSo) {
  Error e = open_error("redis://" + base());
  std::string message = e.what();
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << message;
  EXPECT_NE(message.find("the server requires a password (NOAUTH"), std::string::npos) << message;
  EXPECT_NE(message.find("redis://" + base() + "/0"), std::string::npos) << message;
}

TEST_F(RedisStoreTest, NothingListeningIsConnectionRefused) {
  int port = gradmesh::testing::free_loopback_port();
  Error e = open_error("redis://:some-pw-51a@127.0.0.1:" + std::to_string(port));
  std::string message = e.what();
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << message;
  EXPECT_EQ(message.rfind("cannot connect to redis://127.0.0.1:" + std::to_string(port) + "/0: Connection refused", 0), 0u)
      << message;
  EXPECT_NE(message.find("is redis-server running"), std::string::npos) << message;
  EXPECT_EQ(message.find("some-pw-51a"), std::string::npos) << message;
}

TEST_F(RedisStoreTest, TheThreeConnectFailuresAreDistinct) {
  std::string refused = open_error("redis://127.0.0.1:" + std::to_string(gradmesh::testing::free_loopback_port())).what();
  std::string wrong = open_error("redis://:wrong@" + base()).what();
  std::string missing = open_error("redis://" + base()).what();
  EXPECT_NE(refused, wrong);
  EXPECT_NE(wrong, missing);
  EXPECT_NE(refused, missing);
  EXPECT_EQ(wrong.find("requires a password"), std::string::npos) << wrong;
  EXPECT_EQ(missing.find("authentication failed"), std::string::npos) << missing;
}

TEST_F(RedisStoreTest, PasswordComesFromTheEnvironmentWhenTheEndpointHasNone) {
  {
    ScopedSetEnv env("GRADMESH_REDIS_PASSWORD", server_->password());
    open_store("redis://" + base(), kConnect)->set("from-env", "1");
  }
  {
    // The endpoint's own password wins over the environment.
    ScopedSetEnv env("GRADMESH_REDIS_PASSWORD", "stale-pw-0c2");
    open_store(server_->endpoint(), kConnect)->set("from-url", "1");
  }
  EXPECT_EQ(server_->command({"GET", "from-env"}), "1");
  EXPECT_EQ(server_->command({"GET", "from-url"}), "1");
}

TEST_F(RedisStoreTest, APasswordForAServerWithoutOneIsRefusedWithAHint) {
  RedisServer open_server("");
  Error e = open_error("redis://:unneeded-pw-3d@127.0.0.1:" + std::to_string(open_server.port()));
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
  EXPECT_NE(std::string(e.what()).find("the server has no password"), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).find("unneeded-pw-3d"), std::string::npos) << e.what();
  open_store("redis://127.0.0.1:" + std::to_string(open_server.port()), kConnect)->set("k", "v");
  EXPECT_EQ(open_server.command({"GET", "k"}), "v");
}

TEST_F(RedisStoreTest, PercentEncodedPasswordsWork) {
  RedisServer odd("p@ss:w/rd%");
  std::shared_ptr<Store> store =
      open_store("redis://:p%40ss%3Aw%2Frd%25@127.0.0.1:" + std::to_string(odd.port()) + "/0", kConnect);
  store->set("k", "v");
  EXPECT_EQ(odd.command({"GET", "k"}), "v");
}

TEST_F(RedisStoreTest, DatabasesAreSeparateAndAMissingOneIsAnError) {
  std::shared_ptr<Store> db0 = open_store(server_->endpoint(0), kConnect);
  std::shared_ptr<Store> db3 = open_store(server_->endpoint(3), kConnect);
  db0->set("k", "zero");
  db3->set("k", "three");
  EXPECT_EQ(db0->get("k", kConnect), "zero");
  EXPECT_EQ(db3->get("k", kConnect), "three");
  EXPECT_EQ(db3->describe(), "redis://" + base() + "/3");
  Error e = open_error(server_->endpoint(999));
  EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
  EXPECT_NE(std::string(e.what()).find("cannot select database 999"), std::string::npos) << e.what();
}

TEST_F(RedisStoreTest, AclUsersAuthenticateWithTheirOwnPassword) {
  server_->command({"ACL", "SETUSER", "trainer", "on", ">trainer-pw-77", "~*", "+@all"});
  std::shared_ptr<Store> store = open_store("redis://trainer:trainer-pw-77@" + base(), kConnect);
  store->set("by-acl-user", "yes");
  EXPECT_EQ(server_->command({"GET", "by-acl-user"}), "yes");
  Error e = open_error("redis://trainer:nope-83@" + base());
  EXPECT_NE(std::string(e.what()).find("authentication failed"), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).find("nope-83"), std::string::npos) << e.what();
  server_->command({"ACL", "DELUSER", "trainer"});
}

TEST_F(RedisStoreTest, ALostConnectionIsACommErrorAndTheNextCallReconnects) {
  auto private_server = std::make_unique<RedisServer>("lost-pw");
  RedisStore store("127.0.0.1", private_server->port(), "lost-pw", 0, kConnect);
  store.set("k", "v");
  private_server->stop();
  for (int call = 0; call < 2; ++call) {
    // First call: the dropped connection; second: the reconnect is refused.
    try {
      store.get("k", kConnect);
      FAIL() << "call " << call << " succeeded against a stopped server";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
      EXPECT_NE(std::string(e.what()).find(store.describe()), std::string::npos) << e.what();
      if (call == 1) {
        EXPECT_NE(std::string(e.what()).find("cannot connect"), std::string::npos) << e.what();
      }
    }
  }
}

TEST_F(RedisStoreTest, AReplyOfTheWrongTypeIsAnErrorNamingTheCommand) {
  server_->command({"RPUSH", "a-list", "x"});
  RedisStore store("127.0.0.1", server_->port(), server_->password(), 0, kConnect);
  struct Case {
    std::function<void()> call;
    const char* command;
  };
  const Case cases[] = {
      {[&] { store.get("a-list", kConnect); }, "GET 'a-list'"},
      {[&] { store.add("a-list", 1); }, "INCRBY 'a-list'"},
      {[&] { store.compare_set("a-list", "", "v"); }, "EVAL (compare_set) 'a-list'"},
  };
  for (const Case& c : cases) {
    try {
      c.call();
      ADD_FAILURE() << c.command << " succeeded on a list";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.command), std::string::npos) << e.what();
    }
  }
  // The connection is still usable afterwards.
  store.set("after", "ok");
  EXPECT_EQ(store.get("after", kConnect), "ok");
}

// A one-connection TCP server on loopback that plays a misbehaving Redis:
// `behave` gets the accepted socket; the listener closes after it returns.
class FakeServer {
 public:
  explicit FakeServer(std::function<void(int)> behave) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener_, 4) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      ADD_FAILURE() << "cannot listen on loopback";
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, behave = std::move(behave)] {
      int peer = ::accept(listener_, nullptr, nullptr);
      if (peer >= 0) behave(peer);
      if (peer >= 0) ::close(peer);
      ::close(listener_);
    });
  }
  ~FakeServer() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }

 private:
  int listener_ = -1;
  int port_ = -1;
  std::thread thread_;
};

bool read_some(int peer) {
  char request[256];
  return ::read(peer, request, sizeof request) > 0;
}

TEST(RedisStoreWithoutServer, AServerThatClosesTheConnectionIsACommErrorNotASigpipe) {
  // Answers the connection check (PING) and closes, as a crashed server's
  // socket does. Writing a large value then hits the reset connection, which
  // raises SIGPIPE unless the store guards against it.
  FakeServer server([](int peer) {
    if (read_some(peer)) {
      EXPECT_EQ(::write(peer, "+PONG\r\n", 7), 7);
    }
  });
  RedisStore store("127.0.0.1", server.port(), "", 0, kConnect);
  server.join();
  try {
    store.set("big", std::string(8 << 20, 'x'));
    FAIL() << "a closed connection accepted the value";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
    EXPECT_NE(std::string(e.what()).find("connection lost during SET 'big'"), std::string::npos) << e.what();
  }
}

TEST(RedisStoreWithoutServer, AServerThatNeverAnswersTimesOutTheCommand) {
  FakeServer server([](int peer) {
    read_some(peer);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  });
  try {
    RedisStore store("127.0.0.1", server.port(), "", 0, Millis{100});
    FAIL() << "connected to a silent server";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
    EXPECT_NE(std::string(e.what()).find("no reply to PING within 0.1 s"), std::string::npos) << e.what();
  }
}

TEST(RedisStoreWithoutServer, AServerThatIsNotRedisIsNamedAsSuch) {
  FakeServer server([](int peer) {
    if (read_some(peer)) {
      EXPECT_GT(::write(peer, "HTTP/1.1 400 Bad Request\r\n\r\n", 28), 0);
    }
  });
  try {
    RedisStore store("127.0.0.1", server.port(), "", 0, kConnect);
    FAIL() << "accepted a non-Redis server";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
    EXPECT_NE(std::string(e.what()).find("is not Redis protocol"), std::string::npos) << e.what();
  }
}

// Store sessions: a call that meets a restarted server reconnects within the
// retry window instead of failing (the data of a server without persistence
// is gone; the session's AUTH and SELECT are made again).
TEST_F(RedisStoreTest, ARestartWithinTheRetryWindowIsWaitedOut) {
  auto private_server = std::make_unique<RedisServer>("restart-pw");
  RedisStore store("127.0.0.1", private_server->port(), "restart-pw", 3, kConnect, "", Millis{20'000});
  store.set("before", "1");
  private_server->stop();
  std::string failure;
  std::thread client([&] {
    try {
      store.set("during", "2");  // blocks until the server is back, then succeeds
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  private_server->restart();
  client.join();
  EXPECT_EQ(failure, "") << "SET during the restart failed";
  EXPECT_EQ(store.get("during", kConnect), "2");
  EXPECT_FALSE(store.check({"before"})) << "a restarted server without persistence has no old keys";
  EXPECT_EQ(store.add("counter", 5), 5);
  EXPECT_EQ(private_server->command({"SELECT", "3"}), "OK");
}

// INCRBY is not repeated once sent: its reply was lost, so it may have been
// applied, and add must never count twice. The next call goes through.
TEST_F(RedisStoreTest, AnAddWhoseConnectionDroppedIsNotRepeated) {
  auto private_server = std::make_unique<RedisServer>("add-pw");
  RedisStore store("127.0.0.1", private_server->port(), "add-pw", 0, kConnect, "", Millis{20'000});
  EXPECT_EQ(store.add("n", 1), 1);
  private_server->restart();  // drops the store's connection
  try {
    store.add("n", 1);
    FAIL() << "an add on a dropped connection was repeated";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kComm) << e.what();
    EXPECT_NE(std::string(e.what()).find("INCRBY"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store.add("n", 1), 1) << "the restarted server started from nothing";
}

TEST_F(RedisStoreTest, AServerDownLongerThanTheRetryWindowFailsSayingHowLong) {
  auto private_server = std::make_unique<RedisServer>("gone-pw");
  RedisStore store("127.0.0.1", private_server->port(), "gone-pw", 0, kConnect, "", Millis{600});
  store.set("k", "v");
  private_server->stop();
  try {
    store.set("k", "w");
    FAIL() << "a stopped server accepted a SET";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kComm) << message;
    EXPECT_NE(message.find(store.describe() + ": unreachable for "), std::string::npos) << message;
    EXPECT_NE(message.find("the store timeout is 0.6 s"), std::string::npos) << message;
    EXPECT_NE(message.find("Connection refused"), std::string::npos) << message;
    EXPECT_EQ(message.find("gone-pw"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace gradmesh::comm
