// report.html and Chrome traces: well-formed, self-contained, escaped. The
// pages carry their charts as JSON for charts.js (its own test:
// charts_js_test.cc); these check that data.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "gradmesh/obs/chrome_trace.h"
#include "gradmesh/obs/report_html.h"
#include "obs/chart_page.h"
#include "support/temp_dir.h"

namespace gradmesh::obs {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The data a page embeds for charts.js: {"charts": [spec, ...]}, parsed back.
nlohmann::json chart_data(const std::string& json_text) {
  EXPECT_TRUE(nlohmann::json::accept(json_text)) << json_text;
  return nlohmann::json::parse(json_text, nullptr, false);
}

TEST(ReportHtml, LineChartDataCarriesEverySeries) {
  LineChart chart{"Loss", "step", "loss", {{"train", {{0, 2.3}, {50, 0.9}, {100, 0.5, 1}}}, {"test", {{100, 0.6}}}}};
  chart.markers.push_back({40, "restart", "resumed at step 40"});
  const nlohmann::json data = chart_data(chart_data_json(std::vector<LineChart>{chart}));
  ASSERT_EQ(data["charts"].size(), 1u);
  const nlohmann::json& spec = data["charts"][0];
  EXPECT_EQ(spec["kind"], "line");
  EXPECT_EQ(spec["title"], "Loss");
  EXPECT_EQ(spec["x"]["label"], "step");
  EXPECT_EQ(spec["y"]["label"], "loss");
  ASSERT_EQ(spec["series"].size(), 2u);
  EXPECT_EQ(spec["series"][0]["name"], "train");
  EXPECT_EQ(spec["series"][1]["name"], "test");
  // Every point as [x, y, generation], in the order logged.
  EXPECT_EQ(spec["series"][0]["points"], nlohmann::json::parse("[[0.0,2.3,0],[50.0,0.9,0],[100.0,0.5,1]]"));
  EXPECT_EQ(spec["series"][1]["points"].size(), 1u);
  EXPECT_EQ(spec["markers"][0]["x"], 40.0);
  EXPECT_EQ(spec["markers"][0]["label"], "restart");
  EXPECT_FALSE(spec.contains("color")) << "colours are the renderer's";
}

TEST(ReportHtml, EmptyOrNonFiniteDataSaysSo) {
  const nlohmann::json data = chart_data(chart_data_json(std::vector<LineChart>{
      {"Accuracy", "epoch", "acc", {}}, {"A", "x", "y", {{"s", {{0, NAN}, {1, INFINITY}}}}}}));
  ASSERT_EQ(data["charts"].size(), 2u);
  EXPECT_TRUE(data["charts"][0]["series"].empty());
  EXPECT_EQ(data["charts"][0]["empty"], "no data") << "what the renderer says instead of drawing";
  // JSON has no NaN or infinity: null, which the renderer skips.
  EXPECT_TRUE(data["charts"][1]["series"][0]["points"][0][1].is_null());
  EXPECT_TRUE(data["charts"][1]["series"][0]["points"][1][1].is_null());
  ReportContent c;
  c.phases = {};  // no phases: no bar chart at all
  EXPECT_TRUE(chart_data(chart_data_json(c))["charts"].empty());
}

TEST(ReportHtml, PhaseChartHasABarPerRankAndPhase) {
  ReportContent c;
  c.phases = {{"forward", "backward", "comm"}, {{1.0, 2.0, 0.5}, {1.1, 2.2, 0.1}}};
  const nlohmann::json data = chart_data(chart_data_json(c));
  ASSERT_EQ(data["charts"].size(), 1u);
  const nlohmann::json& bars = data["charts"][0];
  EXPECT_EQ(bars["kind"], "bars");
  EXPECT_EQ(bars["unit"], "ms");
  EXPECT_EQ(bars["categories"], nlohmann::json::parse(R"(["forward","backward","comm"])"));
  ASSERT_EQ(bars["rows"].size(), 2u);
  EXPECT_EQ(bars["rows"][0]["label"], "rank 0");
  EXPECT_EQ(bars["rows"][1]["label"], "rank 1");
  EXPECT_EQ(bars["rows"][1]["values"][2], 0.1);
}

TEST(ReportHtml, PageIsSelfContainedAndEscapesText) {
  ReportContent c;
  c.title = "run <a&b>";
  c.facts = {{"model", "mlp \"x\""}};
  c.notes = {"rank 1 is <slow>"};
  c.charts = {{"Loss </script><b>", "step", "loss", {{"train", {{1, 1}, {2, 0.5}}}}}};
  const std::string page = render_report_html(c);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("run &lt;a&amp;b&gt;"), std::string::npos);
  EXPECT_NE(page.find("mlp &quot;x&quot;"), std::string::npos);
  EXPECT_NE(page.find("rank 1 is &lt;slow&gt;"), std::string::npos);
  // The renderer inline, exactly once; the charts as JSON that parses.
  EXPECT_EQ(count(page, charts_js()), 1u);
  EXPECT_EQ(count(page, "const GradmeshCharts"), 1u);
  EXPECT_EQ(count(page, "<script"), 2u) << "the data and the renderer";
  const nlohmann::json data = chart_data(gradmesh::testing::chart_page_data(page));
  ASSERT_EQ(data["charts"].size(), 1u);
  EXPECT_EQ(data["charts"][0]["title"], "Loss </script><b>") << "text in the data cannot end its script element";
  EXPECT_EQ(count(page, "</script>"), 2u);
  // No external resources: the only URL is the SVG namespace charts.js writes.
  EXPECT_EQ(count(page, "http"), count(page, "http://www.w3.org/2000/svg"));
  EXPECT_EQ(page.find(" src="), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
  EXPECT_EQ(page.find("svg text{"), std::string::npos) << "no page-wide rule may recolour the charts' keys";
  EXPECT_NE(page.find("</html>"), std::string::npos);
}

TEST(ReportHtml, ChartsJsIsTheSourceFileAndEmbedsSafely) {
  EXPECT_EQ(charts_js(), gradmesh::testing::read_file(GRADMESH_SOURCE_DIR "/src/gradmesh/obs/charts.js"))
      << "the compiled-in renderer is stale: re-run cmake";
  // Inlined into <script> elements and CDATA sections, and checked by the
  // self-containment tests of the pages that carry it.
  for (const char* never : {"</script", "<!--", "]]>", " src=", "<link", "e+0"})
    EXPECT_EQ(charts_js().find(never), std::string::npos) << never;
}

TEST(ReportHtml, StandaloneSvgDrawsItselfWithChartsJs) {
  LineChart chart{"Scaling <1>", "workers", "samples/s", {{"predicted", {{1, 100}, {2, 190}}}}};
  const std::string svg = standalone_chart_svg(chart, 640, 400);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"400\"", 0), 0u);
  EXPECT_EQ(count(svg, charts_js()), 1u);
  EXPECT_NE(svg.find("<script><![CDATA[\n"), std::string::npos);
  EXPECT_EQ(count(svg, "]]>"), 1u);
  EXPECT_NE(svg.find("class=\"fallback\""), std::string::npos) << "what a viewer without scripts shows";
  EXPECT_NE(svg.find("Scaling &lt;1&gt;"), std::string::npos);
  const std::string call = "GradmeshCharts.drawDocument(";
  const size_t at = svg.find(call);
  ASSERT_NE(at, std::string::npos);
  const std::string json = svg.substr(at + call.size(), svg.find(");\n]]>", at) - at - call.size());
  const nlohmann::json spec = chart_data(json);
  EXPECT_EQ(spec["title"], "Scaling <1>");
  EXPECT_EQ(spec["series"][0]["points"].size(), 2u);
}

TEST(ChromeTrace, WritesValidTraceEventJson) {
  gradmesh::testing::TempDir dir;
  ChromeTrace trace(3, 100.0);
  trace.span("compute", "forward \"1\"", 100.001, 100.003);
  trace.span("comm", "allreduce bucket 0", 100.002, 100.0025, JsonObject().add("bytes", 4096));
  trace.span("compute", "backward", 100.003, 100.0029);  // clock hiccup: clamped to zero length
  trace.write(dir.file("t.json"));
  const nlohmann::json j = nlohmann::json::parse(gradmesh::testing::read_file(dir.file("t.json")));
  const auto& events = j.at("traceEvents");
  ASSERT_EQ(events.size(), 6u);  // process name, two track names, three spans
  EXPECT_EQ(events[0].at("args").at("name"), "rank 3");
  EXPECT_EQ(events[3].at("name"), "forward \"1\"");
  EXPECT_EQ(events[3].at("pid"), 3);
  EXPECT_NEAR(events[3].at("ts").get<double>(), 1000.0, 1e-6);
  EXPECT_NEAR(events[3].at("dur").get<double>(), 2000.0, 1e-6);
  EXPECT_EQ(events[4].at("tid"), 1);
  EXPECT_EQ(events[4].at("args").at("bytes"), 4096);
  EXPECT_EQ(events[5].at("dur").get<double>(), 0.0);
}

TEST(ChromeTrace, TextAndNumbersOfAnyKindStillMakeValidJson) {
  gradmesh::testing::TempDir dir;
  ChromeTrace trace(0, 0.0);
  // A span named after user input (a layer name in Latin-1) with arguments that are not finite.
  trace.span("comp\xe9te", "layer \xff\x01", 1.0, 2.0, JsonObject().add("queued_ms", NAN).add("note", "a\\b"));
  trace.write(dir.file("t.json"));
  const std::string text = gradmesh::testing::read_file(dir.file("t.json"));
  ASSERT_TRUE(nlohmann::json::accept(text)) << text;
  const nlohmann::json events = nlohmann::json::parse(text).at("traceEvents");
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].at("args").at("name"), "comp\xef\xbf\xbdte");
  EXPECT_EQ(events[2].at("name"), "layer \xef\xbf\xbd\x01");
  EXPECT_TRUE(events[2].at("args").at("queued_ms").is_null());
  EXPECT_EQ(events[2].at("args").at("note"), "a\\b");
}

TEST(ChromeTrace, UnwritablePathIsAnIoError) {
  ChromeTrace trace(0, 0);
  EXPECT_THROW(trace.write("/nonexistent-dir/trace.json"), std::exception);
}

}  // namespace
}  // namespace gradmesh::obs
