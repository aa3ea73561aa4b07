#include "gradmesh/train/run_report.h"

#include "gradmesh/core/atomic_file.h"

namespace gradmesh::train {

void RunReport::add_step(int64_t step, double loss, double samples_per_s) {
  loss_.points.emplace_back(static_cast<double>(step), loss);
  throughput_.points.emplace_back(static_cast<double>(step), samples_per_s);
}

void RunReport::add_epoch(int64_t epoch, double test_loss, double test_accuracy) {
  test_loss_.points.emplace_back(static_cast<double>(epoch + 1), test_loss);
  test_accuracy_.points.emplace_back(static_cast<double>(epoch + 1), test_accuracy);
}

void RunReport::add_phase_window(const std::vector<parallel::PhaseTimes>& ranks) {
  if (rank_totals_.size() < ranks.size()) rank_totals_.resize(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (size_t p = 0; p < ranks[r].seconds.size(); ++p) rank_totals_[r].seconds[p] += ranks[r].seconds[p];
    rank_totals_[r].steps += ranks[r].steps;
  }
}

obs::PhaseBreakdown RunReport::phase_breakdown() const {
  obs::PhaseBreakdown b;
  for (int p = 0; p < parallel::kPhaseCount; ++p) b.phases.emplace_back(parallel::phase_name(static_cast<parallel::Phase>(p)));
  for (const parallel::PhaseTimes& t : rank_totals_) {
    std::vector<double> row;
    for (double s : t.seconds) row.push_back(t.steps ? s * 1e3 / static_cast<double>(t.steps) : 0.0);
    b.ms_per_step.push_back(std::move(row));
  }
  return b;
}

void RunReport::write(const std::string& path, const std::string& title) const {
  obs::ReportContent content;
  content.title = title;
  content.facts = facts_;
  content.notes = notes_;
  content.charts = {{"Training loss", "step", "loss", {loss_}},
                    {"Test accuracy", "epoch", "accuracy", {test_accuracy_}},
                    {"Throughput", "step", "samples/s", {throughput_}},
                    {"Test loss", "epoch", "loss", {test_loss_}}};
  content.phases = phase_breakdown();
  write_file_atomically(path, obs::render_report_html(content));
}

}  // namespace gradmesh::train
