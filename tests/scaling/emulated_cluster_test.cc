// The emulated cluster's set-up and clean-up: namespaces on a bridge, every
// link limited by tc tbf, the store answering on host 0, and nothing left
// behind. Needs root and iproute2: skips visibly otherwise.
#include "gradmesh/scaling/emulated_cluster.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "gradmesh/core/error.h"
#include "comm/redis_server.h"
#include "support/temp_dir.h"
#include "support/two_hosts.h"

namespace gradmesh::scaling {
namespace {

bool namespace_exists(const std::string& name) {
  std::string out;
  shell("ip netns list", &out);
  return out.find(name) != std::string::npos;
}

TEST(EmulatedCluster, HostsReachEachOtherThroughLimitedLinksAndAreRemovedAfterwards) {
  if (!testing::redis_server_installed()) GTEST_SKIP() << testing::redis_missing_message();
  std::string why;
  if (!testing::TwoHosts("ec").create(&why)) GTEST_SKIP() << "cannot create network namespaces here: " << why;
  testing::TempDir dir;
  std::vector<std::string> names;
  {
    EmulatedCluster cluster(3, "200mbit", dir.path());
    names = cluster.namespaces();
    ASSERT_EQ(names.size(), 3u);
    for (const std::string& n : names) EXPECT_TRUE(namespace_exists(n)) << n;
    std::string out;
    // Host 2 reaches the store on host 0 through the switch.
    const std::string endpoint = cluster.store_endpoint();  // redis://:<password>@<address>:6379
    const std::string password = endpoint.substr(9, endpoint.find('@') - 9);
    shell("ip netns exec " + names[2] + " redis-cli -h " + cluster.address(0) + " -a " + password +
              " --no-auth-warning ping",
          &out);
    EXPECT_NE(out.find("PONG"), std::string::npos) << out;
    out.clear();
    shell("ip netns exec " + names[1] + " tc qdisc show dev eth0", &out);
    EXPECT_NE(out.find("tbf"), std::string::npos) << out;
    EXPECT_NE(out.find("200Mbit"), std::string::npos) << out;
    EXPECT_EQ(cluster.store_endpoint().rfind("redis://:", 0), 0u);
    EXPECT_NE(cluster.store_endpoint().find("@10.234.0.1:6379"), std::string::npos);
  }
  for (const std::string& n : names) EXPECT_FALSE(namespace_exists(n)) << n << " was left behind";
}

TEST(EmulatedCluster, BadArgumentsAreRefusedBeforeAnythingIsCreated) {
  testing::TempDir dir;
  EXPECT_THROW(EmulatedCluster(0, "1gbit", dir.path()), Error);
  EXPECT_THROW(EmulatedCluster(65, "1gbit", dir.path()), Error);
  try {
    EmulatedCluster(2, "1gb", dir.path());
    FAIL() << "a rate tc does not spell must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--link-rate '1gb'"), std::string::npos) << e.what();
  }
  std::string out;
  shell("ip netns list", &out);
  EXPECT_EQ(out.find("gmh" + std::to_string(::getpid())), std::string::npos) << out;
}

}  // namespace
}  // namespace gradmesh::scaling
