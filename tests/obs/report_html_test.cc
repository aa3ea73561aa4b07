// report.html and Chrome traces: well-formed, self-contained, escaped.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "gradmesh/obs/chrome_trace.h"
#include "gradmesh/obs/report_html.h"
#include "support/temp_dir.h"

namespace gradmesh::obs {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ReportHtml, LineChartDrawsEverySeriesInsideItsFrame) {
  LineChart chart{"Loss", "step", "loss", {{"train", {{0, 2.3}, {50, 0.9}, {100, 0.5}}}, {"test", {{100, 0.6}}}}};
  const std::string svg = render_line_chart_svg(chart);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_NE(svg.find(">train<"), std::string::npos);  // legend with two series
  // The first point (step 0, the highest loss) sits at the left edge, below the top by the 5% margin.
  EXPECT_NE(svg.find("points=\"64.0,36.5 "), std::string::npos) << svg;
}

TEST(ReportHtml, EmptyOrNonFiniteDataSaysSo) {
  EXPECT_NE(render_line_chart_svg({"Accuracy", "epoch", "acc", {}}).find("no data"), std::string::npos);
  EXPECT_NE(render_line_chart_svg({"A", "x", "y", {{"s", {{0, NAN}, {1, INFINITY}}}}}).find("no data"),
            std::string::npos);
  const std::string one = render_line_chart_svg({"A", "x", "y", {{"s", {{3, 0.5}}}}});  // a single point still draws
  EXPECT_EQ(one.find("no data"), std::string::npos);
  EXPECT_EQ(one.find("nan"), std::string::npos);
  EXPECT_NE(render_phase_chart_svg({}).find("no data"), std::string::npos);
}

TEST(ReportHtml, PhaseChartHasABarPerRankAndPhase) {
  PhaseBreakdown b{{"forward", "backward", "comm"}, {{1.0, 2.0, 0.5}, {1.1, 2.2, 0.1}}};
  const std::string svg = render_phase_chart_svg(b);
  EXPECT_NE(svg.find(">rank 0<"), std::string::npos);
  EXPECT_NE(svg.find(">rank 1<"), std::string::npos);
  EXPECT_NE(svg.find("<title>rank 1 comm: 0.1 ms</title>"), std::string::npos) << svg;
  EXPECT_EQ(count(svg, "<rect"), 3u + 6u);  // legend swatches + bars
}

TEST(ReportHtml, PageIsStaticAndEscapesText) {
  ReportContent c;
  c.title = "run <a&b>";
  c.facts = {{"model", "mlp \"x\""}};
  c.notes = {"rank 1 is <slow>"};
  c.charts = {{"Loss", "step", "loss", {{"train", {{1, 1}, {2, 0.5}}}}}};
  const std::string page = render_report_html(c);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("run &lt;a&amp;b&gt;"), std::string::npos);
  EXPECT_NE(page.find("mlp &quot;x&quot;"), std::string::npos);
  EXPECT_NE(page.find("rank 1 is &lt;slow&gt;"), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("http://") , page.find("http://www.w3.org/2000/svg"));  // no external resources
  EXPECT_NE(page.find("</html>"), std::string::npos);
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
