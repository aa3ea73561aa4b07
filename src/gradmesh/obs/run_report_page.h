// report.html built from a run's metrics.jsonl (run_log.h): the same page
// whether the run writes it at its end or `gradmesh report RUN_DIR`
// regenerates it later, and the side-by-side page of `gradmesh report A B`.
#pragma once

#include <string>

#include "gradmesh/obs/report_html.h"
#include "gradmesh/obs/run_log.h"

namespace gradmesh::obs {

// Facts, cost table, curves, restart timeline, per-rank phase bars and
// heatmaps over time.
ReportContent report_content(const RunLog& log);

// Two runs side by side: a table of their figures (with B/A), their loss,
// accuracy and throughput curves overlaid, phase times and cost.
// `name_a`/`name_b` label them (their directories).
ReportContent comparison_content(const RunLog& a, const std::string& name_a, const RunLog& b,
                                 const std::string& name_b);

}  // namespace gradmesh::obs
