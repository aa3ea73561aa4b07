// `gradmesh bench comm` end to end under `gradmesh launch`: the sweep's
// sizes, the JSON fields a comparison script reads, and which of Gloo's
// all-reduces the gloo backend names for each size.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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
  int64_t bytes = 4096;
  for (const nlohmann::json& row : rows) {
    EXPECT_EQ(row.at("backend"), "gloo");
    EXPECT_EQ(row.at("ranks"), 2);
    EXPECT_EQ(row.at("bytes"), bytes);
    EXPECT_GT(row.at("time_us").get<double>(), 0.0);
    // With 2 ranks busbw = algbw x 2(n-1)/n = algbw.
    EXPECT_DOUBLE_EQ(row.at("busbw_gbps").get<double>(), row.at("algbw_gbps").get<double>());
    // The crossover measured for 2 ranks (gloo/algorithm_choice.cc): ring to 512 KB, then halving-doubling.
    EXPECT_EQ(row.at("algorithm"), bytes <= (512 << 10) ? "ring" : "halving-doubling") << bytes;
    bytes *= 4;
  }
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

}  // namespace
}  // namespace gradmesh
