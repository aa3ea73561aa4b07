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
  bool integer_x = false;  // ticks on whole numbers only (epochs)
};

// Per-rank time per step, split into phases (a stacked bar per rank).
struct PhaseBreakdown {
  std::vector<std::string> phases;           // legend order
  std::vector<std::vector<double>> ms_per_step;  // [rank][phase]
};

// A value per row and column as coloured cells: ranks (rows) over log
// intervals (columns), so a slow rank is a dark row.
struct Heatmap {
  std::string title, x_label, unit;
  std::vector<std::string> row_labels;
  std::vector<double> columns;               // each column's x (a step)
  std::vector<std::vector<double>> values;   // [row][column]; NaN: no value
};

// Rows grouped so at most `max_rows` remain, each the largest of its group
// (a straggler keeps its colour), labelled "ranks a-b".
Heatmap with_rows_grouped(Heatmap map, size_t max_rows);

struct TimelineEvent {
  double seconds = 0;  // from the start of the run
  std::string kind;    // "restart", "checkpoint", "slow rank", "resume", "stopped", "finished"
  std::string text;
};

struct Timeline {
  std::string title;
  double span_seconds = 0;
  std::vector<TimelineEvent> events;
};

struct ReportTable {
  std::string title;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::string note;  // under the table
};

struct ReportContent {
  std::string title;
  std::vector<std::pair<std::string, std::string>> facts;  // a two-column table under the title
  std::vector<LineChart> charts;
  PhaseBreakdown phases;
  std::vector<std::string> notes;  // warnings worth reading (slow ranks, ...)
  std::vector<ReportTable> tables;  // after the facts: cost, comparisons
  std::vector<Heatmap> heatmaps;
  Timeline timeline;                // drawn when it has events
};

// The whole page. Text is HTML-escaped; empty charts say "no data" instead of drawing.
std::string render_report_html(const ReportContent& content);

// The SVG of one chart (exposed for tests).
std::string render_line_chart_svg(const LineChart& chart);
std::string render_phase_chart_svg(const PhaseBreakdown& breakdown);
std::string render_heatmap_svg(const Heatmap& map);
std::string render_timeline_svg(const Timeline& timeline);

// An axis label a reader takes in at a glance: 45k, 1.2M, 0.25, 3 (never 4.5e+04).
std::string axis_number(double value);

std::string html_escape(const std::string& text);

}  // namespace gradmesh::obs
