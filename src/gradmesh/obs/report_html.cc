#include "gradmesh/obs/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace gradmesh::obs {
namespace {

// Keys in the order written, so the embedded data reads like the page.
using Json = nlohmann::ordered_json;

// JSON text that can sit inside a <script> element or a CDATA section:
// '<', '>' and '&' only ever occur inside JSON strings, where \u escapes
// mean the same, so "</script>" and "]]>" cannot appear.
std::string embeddable(const Json& j) {
  const std::string text = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') out += "\\u003c";
    else if (c == '>') out += "\\u003e";
    else if (c == '&') out += "\\u0026";
    else out += c;
  }
  return out;
}

Json line_json(const LineChart& chart) {
  Json series = Json::array();
  for (const ChartSeries& s : chart.series) {
    Json points = Json::array();
    // Non-finite values become null (JSON has no NaN); the renderer skips them.
    for (const ChartPoint& p : s.points) points.push_back(Json::array({p.x, p.y, p.generation}));
    series.push_back({{"name", s.name}, {"dots", s.dots}, {"line", s.line}, {"points", std::move(points)}});
  }
  Json markers = Json::array();
  for (const ChartMarker& m : chart.markers) {
    Json marker = {{"x", m.x}, {"label", m.label}, {"text", m.text}};
    if (m.series >= 0) marker["series"] = m.series;
    markers.push_back(std::move(marker));
  }
  return {{"kind", "line"},
          {"title", chart.title},
          {"empty", "no data"},
          {"x", {{"label", chart.x_label}, {"unit", chart.x_unit}, {"integer", chart.integer_x}, {"log2", chart.log2_x}}},
          {"y", {{"label", chart.y_label}, {"unit", chart.y_unit}, {"zero", chart.y_from_zero}, {"percent", chart.percent_y}}},
          {"series", std::move(series)},
          {"markers", std::move(markers)}};
}

Json phases_json(const PhaseBreakdown& b) {
  Json rows = Json::array();
  for (size_t r = 0; r < b.ms_per_step.size(); ++r)
    rows.push_back({{"label", "rank " + std::to_string(r)}, {"values", b.ms_per_step[r]}});
  return {{"kind", "bars"}, {"title", "Time per step by phase, per rank (ms)"}, {"empty", "no data"},
          {"unit", "ms"},   {"categories", b.phases},                            {"rows", std::move(rows)}};
}

Json heatmap_json(const Heatmap& map) {
  Json rows = Json::array();
  for (size_t r = 0; r < map.values.size(); ++r)
    rows.push_back({{"label", r < map.row_labels.size() ? map.row_labels[r] : std::to_string(r)},
                    {"values", map.values[r]}});
  return {{"kind", "heatmap"}, {"title", map.title}, {"empty", "no data"}, {"unit", map.unit},
          {"x_label", map.x_label}, {"columns", map.columns}, {"scale", "range"}, {"rows", std::move(rows)}};
}

Json timeline_json(const Timeline& t) {
  Json marks = Json::array();
  for (const TimelineEvent& e : t.events) marks.push_back({{"t", e.seconds}, {"kind", e.kind}, {"text", e.text}});
  return {{"kind", "timeline"}, {"title", t.title}, {"empty", "no events"}, {"start", 0.0},
          {"end", t.span_seconds}, {"marks", std::move(marks)}};
}

}  // namespace

std::string axis_number(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "inf" : "-inf");
  char text[48];
  const double a = std::abs(v);
  // Each unit starts where three significant digits of the one below would
  // round up to 1000: 999,600 reads "1M", not "1e+03k".
  if (a >= 999.5e9) std::snprintf(text, sizeof text, "%.2e", v);
  else if (a >= 999.5e6) std::snprintf(text, sizeof text, "%.3gG", v / 1e9);
  else if (a >= 999.5e3) std::snprintf(text, sizeof text, "%.3gM", v / 1e6);
  else if (a >= 9999.5) std::snprintf(text, sizeof text, "%.3gk", v / 1e3);
  else if (a >= 1 || a == 0) std::snprintf(text, sizeof text, "%.4g", v);
  else if (a >= 1e-3) std::snprintf(text, sizeof text, "%.3g", v);
  else std::snprintf(text, sizeof text, "%.2g", v);
  return text;
}

Heatmap with_rows_grouped(Heatmap map, size_t max_rows) {
  if (map.values.size() <= max_rows || max_rows == 0) return map;
  const size_t per = (map.values.size() + max_rows - 1) / max_rows;
  Heatmap out = map;
  out.values.clear(), out.row_labels.clear();
  for (size_t first = 0; first < map.values.size(); first += per) {
    const size_t last = std::min(map.values.size(), first + per) - 1;
    std::vector<double> row(map.columns.size(), std::nan(""));
    for (size_t r = first; r <= last; ++r)
      for (size_t c = 0; c < row.size() && c < map.values[r].size(); ++c)
        if (std::isfinite(map.values[r][c]) && !(row[c] >= map.values[r][c])) row[c] = map.values[r][c];
    out.values.push_back(std::move(row));
    out.row_labels.push_back("ranks " + std::to_string(first) + "-" + std::to_string(last));
  }
  out.title += " (largest of each group of " + std::to_string(per) + " ranks)";
  return out;
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

const std::string& charts_js() {
  static const std::string script =
#include "gradmesh/charts_js.inc"
      ;
  return script;
}

std::string chart_data_json(const ReportContent& c) {
  Json charts = Json::array();
  for (const LineChart& chart : c.charts) charts.push_back(line_json(chart));
  if (!c.timeline.events.empty()) charts.push_back(timeline_json(c.timeline));
  if (!c.phases.ms_per_step.empty()) charts.push_back(phases_json(c.phases));
  for (const Heatmap& map : c.heatmaps) charts.push_back(heatmap_json(with_rows_grouped(map, 32)));
  return embeddable(Json{{"charts", std::move(charts)}});
}

std::string chart_data_json(const std::vector<LineChart>& line_charts) {
  Json charts = Json::array();
  for (const LineChart& chart : line_charts) charts.push_back(line_json(chart));
  return embeddable(Json{{"charts", std::move(charts)}});
}

std::string chart_section(const std::string& data_json) {
  return "<div id=\"gradmesh-charts\"></div>\n"
         "<noscript><p class=\"note\">The charts are drawn by this page's script; the data they show is in the "
         "page as JSON (gradmesh-chart-data).</p></noscript>\n"
         "<script type=\"application/json\" id=\"gradmesh-chart-data\">" +
         data_json + "</script>\n<script>\n" + charts_js() +
         "\nGradmeshCharts.renderPage(\"gradmesh-charts\", \"gradmesh-chart-data\");\n</script>\n";
}

std::string standalone_chart_svg(const LineChart& chart, int width, int height) {
  const std::string w = std::to_string(width), h = std::to_string(height);
  // CDATA: the script is XML text here; charts.js and embeddable() never contain "]]>".
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + w + "\" height=\"" + h + "\" viewBox=\"0 0 " + w +
         " " + h + "\" font-family=\"sans-serif\" font-size=\"12\">\n<title>" + html_escape(chart.title) +
         "</title>\n<text class=\"fallback\" x=\"20\" y=\"40\">" + html_escape(chart.title) +
         ": open this file in a web browser to draw the chart.</text>\n<script><![CDATA[\n" + charts_js() +
         "\nGradmeshCharts.drawDocument(" + embeddable(line_json(chart)) + ");\n]]></script>\n</svg>\n";
}

std::string render_report_html(const ReportContent& c) {
  // No rule here styles the charts' text: charts.js colours its own, and a
  // page-wide `svg text` rule would repaint every key in one colour.
  std::string page =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + html_escape(c.title) +
      "</title>\n<style>body{font:14px sans-serif;margin:24px;color:#222;max-width:1180px}"
      "table{border-collapse:collapse;margin:8px 0 16px}td{padding:2px 12px 2px 0}td:first-child{color:#666}"
      ".chart{display:inline-block;vertical-align:top;margin:6px 12px 6px 0}.chart svg{display:block;background:#fff}"
      ".note{background:#fff4d6;padding:6px 10px;margin:4px 0}h2{font-size:16px;margin:18px 0 4px}"
      "table.grid td,table.grid th{border-bottom:1px solid #ddd;padding:3px 14px 3px 0;text-align:right;color:#222}"
      "table.grid td:first-child,table.grid th:first-child{text-align:left}.small{color:#666;font-size:12px}"
      "</style></head><body>\n<h1>" +
      html_escape(c.title) + "</h1>\n<table>";
  for (const auto& [key, value] : c.facts)
    page += "<tr><td>" + html_escape(key) + "</td><td>" + html_escape(value) + "</td></tr>";
  page += "</table>\n";
  for (const std::string& note : c.notes) page += "<div class=\"note\">" + html_escape(note) + "</div>\n";
  for (const ReportTable& table : c.tables) {
    page += "<h2>" + html_escape(table.title) + "</h2>\n<table class=\"grid\"><tr>";
    for (const std::string& h : table.header) page += "<th>" + html_escape(h) + "</th>";
    page += "</tr>";
    for (const auto& row : table.rows) {
      page += "<tr>";
      for (const std::string& cell : row) page += "<td>" + html_escape(cell) + "</td>";
      page += "</tr>";
    }
    page += "</table>\n";
    if (!table.note.empty()) page += "<p class=\"small\">" + html_escape(table.note) + "</p>\n";
  }
  page += chart_section(chart_data_json(c));
  page += "</body></html>\n";
  return page;
}

}  // namespace gradmesh::obs
