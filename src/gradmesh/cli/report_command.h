// `gradmesh report RUN_DIR` regenerates RUN_DIR/report.html from the run's
// metrics.jsonl; `gradmesh report RUN_A RUN_B` writes a page comparing two
// runs (loss, throughput, phase times, cost) side by side. A path may also
// name a metrics.jsonl file. Nothing else in a run directory is touched, and
// the page is written atomically.
#pragma once

#include <string>
#include <vector>

namespace gradmesh::cli {

struct ReportArgs {
  std::vector<std::string> runs;  // one or two
  std::string output;             // empty: RUN_DIR/report.html, or compare.html for two runs
};

int run_report(const ReportArgs& args);

}  // namespace gradmesh::cli
