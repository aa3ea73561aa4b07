#include "gradmesh/train/phase_totals.h"

namespace gradmesh::train {

void PhaseTotals::add_window(const std::vector<parallel::PhaseTimes>& ranks) {
  if (rank_totals_.size() < ranks.size()) rank_totals_.resize(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (size_t p = 0; p < ranks[r].seconds.size(); ++p) rank_totals_[r].seconds[p] += ranks[r].seconds[p];
    rank_totals_[r].steps += ranks[r].steps;
  }
}

obs::PhaseBreakdown PhaseTotals::breakdown() const {
  obs::PhaseBreakdown b;
  for (int p = 0; p < parallel::kPhaseCount; ++p) b.phases.emplace_back(parallel::phase_name(static_cast<parallel::Phase>(p)));
  for (const parallel::PhaseTimes& t : rank_totals_) {
    std::vector<double> row;
    for (double s : t.seconds) row.push_back(t.steps ? s * 1e3 / static_cast<double>(t.steps) : 0.0);
    b.ms_per_step.push_back(std::move(row));
  }
  return b;
}

}  // namespace gradmesh::train
