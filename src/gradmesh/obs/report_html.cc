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

// About five round tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  const double span = hi - lo;
  const double raw = span / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {2.0, 5.0, 10.0})
    if (raw > step) step = m * magnitude;
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
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

}  // namespace

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
           num(t) + "</text>";
  for (double t : ticks(x0, x1))
    svg += "<text x=\"" + px(sx(t)) + "\" y=\"" + px(kTop + ph + 16) + "\" text-anchor=\"middle\">" + num(t) + "</text>";
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
      ".note{background:#fff4d6;padding:6px 10px;margin:4px 0}"
      "</style></head><body>\n<h1>" +
      html_escape(c.title) + "</h1>\n<table>";
  for (const auto& [key, value] : c.facts)
    page += "<tr><td>" + html_escape(key) + "</td><td>" + html_escape(value) + "</td></tr>";
  page += "</table>\n";
  for (const std::string& note : c.notes) page += "<div class=\"note\">" + html_escape(note) + "</div>\n";
  page += "<div>\n";
  for (const LineChart& chart : c.charts) page += render_line_chart_svg(chart) + "\n";
  page += render_phase_chart_svg(c.phases) + "\n</div>\n</body></html>\n";
  return page;
}

}  // namespace gradmesh::obs
