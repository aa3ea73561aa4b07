// gradmesh bench scaling through the real binary: probes of the reference MLP
// at one and two workers, the fitted model's table, JSON and chart, and the
// flags it refuses. Skips visibly without the dataset.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/run_command.h"

namespace gradmesh::testing {
namespace {

using Json = nlohmann::json;

class BenchScaling : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist not installed (" << kDataDir << ")";
  }
  TempDir dir_;
};

const std::string kProbe = "bench scaling '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set data.limit_train=4096"
                           " --set data.limit_test=64 --set train.threads=1 --steps 6 --warmup 2";

TEST_F(BenchScaling, ProbesFitsAndPredictsWithTableJsonAndChart) {
  const CommandResult r = run_gradmesh(kProbe + " --workers 1,2 --max-workers 64 --bandwidth 1gbit --latency 50us"
                                                " --json study.json --svg study.svg",
                                       dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("| 2 | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("predicted on 1gbit links, 50us latency"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("knee (the most workers at >= 50% efficiency): "), std::string::npos) << r.out;
  std::ifstream json_file(dir_.file("study.json"));
  const Json study = Json::parse(json_file);
  ASSERT_EQ(study["probes"].size(), 2u);
  for (const Json& p : study["probes"]) {
    EXPECT_GT(p["step_s"].get<double>(), 0.0);
    EXPECT_GT(p["predicted_step_s"].get<double>(), 0.0);
  }
  EXPECT_EQ(study["predicted"].size(), 64u);
  EXPECT_DOUBLE_EQ(study["model"]["target_beta_s_per_byte"].get<double>(), 8e-9);
  EXPECT_GE(study["knee"].get<int>(), 1);
  std::ifstream svg_file(dir_.file("study.svg"));
  std::stringstream svg;
  svg << svg_file.rdbuf();
  EXPECT_EQ(svg.str().rfind("<svg", 0), 0u);
  EXPECT_NE(svg.str().find("<circle"), std::string::npos) << "the measured points";
}

TEST_F(BenchScaling, FlagsItCannotUseAreNamed) {
  struct Case {
    std::string flags, message;
  };
  for (const Case& c : std::vector<Case>{
           {"--workers 0", "--workers '0'"},
           {"--workers 1,x", "expected worker counts"},
           {"--workers 1,512", "--workers '1,512'"},
           {"--bandwidth 1gbit", "give --bandwidth and --latency together"},
           {"--bandwidth 10gb --latency 5us", "--bandwidth '10gb'"},
           {"--bandwidth 1gbit --latency 5", "--latency '5'"},
       }) {
    const CommandResult r = run_gradmesh(kProbe + " " + c.flags, dir_.path());
    EXPECT_EQ(r.exit_code, 2) << c.flags << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.flags << "\n" << r.err;
  }
}

}  // namespace
}  // namespace gradmesh::testing
