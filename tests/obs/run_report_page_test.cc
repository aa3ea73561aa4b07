// report.html from a run log: the cost table with its example-price note,
// the restart timeline, per-rank heatmaps (grouped past 32 ranks), readable
// axes, and the two-run comparison.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gradmesh/obs/run_exposition.h"
#include "gradmesh/obs/run_report_page.h"
#include "obs/chart_page.h"

namespace gradmesh::obs {
namespace {

RunLog sample_log(int ranks, int slow_rank) {
  RunLog log;
  log.path = "runs/x/metrics.jsonl";
  log.run = {{"run_id", "x"}, {"model", "mlp"}, {"parameters", "669706"}, {"world_size", std::to_string(ranks)},
             {"backend", "gloo"}, {"batch_size", "128"}};
  log.phases = {"data", "forward", "backward", "comm", "optimizer"};
  log.first_time = 1000;
  for (int i = 1; i <= 10; ++i) {
    StepRecord s;
    s.step = 50 * i, s.time = 1000 + i, s.loss = 1.0 / i, s.samples_per_s = 45000;
    s.phase_ms = {0.1, 0.5, 1.0, 0.3, 0.1};
    for (int r = 0; r < ranks; ++r)
      s.rank_phase_ms.push_back({0.1, r == slow_rank ? 2.0 : 0.5, 1.0, 0.3, 0.1});
    log.steps.push_back(s);
  }
  log.epochs = {{0, 250, 1005, 0.5, 0.82}, {1, 500, 1010, 0.45, 0.85}};
  log.events = {{RunEvent::Kind::kCheckpoint, 1004, 200, "checkpoint of step 200"},
                {RunEvent::Kind::kRestart, 1006, 300, "generation 1: rank 1 failed (killed by signal 9)"}};
  UsageRecord u;
  u.prices.currency = "USD", u.prices.core_hour = 0.04, u.prices.examples = true;
  u.cost.compute = 0.0012, u.cost.storage = 1e-9, u.cost.egress = 0.0004;
  u.totals = {{"cpu_seconds", 108}, {"inter_host_bytes", 4e7}, {"checkpoint_stored_bytes", 1e7}};
  u.ranks["cpu_seconds"] = std::vector<double>(static_cast<size_t>(ranks), 108.0 / ranks);
  u.ranks["sent_bytes"] = std::vector<double>(static_cast<size_t>(ranks), 2e7);
  log.usage = u;
  log.summary = {{"steps", 500}, {"samples_per_s", 45000}, {"test_accuracy", 0.85}, {"train_seconds", 10}};
  return log;
}

TEST(RunReportPage, HasTheCostTableTimelineHeatmapsAndFacts) {
  const ReportContent c = report_content(sample_log(4, 2));
  ASSERT_GE(c.tables.size(), 1u);
  const ReportTable& cost = c.tables[0];
  EXPECT_EQ(cost.title, "Cost");
  ASSERT_EQ(cost.rows.size(), 4u);
  EXPECT_EQ(cost.rows[0][0], "compute");
  EXPECT_EQ(cost.rows[0][3], "< $0.01") << "a fraction of a cent";
  EXPECT_EQ(cost.rows[0][2], "$0.04 per core-hour");
  EXPECT_EQ(cost.rows[3][3], "< $0.01") << "the total";
  EXPECT_NE(cost.note.find("Example prices"), std::string::npos);
  ASSERT_EQ(c.timeline.events.size(), 2u);
  EXPECT_EQ(c.timeline.events[1].kind, "restart");
  EXPECT_DOUBLE_EQ(c.timeline.events[1].seconds, 6.0);
  ASSERT_EQ(c.heatmaps.size(), 3u);
  ASSERT_EQ(c.heatmaps[0].values.size(), 4u);
  EXPECT_DOUBLE_EQ(c.heatmaps[0].values[2][0], 0.1 + 2.0 + 1.0 + 0.3 + 0.1) << "the slow rank's row";
  EXPECT_DOUBLE_EQ(c.heatmaps[1].values[2][0], 2.0 + 1.0 + 0.1) << "compute only";
  EXPECT_DOUBLE_EQ(c.heatmaps[2].values[2][0], 0.3) << "communication only";
  bool cost_fact = false;
  for (const auto& [key, value] : c.facts) cost_fact |= key == "cost so far" && value == "< $0.01 (example prices)";
  EXPECT_TRUE(cost_fact);
  const std::string page = render_report_html(c);
  EXPECT_NE(page.find("Restarts, checkpoints and warnings over time"), std::string::npos);
  EXPECT_NE(page.find("rank 1 failed (killed by signal 9)"), std::string::npos);
  EXPECT_NE(page.find("Step time per rank over the run"), std::string::npos);
  // The charts are the page's data, once, for the one inlined renderer.
  EXPECT_EQ(gradmesh::testing::occurrences(page, charts_js()), 1u);
  const std::string json = gradmesh::testing::chart_page_data(page);
  ASSERT_TRUE(nlohmann::json::accept(json)) << json;
  const nlohmann::json charts = nlohmann::json::parse(json)["charts"];
  std::vector<std::string> kinds;
  for (const nlohmann::json& chart : charts) kinds.push_back(chart["kind"]);
  EXPECT_EQ(kinds, (std::vector<std::string>{"line", "line", "line", "line", "timeline", "bars", "heatmap", "heatmap",
                                             "heatmap"}));
  EXPECT_EQ(charts[0]["title"], "Training loss");
  EXPECT_EQ(charts[0]["series"][0]["name"], "train loss");
  EXPECT_EQ(charts[0]["series"][0]["points"].size(), 10u);
  EXPECT_EQ(charts[0]["series"][0]["points"][9], nlohmann::json::parse("[500.0, 0.1, 0]"));
  EXPECT_EQ(charts[1]["series"][0]["points"][1], nlohmann::json::parse("[2.0, 0.85, 0]")) << "epoch 2's accuracy";
  EXPECT_TRUE(charts[1]["y"]["percent"].get<bool>());
  EXPECT_EQ(charts[2]["y"]["unit"], "samples/s");
  const nlohmann::json& timeline = charts[4];
  ASSERT_EQ(timeline["marks"].size(), 2u);
  EXPECT_EQ(timeline["marks"][1]["kind"], "restart");
  EXPECT_EQ(timeline["marks"][1]["t"], 6.0);
  EXPECT_EQ(timeline["marks"][1]["text"], "generation 1: rank 1 failed (killed by signal 9)");
  EXPECT_EQ(charts[6]["rows"][2]["values"][0], 0.1 + 2.0 + 1.0 + 0.3 + 0.1) << "the slow rank's row";
}

TEST(RunReportPage, RedoneStepsAreALaterGenerationAndTheRestartIsMarkedWhereTrainingResumed) {
  RunLog log = sample_log(2, -1);
  // The killed generation logged steps 300..500; the restarted one resumed
  // at 250 and logs 300.. again. The run log keeps a restart line's
  // resumed_at_step in the event's text.
  for (int i = 6; i <= 8; ++i) {
    StepRecord s = log.steps[static_cast<size_t>(i - 1)];
    s.time += 10, s.loss = 0.01 * i;
    log.steps.push_back(s);
  }
  log.events = {{RunEvent::Kind::kResume, 1010, 250, "resumed from the checkpoint of step 250"},
                {RunEvent::Kind::kRestart, 1010, 0,
                 "generation 1: rank 1 failed (killed by signal 9), resumed at step 250, 250 steps trained again"}};
  const ReportContent c = report_content(log);
  const std::vector<ChartPoint>& loss = c.charts[0].series[0].points;
  ASSERT_EQ(loss.size(), 13u) << "every line is passed on; the renderer drops the superseded ones";
  EXPECT_EQ(loss[9].generation, 0);
  EXPECT_EQ(loss[10].generation, 1);
  EXPECT_DOUBLE_EQ(loss[10].x, 300);
  EXPECT_EQ(c.charts[2].series[0].points[12].generation, 1) << "throughput too";
  ASSERT_EQ(c.charts[0].markers.size(), 1u) << "the restart and its resume are one marker";
  EXPECT_DOUBLE_EQ(c.charts[0].markers[0].x, 250);
  EXPECT_EQ(c.charts[0].markers[0].label, "restart");
  EXPECT_EQ(c.charts[2].markers.size(), 1u);
  EXPECT_TRUE(c.charts[1].markers.empty()) << "epochs are another axis";
  for (const TimelineEvent& e : c.timeline.events)
    EXPECT_EQ(e.text.find("step 0"), std::string::npos) << "a restart line has no step of its own: " << e.text;
}

TEST(RunReportPage, ManyRanksAreGroupedAndTheStragglerKeepsItsColour) {
  const ReportContent c = report_content(sample_log(100, 57));
  EXPECT_TRUE(c.phases.ms_per_step.empty()) << "100 bars would not read; the heatmap shows them";
  const Heatmap grouped = with_rows_grouped(c.heatmaps[0], 32);
  ASSERT_EQ(grouped.values.size(), 25u);  // groups of 4
  EXPECT_EQ(grouped.row_labels[14], "ranks 56-59");
  EXPECT_DOUBLE_EQ(grouped.values[14][3], 3.5) << "the group's largest: rank 57";
  EXPECT_DOUBLE_EQ(grouped.values[0][3], 2.0);
  // The page's heatmaps are the grouped ones.
  const nlohmann::json charts = nlohmann::json::parse(chart_data_json(c))["charts"];
  const nlohmann::json& heat = charts[charts.size() - 3];
  EXPECT_EQ(heat["kind"], "heatmap");
  ASSERT_EQ(heat["rows"].size(), 25u);
  EXPECT_EQ(heat["rows"][14]["label"], "ranks 56-59");
  EXPECT_EQ(heat["rows"][14]["values"][3], 3.5);
}

TEST(RunReportPage, AxesReadAtAGlance) {
  EXPECT_EQ(axis_number(45000), "45k");
  EXPECT_EQ(axis_number(1.2e6), "1.2M");
  EXPECT_EQ(axis_number(3), "3");
  EXPECT_EQ(axis_number(0.25), "0.25");
  EXPECT_EQ(axis_number(0), "0");
  EXPECT_EQ(axis_number(2500), "2500");
  EXPECT_EQ(axis_number(999'600), "1M") << "the unit of the rounded value";
  EXPECT_EQ(axis_number(9'999.7), "10k");
  EXPECT_EQ(axis_number(-45000), "-45k");
  // The charts' own axes are charts.js's (charts_test.js: ticks, units,
  // values far above their differences, whole epochs); epochs ask for
  // whole-number ticks.
  const ReportContent c = report_content(sample_log(2, -1));
  EXPECT_FALSE(c.charts[0].integer_x);
  EXPECT_TRUE(c.charts[1].integer_x);
  EXPECT_TRUE(c.charts[3].integer_x);
}

TEST(RunReportPage, ComparisonPutsTwoRunsSideBySideWithTheirRatio) {
  RunLog a = sample_log(2, -1), b = sample_log(4, -1);
  b.summary["samples_per_s"] = 90000;
  b.usage->cost.compute = 0.0024;
  b.usage->prices.currency = "EUR";
  b.usage->cost.egress = 1234.5;
  const ReportContent c = comparison_content(a, "run-a", b, "run-b");
  EXPECT_NE(c.title.find("A = run-a, B = run-b"), std::string::npos);
  ASSERT_EQ(c.tables.size(), 1u);
  std::map<std::string, std::vector<std::string>> rows;
  for (const auto& row : c.tables[0].rows) rows[row[0]] = row;
  EXPECT_EQ(rows["samples/s"], (std::vector<std::string>{"samples/s", "45000", "90000", "2.000"}));
  // Every cost cell is money in its run's currency; the ratio is of the exact amounts.
  EXPECT_EQ(rows["cost: compute"], (std::vector<std::string>{"cost: compute", "< $0.01", "< \u20ac0.01", "2.000"}));
  EXPECT_EQ(rows["cost: egress"][2], "\u20ac1,234.50");
  EXPECT_EQ(rows["bytes sent to other hosts"][1], "40 MB");
  EXPECT_FALSE(c.notes.empty()) << "different currencies are called out";
  ASSERT_EQ(c.charts[0].series.size(), 2u);
  EXPECT_EQ(c.charts[0].series[1].name, "B");
  // Each run's restart on the step charts, in its series' colour and named by its run.
  ASSERT_EQ(c.charts[0].markers.size(), 2u);
  EXPECT_EQ(c.charts[0].markers[0].label, "A: restart");
  EXPECT_EQ(c.charts[0].markers[0].series, 0);
  EXPECT_EQ(c.charts[0].markers[1].label, "B: restart");
  EXPECT_EQ(c.charts[0].markers[1].series, 1);
  EXPECT_EQ(c.charts[2].markers.size(), 2u) << "throughput too";
}

TEST(RunExposition, ExportsTheRunPerRankWithConventionalNames) {
  const std::string text = render_run_exposition(sample_log(2, 1), "x", 1, 1, 2, "running");
  for (const char* line : {
           "# TYPE gradmesh_rank_cpu_seconds_total counter",
           "gradmesh_rank_cpu_seconds_total{run_id=\"x\",rank=\"1\"} 54",
           "gradmesh_rank_sent_bytes_total{run_id=\"x\",rank=\"0\"} 20000000",
           "gradmesh_rank_phase_seconds_per_step{run_id=\"x\",rank=\"1\",phase=\"forward\"} 0.002",
           "gradmesh_train_step{run_id=\"x\"} 500",
           "gradmesh_test_accuracy{run_id=\"x\"} 0.85",
           "gradmesh_run_cost_total{run_id=\"x\",kind=\"compute\",currency=\"USD\",example=\"true\"} 0.0012",
           "gradmesh_agent_restarts_total{run_id=\"x\"} 1",
           "gradmesh_agent_phase{run_id=\"x\",phase=\"running\"} 1",
           "gradmesh_checkpoints_total{run_id=\"x\"} 1",
       })
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  // One HELP and TYPE line per family, as Prometheus requires.
  for (size_t at = 0; (at = text.find("# TYPE ", at)) != std::string::npos; ++at) {
    const std::string name = text.substr(at + 7, text.find(' ', at + 7) - at - 7);
    EXPECT_EQ(text.find("# TYPE " + name + " ", at + 1), std::string::npos) << "two TYPE lines for " << name;
  }
  // Without a run: the agent's own figures only.
  const std::string bare = render_run_exposition(RunLog{}, "y", 0, 0, 0, "rendezvous");
  EXPECT_NE(bare.find("gradmesh_agent_generation{run_id=\"y\"} 0"), std::string::npos);
  EXPECT_EQ(bare.find("gradmesh_rank_"), std::string::npos);
}

}  // namespace
}  // namespace gradmesh::obs
