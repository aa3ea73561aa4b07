// Every rank's phase times summed over the logged intervals: the run's
// exposed-communication share in its summary.
#pragma once

#include <vector>

#include "gradmesh/obs/report_html.h"
#include "gradmesh/parallel/step_phases.h"

namespace gradmesh::train {

class PhaseTotals {
 public:
  // One log interval's times of every rank.
  void add_window(const std::vector<parallel::PhaseTimes>& ranks);
  // Per-rank mean time per step in each phase, over the intervals added so far.
  obs::PhaseBreakdown breakdown() const;

 private:
  std::vector<parallel::PhaseTimes> rank_totals_;
};

}  // namespace gradmesh::train
