// The scaling study's page and SVG: self-contained, charts.js inline once,
// the chart as data (the predicted curve, the measured probes, the knee).
#include "gradmesh/scaling/scaling_report.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "gradmesh/obs/report_html.h"
#include "obs/chart_page.h"

namespace gradmesh::scaling {
namespace {

ScalingStudy small_study() {
  ScalingStudy s;
  s.config = "examples/mlp.toml <x>";
  s.global_batch = 128;
  s.here.compute = {1e-3, 1e-4};
  s.here.link = link_of(1e9, 50e-6);
  s.here.bucket_bytes = {4e6, 4e6};
  s.target = s.here;
  s.here_link = "gloo on this machine";
  s.target_link = "1gbit links, 50us latency";
  s.curve = predict_curve(s.target, s.global_batch, 16);
  for (int workers : {1, 2}) {
    ProbeMeasurement p;
    p.workers = workers, p.global_batch = 128, p.steps = 6;
    p.step_s = predict(s.here, 128, workers).step_s * 1.1;
    s.probes.push_back(p);
  }
  return s;
}

void expect_scaling_chart(const nlohmann::json& spec, const ScalingStudy& s) {
  EXPECT_EQ(spec["kind"], "line");
  EXPECT_TRUE(spec["x"]["log2"].get<bool>());
  EXPECT_EQ(spec["x"]["label"], "workers");
  EXPECT_EQ(spec["y"]["unit"], "samples/s");
  ASSERT_EQ(spec["series"].size(), 2u);
  EXPECT_EQ(spec["series"][0]["name"], "predicted");
  ASSERT_EQ(spec["series"][0]["points"].size(), 16u);
  EXPECT_DOUBLE_EQ(spec["series"][0]["points"][3][1].get<double>(), s.curve.points[3].samples_per_s);
  EXPECT_EQ(spec["series"][1]["name"], "measured");
  EXPECT_FALSE(spec["series"][1]["line"].get<bool>()) << "probes are dots";
  ASSERT_EQ(spec["series"][1]["points"].size(), 2u);
  EXPECT_DOUBLE_EQ(spec["series"][1]["points"][1][0].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(spec["series"][1]["points"][1][1].get<double>(), 128 / s.probes[1].step_s);
  ASSERT_EQ(spec["markers"].size(), 1u);
  EXPECT_DOUBLE_EQ(spec["markers"][0]["x"].get<double>(), s.curve.knee);
  EXPECT_EQ(spec["markers"][0]["label"], "knee: " + std::to_string(s.curve.knee));
}

TEST(ScalingReport, PageCarriesChartsJsOnceAndTheChartAsData) {
  const ScalingStudy s = small_study();
  const std::string page = scaling_html(s);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("Scaling study: examples/mlp.toml &lt;x&gt;"), std::string::npos);
  EXPECT_EQ(gradmesh::testing::occurrences(page, obs::charts_js()), 1u);
  EXPECT_EQ(page.find(" src="), std::string::npos) << "self-contained";
  EXPECT_EQ(page.find("<link"), std::string::npos) << "self-contained";
  EXPECT_NE(page.find("| 2 | "), std::string::npos) << "the table";
  const std::string json = gradmesh::testing::chart_page_data(page);
  ASSERT_TRUE(nlohmann::json::accept(json)) << json;
  const nlohmann::json charts = nlohmann::json::parse(json)["charts"];
  ASSERT_EQ(charts.size(), 1u);
  expect_scaling_chart(charts[0], s);
}

TEST(ScalingReport, SvgFileDrawsTheSameChartWithChartsJs) {
  const ScalingStudy s = small_study();
  const std::string svg = scaling_svg(s);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(gradmesh::testing::occurrences(svg, obs::charts_js()), 1u);
  const std::string call = "GradmeshCharts.drawDocument(";
  const size_t at = svg.find(call);
  ASSERT_NE(at, std::string::npos);
  const std::string json = svg.substr(at + call.size(), svg.find(");\n]]>", at) - at - call.size());
  ASSERT_TRUE(nlohmann::json::accept(json)) << json;
  expect_scaling_chart(nlohmann::json::parse(json), s);
}

}  // namespace
}  // namespace gradmesh::scaling
