// `bench ... --json` output: one object per line that any JSON parser reads,
// with the fields the bench/ scripts look up.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gradmesh/bench/comm_bench.h"
#include "gradmesh/bench/gemm_bench.h"

namespace gradmesh::bench {
namespace {

std::vector<nlohmann::json> parse_lines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    EXPECT_TRUE(nlohmann::json::accept(line)) << "not JSON: " << line;
    if (nlohmann::json::accept(line)) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

TEST(BenchJson, CommRowsParseWithEveryField) {
  // A zero-time row (a clock that did not move) divides to infinite bandwidth.
  const std::vector<CommBenchRow> rows = {{4096, 12.5e-6, 0.328, 0.328, true, ""},
                                          {1 << 20, 0.0, INFINITY, INFINITY, false, "ring \"chunked\""}};
  const std::vector<nlohmann::json> lines = parse_lines(format_comm_json(rows, "gloo", 2));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].at("op"), "allreduce");
  EXPECT_EQ(lines[0].at("backend"), "gloo");
  EXPECT_EQ(lines[0].at("ranks"), 2);
  EXPECT_EQ(lines[0].at("bytes"), 4096);
  EXPECT_DOUBLE_EQ(lines[0].at("time_us").get<double>(), 12.5);
  EXPECT_EQ(lines[0].at("bound"), true);
  EXPECT_FALSE(lines[0].contains("algorithm"));
  EXPECT_TRUE(lines[1].at("algbw_gbps").is_null());
  EXPECT_EQ(lines[1].at("algorithm"), "ring \"chunked\"");
}

TEST(BenchJson, GemmResultIsOneObjectOnOneLine) {
  const std::string text = format_gemm_json({2048, 4, 0.05, 343.6, "f32", ""});
  ASSERT_EQ(text.back(), '\n');
  const std::vector<nlohmann::json> lines = parse_lines(text);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].at("n"), 2048);
  EXPECT_EQ(lines[0].at("threads"), 4);
  EXPECT_DOUBLE_EQ(lines[0].at("seconds").get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(lines[0].at("gflops").get<double>(), 343.6);
  EXPECT_EQ(lines[0].at("dtype"), "f32");
  EXPECT_FALSE(lines[0].contains("isa"));
  const nlohmann::json bf16 = parse_lines(format_gemm_json({2048, 1, 0.01, 1100.0, "bf16", "avx512_core_amx"}))[0];
  EXPECT_EQ(bf16.at("dtype"), "bf16");
  EXPECT_EQ(bf16.at("isa"), "avx512_core_amx");
}

}  // namespace
}  // namespace gradmesh::bench
