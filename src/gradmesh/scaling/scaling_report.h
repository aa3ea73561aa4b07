// How `gradmesh bench scaling` shows its study: a Markdown table of the
// probes against the model, the predicted curve with its knee, the same as
// JSON, and a chart (measured points over the predicted curve) drawn by
// charts.js, the renderer of every gradmesh page (obs/report_html.h).
#pragma once

#include <string>
#include <vector>

#include "gradmesh/scaling/cost_model.h"
#include "gradmesh/scaling/probe.h"

namespace gradmesh::scaling {

struct ScalingStudy {
  std::string config;                 // the config probed
  int64_t global_batch = 0;
  std::vector<ProbeMeasurement> probes;
  StepModel here;                     // fitted, on the network the probes ran on
  std::string here_link;              // how that link was found ("gloo on this machine, fitted: ...")
  StepModel target;                   // the same job on the network predicted for
  std::string target_link;
  ScalingCurve curve;                 // `target` for 1 .. the largest N asked
};

std::string scaling_table(const ScalingStudy& study);
std::string scaling_json(const ScalingStudy& study);
// The chart as an SVG file that draws itself with the inlined charts.js when
// a browser opens it (an image viewer that runs no script shows a line of text).
std::string scaling_svg(const ScalingStudy& study);
// One self-contained page (the report of `--report`): the links, the chart
// (charts.js and the data, inline) and the table.
std::string scaling_html(const ScalingStudy& study);

}  // namespace gradmesh::scaling
