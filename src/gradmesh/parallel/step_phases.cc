#include "gradmesh/parallel/step_phases.h"

#include <algorithm>
#include <cstdio>

#include "gradmesh/core/error.h"

namespace gradmesh::parallel {
namespace {

double compute_per_step(const PhaseTimes& t) { return t.compute() / static_cast<double>(std::max<int64_t>(t.steps, 1)); }

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double median_compute(const std::vector<PhaseTimes>& ranks) {
  std::vector<double> per_step;
  for (const PhaseTimes& t : ranks) per_step.push_back(compute_per_step(t));
  return median(std::move(per_step));
}

constexpr Phase kCausePhases[] = {Phase::kData, Phase::kForward, Phase::kBackward, Phase::kOptimizer};

struct PhaseExcess {
  Phase phase;
  double seconds_per_step;
};

// The cause phases in which `rank` exceeds the per-phase median, largest first.
std::vector<PhaseExcess> phase_excesses(const std::vector<PhaseTimes>& ranks, int rank) {
  std::vector<PhaseExcess> out;
  if (rank < 0 || static_cast<size_t>(rank) >= ranks.size()) return out;
  auto per_step = [](const PhaseTimes& t, Phase p) { return t[p] / static_cast<double>(std::max<int64_t>(t.steps, 1)); };
  for (Phase p : kCausePhases) {
    std::vector<double> all;
    for (const PhaseTimes& t : ranks) all.push_back(per_step(t, p));
    const double excess = per_step(ranks[static_cast<size_t>(rank)], p) - median(std::move(all));
    if (excess > 0) out.push_back({p, excess});
  }
  // Stable: equal excesses keep the phase order, so the wording is deterministic.
  std::stable_sort(out.begin(), out.end(),
                   [](const PhaseExcess& a, const PhaseExcess& b) { return a.seconds_per_step > b.seconds_per_step; });
  return out;
}

}  // namespace

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kData: return "data";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kComm: return "comm";
    case Phase::kOptimizer: return "optimizer";
  }
  return "?";
}

double PhaseTimes::total() const {
  double sum = 0;
  for (double s : seconds) sum += s;
  return sum;
}

std::vector<PhaseTimes> gather_phase_times(comm::ProcessGroup* group, const PhaseTimes& mine) {
  if (!group || group->size() == 1) return {mine};
  const int n = group->size();
  constexpr int kFields = kPhaseCount + 4;
  Tensor local = Tensor::empty({kFields});
  for (int p = 0; p < kPhaseCount; ++p) local.data()[p] = static_cast<float>(mine.seconds[static_cast<size_t>(p)]);
  local.data()[kPhaseCount] = static_cast<float>(mine.steps);
  local.data()[kPhaseCount + 1] = static_cast<float>(mine.loss_sum);
  local.data()[kPhaseCount + 2] = static_cast<float>(mine.samples);  // exact below 2^24 per log interval
  local.data()[kPhaseCount + 3] = static_cast<float>(mine.pipeline_seconds);
  Tensor all = Tensor::empty({n * kFields});
  auto work = group->allgather(local, all);
  work->wait_or_throw();
  std::vector<PhaseTimes> out(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const float* src = all.data() + r * kFields;
    for (int p = 0; p < kPhaseCount; ++p) out[static_cast<size_t>(r)].seconds[static_cast<size_t>(p)] = src[p];
    out[static_cast<size_t>(r)].steps = static_cast<int64_t>(src[kPhaseCount]);
    out[static_cast<size_t>(r)].loss_sum = src[kPhaseCount + 1];
    out[static_cast<size_t>(r)].samples = static_cast<int64_t>(src[kPhaseCount + 2]);
    out[static_cast<size_t>(r)].pipeline_seconds = src[kPhaseCount + 3];
  }
  return out;
}

std::optional<Phase> dominant_slow_phase(const std::vector<PhaseTimes>& ranks, int rank) {
  const std::vector<PhaseExcess> excesses = phase_excesses(ranks, rank);
  if (excesses.empty()) return std::nullopt;
  return excesses.front().phase;
}

std::optional<int> SlowRankDetector::observe(const std::vector<PhaseTimes>& ranks) {
  if (ranks.size() < 2) return std::nullopt;
  const double median = median_compute(ranks);
  int slowest = 0;
  for (size_t r = 1; r < ranks.size(); ++r)
    if (compute_per_step(ranks[r]) > compute_per_step(ranks[static_cast<size_t>(slowest)])) slowest = static_cast<int>(r);
  const bool slow = median > 0 && compute_per_step(ranks[static_cast<size_t>(slowest)]) > factor_ * median;
  if (!slow) {
    candidate_ = -1;
    streak_ = 0;
    return std::nullopt;
  }
  streak_ = slowest == candidate_ ? streak_ + 1 : 1;
  candidate_ = slowest;
  if (streak_ == intervals_) return slowest;
  return std::nullopt;
}

std::string SlowRankDetector::describe(const std::vector<PhaseTimes>& ranks, int rank) const {
  const double median = median_compute(ranks), mine = compute_per_step(ranks.at(static_cast<size_t>(rank)));
  char text[200];
  std::snprintf(text, sizeof text,
                "rank %d is %.2fx slower than the median rank (compute %.1f ms/step vs %.1f ms) for %d log intervals",
                rank, median > 0 ? mine / median : 0.0, mine * 1e3, median * 1e3, intervals_);
  std::string out = text;
  const std::vector<PhaseExcess> excesses = phase_excesses(ranks, rank);
  if (excesses.empty()) return out;
  std::snprintf(text, sizeof text, "; the excess is in %s (+%.1f ms/step)", phase_name(excesses[0].phase),
                excesses[0].seconds_per_step * 1e3);
  out += text;
  // A second phase only when it is a real part of the excess, not rounding noise.
  if (excesses.size() > 1 && excesses[1].seconds_per_step >= 0.1 * excesses[0].seconds_per_step) {
    std::snprintf(text, sizeof text, " and %s (+%.1f)", phase_name(excesses[1].phase), excesses[1].seconds_per_step * 1e3);
    out += text;
  }
  return out;
}

}  // namespace gradmesh::parallel
