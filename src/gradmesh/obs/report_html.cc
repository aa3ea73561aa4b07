#include "gradmesh/obs/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace gradmesh::obs {
namespace {

constexpr double kWidth = 560, kHeight = 260, kLeft = 64, kRight = 16, kTop = 28, kBottom = 44;
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

std::string px(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

// About five round tick values covering [lo, hi]; whole numbers only when `integer`.
std::vector<double> ticks(double lo, double hi, bool integer = false) {
  const double span = hi - lo;
  const double raw = span / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {2.0, 5.0, 10.0})
    if (raw > step) step = m * magnitude;
  if (integer) step = std::max(1.0, std::round(step));
  std::vector<double> out;
  if (!(step > 0) || !std::isfinite(step)) return out;
  // By index, not by adding the step: a step below the values' precision
  // would never move them. About five ticks; never more than a dozen.
  const double first = std::ceil(lo / step) * step;
  for (int i = 0; i < 12; ++i) {
    const double t = first + i * step;
    if (t > hi + step * 1e-9) break;
    out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  }
  return out;
}

std::string svg_open(const std::string& title, double height) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(kWidth) + "\" height=\"" + px(height) +
         "\" viewBox=\"0 0 " + px(kWidth) + " " + px(height) + "\" role=\"img\"><title>" + html_escape(title) +
         "</title><text x=\"" + px(kWidth / 2) + "\" y=\"18\" text-anchor=\"middle\" class=\"t\">" + html_escape(title) +
         "</text>";
}

std::string no_data(const std::string& title) {
  return svg_open(title, 80) + "<text x=\"" + px(kWidth / 2) + "\" y=\"50\" text-anchor=\"middle\">no data</text></svg>";
}

// White through amber to dark red, for t in [0, 1].
std::string heat_colour(double t) {
  t = std::clamp(t, 0.0, 1.0);
  const double r = 255 - 80 * t, g = 250 - 210 * t, b = 235 - 215 * t;
  char text[16];
  std::snprintf(text, sizeof text, "#%02x%02x%02x", static_cast<int>(r), static_cast<int>(g), static_cast<int>(b));
  return text;
}

const char* event_colour(const std::string& kind) {
  if (kind == "restart") return "#d62728";
  if (kind == "slow rank") return "#e6a100";
  if (kind == "checkpoint") return "#7f7f7f";
  if (kind == "resume") return "#1f77b4";
  if (kind == "finished") return "#2ca02c";
  return "#9467bd";
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

std::string render_heatmap_svg(const Heatmap& map) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& row : map.values)
    for (double v : row)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!std::isfinite(lo) || map.columns.empty()) return no_data(map.title);
  const double cell_h = map.values.size() > 16 ? 10 : 18, label_w = 90;
  const double height = kTop + 20 + static_cast<double>(map.values.size()) * cell_h + 40;
  const double pw = kWidth - label_w - kRight, cell_w = pw / static_cast<double>(map.columns.size());
  std::string svg = svg_open(map.title, height);
  for (size_t r = 0; r < map.values.size(); ++r) {
    const double y = kTop + 10 + static_cast<double>(r) * cell_h;
    if (map.values.size() <= 16 || r % 4 == 0)
      svg += "<text x=\"" + px(label_w - 6) + "\" y=\"" + px(y + cell_h - 3) + "\" text-anchor=\"end\">" +
             html_escape(r < map.row_labels.size() ? map.row_labels[r] : std::to_string(r)) + "</text>";
    for (size_t c = 0; c < map.columns.size() && c < map.values[r].size(); ++c) {
      const double v = map.values[r][c];
      if (!std::isfinite(v)) continue;
      const double t = hi > lo ? (v - lo) / (hi - lo) : 0.0;
      svg += "<rect x=\"" + px(label_w + static_cast<double>(c) * cell_w) + "\" y=\"" + px(y) + "\" width=\"" +
             px(std::max(cell_w, 1.0)) + "\" height=\"" + px(cell_h) + "\" fill=\"" + heat_colour(t) + "\"><title>" +
             html_escape(r < map.row_labels.size() ? map.row_labels[r] : std::to_string(r)) + ", " +
             html_escape(map.x_label) + " " + axis_number(map.columns[c]) + ": " + num(v) + " " +
             html_escape(map.unit) + "</title></rect>";
    }
  }
  const double axis_y = kTop + 10 + static_cast<double>(map.values.size()) * cell_h;
  const size_t label_every = std::max<size_t>(1, map.columns.size() / 6);
  for (size_t c = 0; c < map.columns.size(); c += label_every)
    svg += "<text x=\"" + px(label_w + (static_cast<double>(c) + 0.5) * cell_w) + "\" y=\"" + px(axis_y + 14) +
           "\" text-anchor=\"middle\">" + axis_number(map.columns[c]) + "</text>";
  svg += "<text x=\"" + px(label_w + pw / 2) + "\" y=\"" + px(axis_y + 30) + "\" text-anchor=\"middle\">" +
         html_escape(map.x_label) + "; colour from " + num(lo) + " to " + num(hi) + " " + html_escape(map.unit) +
         "</text>";
  return svg + "</svg>";
}

std::string render_timeline_svg(const Timeline& t) {
  if (t.events.empty()) return no_data(t.title);
  const double height = 110, pw = kWidth - kLeft - kRight, base = 70;
  const double span = std::max(t.span_seconds, 1e-9);
  std::string svg = svg_open(t.title, height);
  svg += "<line x1=\"" + px(kLeft) + "\" x2=\"" + px(kLeft + pw) + "\" y1=\"" + px(base) + "\" y2=\"" + px(base) +
         "\" stroke=\"#999\"/>";
  for (double tick : ticks(0, span))
    svg += "<text x=\"" + px(kLeft + tick / span * pw) + "\" y=\"" + px(base + 16) +
           "\" text-anchor=\"middle\">" + axis_number(tick) + "</text>";
  svg += "<text x=\"" + px(kLeft + pw / 2) + "\" y=\"" + px(base + 32) +
         "\" text-anchor=\"middle\">seconds since the run started</text>";
  std::vector<std::string> kinds;
  for (const TimelineEvent& e : t.events) {
    const double x = kLeft + std::clamp(e.seconds / span, 0.0, 1.0) * pw;
    const bool major = e.kind == "restart" || e.kind == "finished" || e.kind == "stopped";
    svg += "<line x1=\"" + px(x) + "\" x2=\"" + px(x) + "\" y1=\"" + px(base - (major ? 30 : 14)) + "\" y2=\"" +
           px(base) + "\" stroke=\"" + event_colour(e.kind) + "\" stroke-width=\"" + (major ? "3" : "1.5") +
           "\"><title>" + axis_number(e.seconds) + " s: " + html_escape(e.text) + "</title></line>";
    if (std::find(kinds.begin(), kinds.end(), e.kind) == kinds.end()) kinds.push_back(e.kind);
  }
  for (size_t i = 0; i < kinds.size(); ++i)
    svg += "<text x=\"" + px(kLeft + static_cast<double>(i) * 90) + "\" y=\"" + px(kTop + 6) + "\" fill=\"" +
           event_colour(kinds[i]) + "\">" + html_escape(kinds[i]) + "</text>";
  return svg + "</svg>";
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

std::string render_line_chart_svg(const LineChart& chart) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const ChartSeries& s : chart.series)
    for (auto [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) {
        x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
      }
  if (!std::isfinite(x0)) return no_data(chart.title);
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) y0 -= std::max(1e-9, std::abs(y0) * 0.05), y1 += std::max(1e-9, std::abs(y1) * 0.05);
  const double margin = (y1 - y0) * 0.05;  // keep the lines off the frame
  y0 -= margin, y1 += margin;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto sx = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto sy = [&](double y) { return kTop + ph - (y - y0) / (y1 - y0) * ph; };
  std::string svg = svg_open(chart.title, kHeight);
  svg += "<rect x=\"" + px(kLeft) + "\" y=\"" + px(kTop) + "\" width=\"" + px(pw) + "\" height=\"" + px(ph) +
         "\" fill=\"none\" stroke=\"#999\"/>";
  for (double t : ticks(y0, y1))
    svg += "<line x1=\"" + px(kLeft) + "\" x2=\"" + px(kLeft + pw) + "\" y1=\"" + px(sy(t)) + "\" y2=\"" + px(sy(t)) +
           "\" stroke=\"#eee\"/><text x=\"" + px(kLeft - 6) + "\" y=\"" + px(sy(t) + 4) + "\" text-anchor=\"end\">" +
           axis_number(t) + "</text>";
  for (double t : ticks(x0, x1, chart.integer_x))
    svg += "<text x=\"" + px(sx(t)) + "\" y=\"" + px(kTop + ph + 16) + "\" text-anchor=\"middle\">" + axis_number(t) +
           "</text>";
  svg += "<text x=\"" + px(kLeft + pw / 2) + "\" y=\"" + px(kHeight - 6) + "\" text-anchor=\"middle\">" +
         html_escape(chart.x_label) + "</text>";
  svg += "<text transform=\"translate(14 " + px(kTop + ph / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
         html_escape(chart.y_label) + "</text>";
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const ChartSeries& s = chart.series[i];
    const char* color = kColors[i % std::size(kColors)];
    std::string points;
    for (auto [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) points += px(sx(x)) + "," + px(sy(y)) + " ";
    svg += "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"1.6\" points=\"" + points + "\"/>";
    if (s.points.size() <= 30)  // few points (per-epoch values): mark each one
      for (auto [x, y] : s.points)
        if (std::isfinite(x) && std::isfinite(y))
          svg += "<circle cx=\"" + px(sx(x)) + "\" cy=\"" + px(sy(y)) + "\" r=\"3\" fill=\"" + color + "\"/>";
    if (chart.series.size() > 1)
      svg += "<text x=\"" + px(kLeft + 8) + "\" y=\"" + px(kTop + 14 + 14 * static_cast<double>(i)) + "\" fill=\"" +
             color + "\">" + html_escape(s.name) + "</text>";
  }
  return svg + "</svg>";
}

std::string render_phase_chart_svg(const PhaseBreakdown& b) {
  const std::string title = "Time per step by phase, per rank (ms)";
  if (b.ms_per_step.empty() || b.phases.empty()) return no_data(title);
  double longest = 0;
  for (const auto& rank : b.ms_per_step) {
    double sum = 0;
    for (double v : rank) sum += std::max(0.0, v);
    longest = std::max(longest, sum);
  }
  if (longest <= 0) return no_data(title);
  const double bar = 22, gap = 8, legend = 24;
  const double height = kTop + legend + static_cast<double>(b.ms_per_step.size()) * (bar + gap) + 30;
  const double pw = kWidth - kLeft - kRight;
  std::string svg = svg_open(title, height);
  for (size_t p = 0; p < b.phases.size(); ++p) {
    const double lx = kLeft + static_cast<double>(p) * 96;
    svg += "<rect x=\"" + px(lx) + "\" y=\"" + px(kTop) + "\" width=\"10\" height=\"10\" fill=\"" +
           kColors[p % std::size(kColors)] + "\"/><text x=\"" + px(lx + 14) + "\" y=\"" + px(kTop + 9) + "\">" +
           html_escape(b.phases[p]) + "</text>";
  }
  for (size_t r = 0; r < b.ms_per_step.size(); ++r) {
    const double y = kTop + legend + static_cast<double>(r) * (bar + gap);
    svg += "<text x=\"" + px(kLeft - 6) + "\" y=\"" + px(y + bar / 2 + 4) + "\" text-anchor=\"end\">rank " +
           std::to_string(r) + "</text>";
    double x = kLeft, sum = 0;
    for (size_t p = 0; p < b.ms_per_step[r].size() && p < b.phases.size(); ++p) {
      const double v = std::max(0.0, b.ms_per_step[r][p]), w = v / longest * (pw - 60);
      svg += "<rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" + px(w) + "\" height=\"" + px(bar) + "\" fill=\"" +
             kColors[p % std::size(kColors)] + "\"><title>rank " + std::to_string(r) + " " + html_escape(b.phases[p]) +
             ": " + num(v) + " ms</title></rect>";
      x += w;
      sum += v;
    }
    svg += "<text x=\"" + px(x + 4) + "\" y=\"" + px(y + bar / 2 + 4) + "\">" + num(sum) + "</text>";
  }
  return svg + "</svg>";
}

std::string render_report_html(const ReportContent& c) {
  std::string page =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + html_escape(c.title) +
      "</title>\n<style>body{font:14px sans-serif;margin:24px;color:#222;max-width:1180px}"
      "table{border-collapse:collapse;margin:8px 0 16px}td{padding:2px 12px 2px 0}td:first-child{color:#666}"
      "svg{margin:6px 12px 6px 0;background:#fff}svg text{font:11px sans-serif;fill:#333}svg .t{font:bold 13px sans-serif}"
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
  page += "<div>\n";
  for (const LineChart& chart : c.charts) page += render_line_chart_svg(chart) + "\n";
  if (!c.timeline.events.empty()) page += render_timeline_svg(c.timeline) + "\n";
  if (!c.phases.ms_per_step.empty()) page += render_phase_chart_svg(c.phases) + "\n";
  for (const Heatmap& map : c.heatmaps) page += render_heatmap_svg(with_rows_grouped(map, 32)) + "\n";
  page += "</div>\n</body></html>\n";
  return page;
}

}  // namespace gradmesh::obs
