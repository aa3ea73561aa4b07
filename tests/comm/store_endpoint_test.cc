// Endpoint parsing, redaction and the shared timeout message (no server needed).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gradmesh/comm/endpoint.h"
#include "gradmesh/comm/store.h"
#include "gradmesh/core/error.h"
#include "support/temp_dir.h"

namespace gradmesh::comm {
namespace {

using Scheme = StoreEndpoint::Scheme;

TEST(StoreEndpoint, ParsesFileEndpoints) {
  StoreEndpoint e = parse_store_endpoint("file:///tmp/run 1/store");
  EXPECT_EQ(e.scheme, Scheme::kFile);
  EXPECT_EQ(e.path, "/tmp/run 1/store");
  EXPECT_EQ(e.describe(), "file:///tmp/run 1/store");
}

TEST(StoreEndpoint, ParsesRedisEndpointsWithDefaults) {
  StoreEndpoint e = parse_store_endpoint("redis://cache.internal");
  EXPECT_EQ(e.scheme, Scheme::kRedis);
  EXPECT_EQ(e.host, "cache.internal");
  EXPECT_EQ(e.port, 6379);
  EXPECT_EQ(e.db, 0);
  EXPECT_EQ(e.password, "");
  EXPECT_EQ(e.user, "");
  EXPECT_EQ(e.describe(), "redis://cache.internal:6379/0");

  e = parse_store_endpoint("redis://127.0.0.1:6390/");
  EXPECT_EQ(e.port, 6390);
  EXPECT_EQ(e.db, 0);
}

TEST(StoreEndpoint, ParsesPasswordsUsersAndDatabases) {
  StoreEndpoint e = parse_store_endpoint("redis://:s3cret@10.0.0.5:7000/4");
  EXPECT_EQ(e.password, "s3cret");
  EXPECT_EQ(e.user, "");
  EXPECT_EQ(e.host, "10.0.0.5");
  EXPECT_EQ(e.port, 7000);
  EXPECT_EQ(e.db, 4);
  EXPECT_EQ(e.describe(), "redis://10.0.0.5:7000/4");

  e = parse_store_endpoint("redis://trainer:pa%40ss%3Aw%2Frd%25@host:1/15");
  EXPECT_EQ(e.user, "trainer");
  EXPECT_EQ(e.password, "pa@ss:w/rd%");
  EXPECT_EQ(e.db, 15);

  // An unencoded '@' or '/' in the password still parses: the last '@' ends it.
  e = parse_store_endpoint("redis://:a@b/c@host:2");
  EXPECT_EQ(e.password, "a@b/c");
  EXPECT_EQ(e.host, "host");
  EXPECT_EQ(e.port, 2);
}

TEST(StoreEndpoint, ParsesBracketedIpv6Hosts) {
  StoreEndpoint e = parse_store_endpoint("redis://[::1]:7001/2");
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.port, 7001);
  EXPECT_EQ(e.describe(), "redis://[::1]:7001/2");
  EXPECT_EQ(parse_store_endpoint("redis://[fe80::1]").port, 6379);
}

struct BadEndpoint {
  std::string endpoint;
  std::string explanation;  // a phrase the message must contain
};

TEST(StoreEndpoint, RejectsMalformedEndpointsSayingWhatWasExpected) {
  const std::vector<BadEndpoint> cases = {
      {"redis:/x", ""},
      {"", ""},
      {"http://host:80", "unknown scheme 'http://'"},
      {"file://relative/dir", "not an absolute directory"},
      {"file://", "missing directory"},
      {"redis://", "missing host"},
      {"redis://:pw@", "missing host"},
      {"redis://:6379", "missing host"},
      {"redis://host:99999", "port '99999' is not a number in 1..65535"},
      {"redis://host:abc", "port 'abc'"},
      {"redis://host:0", "port '0'"},
      {"redis://host:", "port ''"},
      {"redis://host:+6379", "port '+6379'"},
      {"redis://host:0x10", "port '0x10'"},
      {"redis://host:6379/99999999999", "database '99999999999'"},
      {"redis://host:6379/x", "database 'x'"},
      {"redis://host:6379/-1", "database '-1'"},
      {"redis://host:6379/0?timeout=3", "query parameters"},
      {"redis://::1:6379", "IPv6"},
      {"redis://[::1:6379", "unclosed '['"},
      {"redis://pw@host", "needs a ':' before the password"},
      {"redis://:bad%zzescape@host", "percent escape"},
  };
  for (const BadEndpoint& c : cases) {
    try {
      parse_store_endpoint(c.endpoint);
      ADD_FAILURE() << "accepted '" << c.endpoint << "'";
    } catch (const Error& e) {
      std::string message = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << message;
      EXPECT_NE(message.find("expected file:///dir, redis://[:password@]host:port[/db] or etcd://"), std::string::npos)
          << message;
      EXPECT_NE(message.find(c.explanation), std::string::npos) << c.endpoint << " -> " << message;
    }
  }
}

TEST(StoreEndpoint, MessagesNeverShowThePassword) {
  for (const char* endpoint :
       {"redis://:hunter2secret@host:abc", "redis://admin:hunter2secret@host:1/x", "redis://:hunter2secret@"}) {
    try {
      parse_store_endpoint(endpoint);
      ADD_FAILURE() << "accepted a malformed endpoint";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find("hunter2secret"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(":***@"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(redact_endpoint("redis://admin:pw@h:1/0"), "redis://admin:***@h:1/0");
  EXPECT_EQ(redact_endpoint("redis://h:1/0"), "redis://h:1/0");
}

TEST(StoreEndpoint, TimeoutMessageNamesStoreDurationAndKeys) {
  try {
    throw_store_timeout("file:///tmp/x", Millis{5000}, {"rank/3", "rank/4"});
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_EQ(std::string(e.what()).rfind("file:///tmp/x: timed out after 5.0 s waiting for keys: rank/3, rank/4", 0), 0u)
        << e.what();
  }
  std::vector<std::string> many;
  for (int i = 0; i < 40; ++i) many.push_back("r" + std::to_string(i));
  try {
    throw_store_timeout("s", Millis{100}, many);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("r15 and 24 more"), std::string::npos) << e.what();
  }
  EXPECT_EQ(printable_key(std::string("a\0\n/b", 5)), "a\\x00\\x0a/b");
}

TEST(OpenStore, OpensAFileStoreCreatingItsDirectory) {
  gradmesh::testing::TempDir dir;
  std::string path = dir.path() + "/run/store";
  std::shared_ptr<Store> store = open_store("file://" + path);
  EXPECT_EQ(store->describe(), "file://" + path);
  EXPECT_TRUE(std::filesystem::is_directory(path));
  store->set("k", "v");
  EXPECT_EQ(open_store("file://" + path)->get("k", Millis{1000}), "v");
}

TEST(OpenStore, RejectsARelativeFileEndpoint) {
  try {
    open_store("file://relative/dir");
    FAIL() << "accepted a relative path";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("file:///abs/dir"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradmesh::comm
