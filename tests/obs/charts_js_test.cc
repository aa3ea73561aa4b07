// charts.js run by Node (tests/obs/charts_test.js): the renderer's own
// checks, then the report and comparison pages built here, drawn from the
// data they embed, so what the C++ side writes is what the renderer draws.
// Skips where Node is not installed.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "gradmesh/obs/run_report_page.h"
#include "support/temp_dir.h"

namespace gradmesh::obs {
namespace {

bool node_installed() { return std::system("command -v node > /dev/null 2>&1") == 0; }

// Two ranks, 10 log intervals; the killed generation logged steps 60..100,
// the restarted one resumed at step 40 and logged 50..120 again.
RunLog restarted_run() {
  RunLog log;
  log.path = "runs/r/metrics.jsonl";
  log.run = {{"run_id", "r"}, {"model", "mlp"}, {"world_size", "2"}, {"backend", "gloo"}};
  log.phases = {"data", "forward", "backward", "comm", "optimizer"};
  log.first_time = 1000;
  const auto step = [&](int64_t n, double loss, double time) {
    StepRecord s;
    s.step = n, s.time = time, s.loss = loss, s.samples_per_s = 40000 + 100 * static_cast<double>(n);
    s.phase_ms = {0.1, 0.5, 1.0, 0.3, 0.1};
    s.rank_phase_ms = {s.phase_ms, s.phase_ms};
    log.steps.push_back(s);
  };
  for (int64_t n = 10; n <= 100; n += 10) step(n, 3.0 - 0.02 * static_cast<double>(n), 1000 + static_cast<double>(n) / 10);
  for (int64_t n = 50; n <= 120; n += 10) step(n, 9.0, 1020 + static_cast<double>(n) / 10);  // redone: another loss
  log.epochs = {{0, 60, 1006, 0.5, 0.82}, {0, 60, 1026, 0.45, 0.84}, {1, 120, 1032, 0.4, 0.86}};
  log.events = {{RunEvent::Kind::kCheckpoint, 1004, 40, "checkpoint of step 40"},
                {RunEvent::Kind::kRestart, 1020, 0, "generation 1: rank 1 failed (killed), resumed at step 40"}};
  return log;
}

// The "PAGE {...}" line charts_test.js printed for `file`.
nlohmann::json drawn(const std::string& output, const std::string& file) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("PAGE ", 0) != 0) continue;
    nlohmann::json page = nlohmann::json::parse(line.substr(5));
    if (page["file"] == file) return page["charts"];
  }
  ADD_FAILURE() << "charts_test.js drew nothing for " << file << "\n" << output;
  return nlohmann::json::array();
}

TEST(ChartsJs, DrawsTheReportAndComparisonFromTheirData) {
  if (!node_installed()) GTEST_SKIP() << "node (Node.js) is not installed: charts.js is not run";
  gradmesh::testing::TempDir dir;
  const RunLog log = restarted_run();
  dir.write("report.html", render_report_html(report_content(log)));
  dir.write("compare.html", render_report_html(comparison_content(log, "a", restarted_run(), "b")));
  const std::string command = "node '" GRADMESH_SOURCE_DIR "/tests/obs/charts_test.js' '" GRADMESH_SOURCE_DIR
                              "/src/gradmesh/obs/charts.js' '" + dir.file("report.html") + "' '" +
                              dir.file("compare.html") + "' > '" + dir.file("out") + "' 2>&1";
  const int status = std::system(command.c_str());
  const std::string output = gradmesh::testing::read_file(dir.file("out"));
  ASSERT_EQ(status, 0) << output;
  EXPECT_NE(output.find("all passed"), std::string::npos) << output;

  const nlohmann::json report = drawn(output, dir.file("report.html"));
  ASSERT_GE(report.size(), 5u) << report.dump();
  const nlohmann::json& loss = report[0];
  EXPECT_EQ(loss["title"], "Training loss");
  // 10 + 8 step lines; 60..100 of the killed generation were redone: 10..40 and 50..120.
  EXPECT_EQ(loss["points"], nlohmann::json::parse("[12]")) << loss.dump();
  EXPECT_EQ(loss["markers"], nlohmann::json::parse("[40]")) << "the restart, where training resumed";
  EXPECT_EQ(loss["keys"][0]["name"], "train loss");
  EXPECT_EQ(report[2]["title"], "Throughput");
  EXPECT_EQ(report[2]["points"], nlohmann::json::parse("[12]"));
  EXPECT_EQ(report[1]["points"], nlohmann::json::parse("[2]")) << "epoch 1 redone: two epochs drawn";
  EXPECT_EQ(report[4]["kind"], "timeline");
  EXPECT_EQ(report[4]["marks"], 2);
  size_t cells = 0;
  for (const nlohmann::json& chart : report) cells += chart["cells"].get<size_t>();
  EXPECT_EQ(cells, 3u * 2 * 18) << "three heatmaps of 2 ranks by 18 intervals";

  const nlohmann::json compare = drawn(output, dir.file("compare.html"));
  ASSERT_EQ(compare.size(), 4u);
  EXPECT_EQ(compare[0]["points"], nlohmann::json::parse("[12, 12]"));
  ASSERT_EQ(compare[0]["keys"].size(), 2u);
  EXPECT_EQ(compare[0]["keys"][0]["name"], "A");
  EXPECT_EQ(compare[0]["keys"][1]["name"], "B");
  EXPECT_NE(compare[0]["keys"][0]["color"], compare[0]["keys"][1]["color"]) << "each key in its series' colour";
}

}  // namespace
}  // namespace gradmesh::obs
