// Data-parallel training across two "machines" (network namespaces joined by
// a veth pair), one worker per machine, rendezvous through a real
// redis-server with a password, gradients over TCP. The result must match a
// single process trained on the same global batches, and the metering must
// count the gradients' bytes as sent between hosts (network egress).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/run_command.h"
#include "comm/redis_server.h"
#include "parallel/trained_weights.h"
#include "support/temp_dir.h"
#include "support/two_hosts.h"

namespace gradmesh {
namespace {

using testing::CommandResult;


// A redis-server inside host 0's namespace, on its veth address; stopped on destruction.
class NamespacedRedis {
 public:
  NamespacedRedis(const testing::TwoHosts& hosts, const std::string& dir, const std::string& password)
      : prefix_(hosts.exec_prefix(0)), password_(password) {
    testing::shell(prefix_ + testing::kRedisServerBinary + " --port 6379 --bind " + testing::TwoHosts::kAddress[0] +
                   " --requirepass " + password + " --save '' --appendonly no --dir " + dir +
                   " --daemonize yes --pidfile " + dir + "/redis.pid --logfile " + dir + "/redis.log");
    pidfile_ = dir + "/redis.pid";
  }
  ~NamespacedRedis() { testing::shell("kill $(cat " + pidfile_ + ") 2>/dev/null"); }
  bool wait_ready() const {
    for (int i = 0; i < 100; ++i) {
      std::string out;
      testing::shell(prefix_ + "redis-cli -h " + testing::TwoHosts::kAddress[0] + " -a " + password_ +
                         " --no-auth-warning ping",
                     &out);
      if (out.find("PONG") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

 private:
  std::string prefix_, password_, pidfile_;
};

TEST(DataParallelNetns, TwoMachinesWithARedisStoreMatchOneProcess) {
  if (!testing::have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist not installed at " << testing::kDataDir;
  if (!testing::redis_server_installed()) GTEST_SKIP() << testing::redis_missing_message();
  testing::TwoHosts hosts("dp");
  std::string why;
  if (!hosts.create(&why)) GTEST_SKIP() << "cannot create network namespaces, skipping the two-machine test: " << why;
  testing::TempDir dir;
  NamespacedRedis redis(hosts, dir.path(), "s3cret");
  ASSERT_TRUE(redis.wait_ready()) << testing::read_file(dir.file("redis.log"));

  const std::string train = "train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set model.hidden=[64]"
                            " --set data.limit_train=1000 --set train.max_steps=30 --set train.batch_size=50"
                            " --set train.eval_every_epoch=false --set output.dir=runs --set output.run_id=netns";
  std::vector<CommandResult> nodes(2);
  std::vector<std::thread> threads;
  for (int node = 0; node < 2; ++node) {
    std::filesystem::create_directories(dir.file("node" + std::to_string(node)));
    threads.emplace_back([&, node] {
      nodes[node] = testing::run_shell(
          "timeout -k 5 120 " + hosts.exec_prefix(node) + "env GRADMESH_HOSTNAME=" + testing::TwoHosts::kAddress[node] +
              " '" GRADMESH_BINARY "' launch --nnodes 2 --node-rank " + std::to_string(node) +
              " --nproc-per-node 1 --rdzv-id dp-netns --rdzv-endpoint redis://:s3cret@" +
              testing::TwoHosts::kAddress[0] + ":6379 -- '" GRADMESH_BINARY "' " + train,
          dir.file("node" + std::to_string(node)));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int node = 0; node < 2; ++node)
    ASSERT_EQ(nodes[node].exit_code, 0) << "node " << node << ":\n" << nodes[node].out << nodes[node].err;
  EXPECT_NE(nodes[0].out.find("on 2 ranks"), std::string::npos) << nodes[0].out;
  EXPECT_NE(nodes[0].err.find("2 ranks over gloo"), std::string::npos) << nodes[0].err;

  // The metering saw the gradients cross between the hosts: on two ranks each
  // sends half of the 50,890 gradients (203,560 bytes) to reduce them and
  // half back, every step; headers, set-up and the metrics' own gathers add
  // a few percent.
  nlohmann::json usage;
  std::ifstream lines(dir.file("node0/runs/netns/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);)
    if (auto j = nlohmann::json::parse(line); j["type"] == "usage") usage = j;
  ASSERT_FALSE(usage.is_null());
  const double inter_host = usage["totals"]["inter_host_bytes"], gradients = 2.0 * usage["step"].get<int>() * 203'560;
  EXPECT_GE(inter_host, gradients) << usage.dump();
  EXPECT_LT(inter_host, gradients * 1.15) << usage.dump();
  EXPECT_EQ(usage["totals"]["inter_host_bytes"], usage["backends"]["gloo"]["sent_bytes"]) << "all of gloo's traffic";
  EXPECT_DOUBLE_EQ(usage["cost"]["egress"].get<double>(), inter_host / 1e9 * 0.01) << "the example egress price";

  const CommandResult one = testing::run_gradmesh(train + " --set output.run_id=single", dir.path());
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_LE(testing::relative_difference(testing::weights_of(dir.file("node0/runs/netns/model.safetensors")),
                                         testing::weights_of(dir.file("runs/single/model.safetensors"))),
            1e-5);
}

}  // namespace
}  // namespace gradmesh
