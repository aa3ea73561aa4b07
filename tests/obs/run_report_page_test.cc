// report.html from a run log: the cost table with its example-price note,
// the restart timeline, per-rank heatmaps (grouped past 32 ranks), readable
// axes, and the two-run comparison.
#include <gtest/gtest.h>

#include <cmath>

#include "gradmesh/obs/run_exposition.h"
#include "gradmesh/obs/run_report_page.h"

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
  EXPECT_EQ(cost.rows[0][3], "0.00120 USD");
  EXPECT_EQ(cost.rows[3][3], "0.00160 USD") << "the total";
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
  for (const auto& [key, value] : c.facts) cost_fact |= key == "cost so far" && value == "0.00160 USD (example prices)";
  EXPECT_TRUE(cost_fact);
  const std::string page = render_report_html(c);
  EXPECT_NE(page.find("Restarts, checkpoints and warnings over time"), std::string::npos);
  EXPECT_NE(page.find("rank 1 failed (killed by signal 9)"), std::string::npos);
  EXPECT_NE(page.find("Step time per rank over the run"), std::string::npos);
  EXPECT_EQ(page.find("e+0"), std::string::npos) << "no exponent on any axis";
  EXPECT_EQ(page.find("<script"), std::string::npos);
}

TEST(RunReportPage, ManyRanksAreGroupedAndTheStragglerKeepsItsColour) {
  const ReportContent c = report_content(sample_log(100, 57));
  EXPECT_TRUE(c.phases.ms_per_step.empty()) << "100 bars would not read; the heatmap shows them";
  const Heatmap grouped = with_rows_grouped(c.heatmaps[0], 32);
  ASSERT_EQ(grouped.values.size(), 25u);  // groups of 4
  EXPECT_EQ(grouped.row_labels[14], "ranks 56-59");
  EXPECT_DOUBLE_EQ(grouped.values[14][3], 3.5) << "the group's largest: rank 57";
  EXPECT_DOUBLE_EQ(grouped.values[0][3], 2.0);
  const std::string svg = render_heatmap_svg(grouped);
  EXPECT_NE(svg.find("ranks 56-59"), std::string::npos);
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
  // Values far above their differences: ticks stay few and finite.
  LineChart flat{"Flat", "step", "x", {{"a", {{0, 1e17}, {1, 1e17 + 16}}}}};
  EXPECT_LT(render_line_chart_svg(flat).size(), 20'000u);
  // Epochs: whole-number ticks only.
  LineChart chart{"Accuracy", "epoch", "accuracy", {{"a", {{1, 0.8}, {2, 0.85}, {3, 0.86}}}}, true};
  const std::string svg = render_line_chart_svg(chart);
  EXPECT_EQ(svg.find(">1.5<"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">2<"), std::string::npos);
}

TEST(RunReportPage, ComparisonPutsTwoRunsSideBySideWithTheirRatio) {
  RunLog a = sample_log(2, -1), b = sample_log(4, -1);
  b.summary["samples_per_s"] = 90000;
  b.usage->cost.compute = 0.0024;
  const ReportContent c = comparison_content(a, "run-a", b, "run-b");
  EXPECT_NE(c.title.find("A = run-a, B = run-b"), std::string::npos);
  ASSERT_EQ(c.tables.size(), 1u);
  bool rate = false, cost = false;
  for (const auto& row : c.tables[0].rows) {
    if (row[0] == "samples/s") rate = row[1] == "45000" && row[2] == "90000" && row[3] == "2.000";
    if (row[0] == "cost: compute") cost = row[3] == "2.000";
  }
  EXPECT_TRUE(rate);
  EXPECT_TRUE(cost);
  ASSERT_EQ(c.charts[0].series.size(), 2u);
  EXPECT_EQ(c.charts[0].series[1].name, "B");
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
