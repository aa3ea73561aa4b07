// report.html and the other static pages (the comparison of two runs, the
// scaling study): one self-contained file each. This side emits the charts
// as data only, JSON specs; charts.js, the renderer the live dashboard uses
// too, is compiled in and inlined into each page, which draws them in the
// browser. No external files: a page opens from disk, attached to a ticket
// or copied off a cluster.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace gradmesh::obs {

// `generation`: the attempt that wrote the point. The renderer draws, for
// each x, only the latest generation's point: a later generation starting
// at x supersedes the earlier ones' points at or beyond x (steps trained
// again after a restart).
struct ChartPoint {
  double x = 0, y = 0;
  int generation = 0;
};

struct ChartSeries {
  std::string name;
  std::vector<ChartPoint> points;  // in the order they were logged
  bool dots = false;               // a dot on every point
  bool line = true;                // false: dots only (measurements)
};

// A vertical line across the plot at x, labelled ("restart", "knee: 8").
struct ChartMarker {
  double x = 0;
  std::string label, text;  // text: its tooltip
  int series = -1;          // drawn in that series' colour (a compared run's restart); -1: by its label
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<ChartSeries> series;
  bool integer_x = false;  // ticks on whole numbers only (epochs)
  std::string x_unit{}, y_unit{};
  bool log2_x = false;       // ticks at powers of two (workers)
  bool y_from_zero = false;  // throughput: noise must not look like a collapse
  bool percent_y = false;    // a fraction shown as 0-100%
  std::vector<ChartMarker> markers{};
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

// The page's charts as charts.js reads them, {"charts": [spec, ...]} in page
// order: line charts, the timeline, the phase bars, the heatmaps (grouped
// past 32 ranks). Safe inside a <script> element or a CDATA section (<, >
// and & are escaped).
std::string chart_data_json(const ReportContent& content);
std::string chart_data_json(const std::vector<LineChart>& charts);

// charts.js, the renderer, as compiled in.
const std::string& charts_js();

// A page's charts: their container, the data (from chart_data_json) and
// charts.js, all inline.
std::string chart_section(const std::string& data_json);

// One line chart as a standalone SVG document: charts.js draws it when a
// browser opens the file; elsewhere a line of text says so.
std::string standalone_chart_svg(const LineChart& chart, int width, int height);

// An axis label a reader takes in at a glance: 45k, 1.2M, 0.25, 3 (never 4.5e+04).
std::string axis_number(double value);

std::string html_escape(const std::string& text);

}  // namespace gradmesh::obs
