// `gradmesh bench comm` end to end under `gradmesh launch`: the sweep's
// sizes, the JSON fields a comparison script reads, and how the gloo
// backend says it runs each size.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <vector>

#include "cli/run_command.h"

namespace gradmesh {
namespace {

using testing::run_gradmesh;
using TempDir = gradmesh::testing::TempDir;

// The JSON objects rank 0 printed ("[rank 0]: {...}" lines).
std::vector<nlohmann::json> rank0_rows(const std::string& out) {
  std::vector<nlohmann::json> rows;
  std::istringstream lines(out);
  const std::string prefix = "[rank 0]: ";
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(prefix + "{", 0) == 0) rows.push_back(nlohmann::json::parse(line.substr(prefix.size())));
  return rows;
}

std::vector<nlohmann::json> sweep(const std::string& backend, TempDir& dir) {
  const std::string self = "'" GRADMESH_BINARY "'";
  const auto result = run_gradmesh("launch --nproc-per-node 2 -- " + self + " bench comm --backend " + backend +
                                       " --json --min-bytes 4096 --max-bytes 1048576 --iters 3",
                                   dir.path());
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return rank0_rows(result.out);
}

TEST(BenchComm, GlooRowsNameTheAlgorithmThatRan) {
  TempDir dir;
  const std::vector<nlohmann::json> rows = sweep("gloo", dir);
  ASSERT_EQ(rows.size(), 5u);  // 4 KB to 1 MB in steps of 4x
  std::ifstream wmem("/proc/sys/net/core/wmem_max");
  long long wmem_max = 0;
  const bool room_for_256_kib = static_cast<bool>(wmem >> wmem_max) && wmem_max >= (192 << 10);
  int64_t bytes = 4096;
  for (const nlohmann::json& row : rows) {
    EXPECT_EQ(row.at("backend"), "gloo");
    EXPECT_EQ(row.at("ranks"), 2);
    EXPECT_EQ(row.at("bytes"), bytes);
    EXPECT_GT(row.at("time_us").get<double>(), 0.0);
    // With 2 ranks busbw = algbw x 2(n-1)/n = algbw.
    EXPECT_DOUBLE_EQ(row.at("busbw_gbps").get<double>(), row.at("algbw_gbps").get<double>());
    // Both ranks on this host with room for 256 KiB synchronous messages
    // (gloo/algorithm_choice.h): ring whole to 256 KiB, then in 256 KiB pieces.
    if (room_for_256_kib) {
      EXPECT_EQ(row.at("algorithm"), bytes <= (256 << 10) ? "ring" : "ring in 256 KiB pieces") << bytes;
    }
    bytes *= 4;
  }
  if (!room_for_256_kib) GTEST_SKIP() << "net.core.wmem_max below 192 KiB: algorithm names not checked";
}

TEST(BenchComm, ShmRowsHaveNoAlgorithm) {
  TempDir dir;
  const std::vector<nlohmann::json> rows = sweep("shm", dir);
  ASSERT_EQ(rows.size(), 5u);
  for (const nlohmann::json& row : rows) {
    EXPECT_EQ(row.at("backend"), "shm");
    EXPECT_FALSE(row.contains("algorithm"));
  }
}

// Point to point: ranks 0 and 1 ping-pong; one row per size, bandwidth = bytes / one-way time.
TEST(BenchComm, PointToPointSweepOnEveryLocalBackend) {
  for (const std::string backend : {"shm", "gloo"}) {
    TempDir dir;
    const std::string self = "'" GRADMESH_BINARY "'";
    const auto result = run_gradmesh("launch --nproc-per-node 2 -- " + self + " bench comm --op p2p --backend " +
                                         backend + " --json --min-bytes 4 --max-bytes 4096 --iters 5",
                                     dir.path());
    ASSERT_EQ(result.exit_code, 0) << result.err;
    const std::vector<nlohmann::json> rows = rank0_rows(result.out);
    ASSERT_EQ(rows.size(), 6u) << backend;  // 4 B to 4 KB in steps of 4x
    int64_t bytes = 4;
    for (const nlohmann::json& row : rows) {
      EXPECT_EQ(row.at("op"), "p2p");
      EXPECT_EQ(row.at("backend"), backend);
      EXPECT_EQ(row.at("bytes"), bytes);
      EXPECT_GT(row.at("time_us").get<double>(), 0.0);
      EXPECT_NEAR(row.at("algbw_gbps").get<double>(), bytes / (row.at("time_us").get<double>() * 1e3),
                  1e-6 * row.at("algbw_gbps").get<double>() + 1e-9);
      bytes *= 4;
    }
  }
}

TEST(BenchComm, PointToPointNeedsTwoRanks) {
  TempDir dir;
  const std::string self = "'" GRADMESH_BINARY "'";
  const auto result = run_gradmesh("launch --nproc-per-node 1 -- " + self + " bench comm --op p2p --backend shm", dir.path());
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("needs at least 2 ranks"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace gradmesh
