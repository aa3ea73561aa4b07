// report.html: one self-contained page summarising a run, with inline SVG
// charts (no scripts, no external files), so it opens from disk in any
// browser, attached to a ticket or copied off a cluster.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace gradmesh::obs {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<ChartSeries> series;
};

// Per-rank time per step, split into phases (a stacked bar per rank).
struct PhaseBreakdown {
  std::vector<std::string> phases;           // legend order
  std::vector<std::vector<double>> ms_per_step;  // [rank][phase]
};

struct ReportContent {
  std::string title;
  std::vector<std::pair<std::string, std::string>> facts;  // a two-column table under the title
  std::vector<LineChart> charts;
  PhaseBreakdown phases;
  std::vector<std::string> notes;  // warnings worth reading (slow ranks, ...)
};

// The whole page. Text is HTML-escaped; empty charts say "no data" instead of drawing.
std::string render_report_html(const ReportContent& content);

// The SVG of one chart (exposed for tests).
std::string render_line_chart_svg(const LineChart& chart);
std::string render_phase_chart_svg(const PhaseBreakdown& breakdown);

std::string html_escape(const std::string& text);

}  // namespace gradmesh::obs
