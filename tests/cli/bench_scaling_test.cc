// gradmesh bench scaling through the real binary: probes of the reference MLP
// at one and two workers, the fitted model's table, JSON and chart, and the
// flags it refuses. Skips visibly without the dataset.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli/run_command.h"
#include "comm/redis_server.h"
#include "elastic/launcher_process.h"
#include "support/two_hosts.h"

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
                                                " --json study.json --svg study.svg --report report.html",
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
  // The chart's data (the measured points) and the renderer that draws them, in both files.
  EXPECT_NE(svg.str().find("\"name\":\"measured\""), std::string::npos) << "the measured points";
  EXPECT_NE(svg.str().find("GradmeshCharts.drawDocument("), std::string::npos) << "the renderer";
  // The report page carries the same chart and the table, and nothing from outside it.
  const std::string report = read_text(dir_.file("report.html"));
  EXPECT_NE(report.find("\"name\":\"measured\""), std::string::npos) << "the chart is not in report.html";
  EXPECT_NE(report.find("| 2 | "), std::string::npos) << report;
  EXPECT_EQ(report.find(" src="), std::string::npos) << "report.html must be self-contained";
  EXPECT_EQ(report.find("<link"), std::string::npos) << "report.html must be self-contained";
}

// The namespaces left of the emulated cluster a study's stderr names
// ("network namespaces gmh<pid>x0 .. "): one per line, "" when none is.
// Other tests' clusters, which may come and go meanwhile, are not counted.
std::string left_behind(const std::string& err) {
  const size_t at = err.find("network namespaces gmh");
  if (at == std::string::npos) return "(the study named no namespaces)";
  const size_t from = at + 22, to = err.find('x', from);
  const std::string pid = err.substr(from, to - from);
  std::string out;
  shell("ip netns list | grep -E '^gm[hs]" + pid + "(x|$| )' | cut -d' ' -f1", &out);
  return out;
}

// Two emulated hosts at 1 gbit: the probes run one worker per host over
// gloo, the link is fitted between them, and nothing is left behind. (How
// fast each side was is a benchmark figure, docs/scaling.md, not a test.)
TEST_F(BenchScaling, EmulatedHostsAreProbedOverGlooAndLeaveNothingBehind) {
  if (!redis_server_installed()) GTEST_SKIP() << redis_missing_message();
  std::string why;
  if (!TwoHosts("bs").create(&why)) GTEST_SKIP() << "cannot create network namespaces here: " << why;
  const CommandResult r =
      run_gradmesh(kProbe + " --workers 1,2 --hosts netns:2 --link-rate 1gbit --json study.json", dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("gloo between 2 emulated hosts on 1gbit links"), std::string::npos) << r.out;
  std::ifstream json_file(dir_.file("study.json"));
  const Json study = Json::parse(json_file);
  ASSERT_EQ(study["probes"].size(), 2u);
  EXPECT_GT(study["probes"][1]["exposed_comm_s"].get<double>(), 0.0) << "two hosts wait for their gradients";
  EXPECT_EQ(left_behind(r.err), "") << "namespaces left behind";
}

// Ctrl-C while a probe runs: the probes stop and the namespaces go.
TEST_F(BenchScaling, AnInterruptedStudyStillRemovesItsHosts) {
  if (!redis_server_installed()) GTEST_SKIP() << redis_missing_message();
  std::string why;
  if (!TwoHosts("bs").create(&why)) GTEST_SKIP() << "cannot create network namespaces here: " << why;
  LauncherProcess study({"bench", "scaling", GRADMESH_SOURCE_DIR "/examples/mlp.toml", "--set", "data.limit_train=60000",
                         "--set", "train.threads=1", "--steps", "100000", "--warmup", "0", "--workers", "1,2",
                         "--hosts", "netns:2"},
                        dir_.path(), "interrupted");
  for (int i = 0; i < 300 && study.err().find("probe: 1 worker") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_NE(study.err().find("network namespaces gmh"), std::string::npos) << study.err();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  study.signal(SIGINT);
  EXPECT_NE(study.wait(std::chrono::milliseconds(60'000)), 0) << study.err();
  EXPECT_NE(study.err().find("interrupted by SIGINT"), std::string::npos) << study.err();
  EXPECT_EQ(left_behind(study.err()), "") << "namespaces left behind";
}

TEST_F(BenchScaling, FlagsItCannotUseAreNamed) {
  expect_usage_errors(kProbe,
                      {
                          {"--workers 0", "--workers '0'"},
                          {"--workers 1,x", "expected worker counts"},
                          {"--workers 1,512", "--workers '1,512'"},
                          {"--bandwidth 1gbit", "give --bandwidth and --latency together"},
                          {"--bandwidth 10gb --latency 5us", "--bandwidth '10gb'"},
                          {"--bandwidth 1gbit --latency 5", "--latency '5'"},
                          {"--hosts 2", "--hosts '2'"},
                          {"--hosts netns:2 --workers 1,4", "4 workers need as many hosts"},
                      },
                      dir_.path());
}

}  // namespace
}  // namespace gradmesh::testing
