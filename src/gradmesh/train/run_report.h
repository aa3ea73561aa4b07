// What a run's report.html shows, collected as the run goes (rank 0 only).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gradmesh/obs/report_html.h"
#include "gradmesh/parallel/step_phases.h"

namespace gradmesh::train {

class RunReport {
 public:
  void add_fact(const std::string& key, const std::string& value) { facts_.emplace_back(key, value); }
  void add_note(const std::string& note) { notes_.push_back(note); }
  // One log interval ending at `step`: mean loss and throughput over it.
  void add_step(int64_t step, double loss, double samples_per_s);
  void add_epoch(int64_t epoch, double test_loss, double test_accuracy);
  // One log interval's times of every rank; the report shows their sum per step.
  void add_phase_window(const std::vector<parallel::PhaseTimes>& ranks);

  // Per-rank mean time per step in each phase, over the intervals added so far.
  obs::PhaseBreakdown phase_breakdown() const;
  // Writes the page atomically; Error(kIo) naming the path.
  void write(const std::string& path, const std::string& title) const;

 private:
  std::vector<std::pair<std::string, std::string>> facts_;
  std::vector<std::string> notes_;
  obs::ChartSeries loss_{"train loss", {}}, throughput_{"samples/s", {}};
  obs::ChartSeries test_loss_{"test loss", {}}, test_accuracy_{"test accuracy", {}};
  std::vector<parallel::PhaseTimes> rank_totals_;
};

}  // namespace gradmesh::train
