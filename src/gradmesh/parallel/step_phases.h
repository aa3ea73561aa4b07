// Where a training step's time goes, per rank, and who is holding the job up.
//
// Each rank adds its phase times up over a log interval; at the log step all
// ranks exchange them (one small all-gather), rank 0 writes the spread to
// metrics.jsonl and the report, and SlowRankDetector flags a straggler.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "gradmesh/comm/process_group.h"

namespace gradmesh::parallel {

enum class Phase { kData, kForward, kBackward, kComm, kOptimizer };
inline constexpr int kPhaseCount = 5;
// "data", "forward", "backward", "comm" (communication the step waited for), "optimizer".
const char* phase_name(Phase phase);

struct PhaseTimes {
  std::array<double, kPhaseCount> seconds{};
  int64_t steps = 0;
  int64_t samples = 0;  // samples this rank computed (its slices), for its throughput
  double loss_sum = 0;  // this rank's share of the summed step losses (gathered with the times)
  // A pipeline stage: seconds from the start of a step's first pass (its
  // wait for the first activations included) to the end of its last pass.
  double pipeline_seconds = 0;
  double& operator[](Phase p) { return seconds[static_cast<size_t>(p)]; }
  double operator[](Phase p) const { return seconds[static_cast<size_t>(p)]; }
  double total() const;
  // Everything but waiting for communication: what makes a rank slow.
  double compute() const { return total() - (*this)[Phase::kComm]; }
};

// Collective: every rank's times, in rank order (a single rank without a group).
std::vector<PhaseTimes> gather_phase_times(comm::ProcessGroup* group, const PhaseTimes& mine);

// The phase among data, forward, backward and optimizer in which `rank`
// spends the most time per step beyond the median over ranks of that phase;
// nullopt when it exceeds the median in none (or `rank` is out of range).
// Communication is left out: a rank waits for the slow one, it does not cause it.
std::optional<Phase> dominant_slow_phase(const std::vector<PhaseTimes>& ranks, int rank);

// Flags a rank whose compute time exceeds the median rank's by `factor` in
// `intervals` consecutive observations (one blip is not a straggler).
class SlowRankDetector {
 public:
  SlowRankDetector(double factor, int intervals) : factor_(factor), intervals_(intervals) {}
  // Returns the rank to flag, once per streak (when the streak reaches `intervals`).
  std::optional<int> observe(const std::vector<PhaseTimes>& ranks);
  // "rank 1 is 1.43x slower than the median rank (compute 12.1 ms/step vs
  // 8.5 ms) for 3 log intervals; the excess is in backward (+2.9 ms/step) and
  // forward (+0.7)".
  std::string describe(const std::vector<PhaseTimes>& ranks, int rank) const;

 private:
  double factor_;
  int intervals_;
  int candidate_ = -1;
  int streak_ = 0;
};

}  // namespace gradmesh::parallel
