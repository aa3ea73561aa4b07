// Straggler mitigation: how much of each global batch every rank computes.
//
// A rank that computes slower (a throttled or busier machine) holds every
// step up, because all ranks wait for its gradients. The balancer gives each
// rank a share of the global batch proportional to its measured throughput
// (samples per second of compute, communication waits excluded), so the ranks
// finish their slices at about the same time. The global batch, its order and
// the maths of the step do not change (losses are divided by the global batch
// length); only who computes which samples does, and with it the order of
// float summation, so rebalanced runs are not bit-reproducible.
//
// Every rank feeds the same gathered PhaseTimes to its own balancer and gets
// the same shares (a pure function of identical inputs), so no extra
// communication is needed to agree on the split.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "gradmesh/parallel/step_phases.h"

namespace gradmesh::parallel {

// Shares are integers whose sum is about kShareTotal (exactly
// world * (kShareTotal / world)); rank r computes shares[r] / sum of each batch.
inline constexpr int64_t kShareTotal = 1'000'000;

struct SplitBalancerOptions {
  // Fraction of the way from the current shares to the measured target moved
  // per observation: damps noise and the effect of the change on the next
  // measurement. SplitBalancer halves it (down to min_step) whenever a move
  // reverses the previous one and doubles it back (up to step) while moves
  // keep their direction; see SplitBalancer.
  double step = 0.5;
  double min_step = 1.0 / 16;
  // No change unless some rank's target differs from its current share by
  // more than this fraction of the equal share (noise must not churn the split).
  double dead_band = 0.05;
  // No rank's share drops below this fraction of the equal share, so a rank
  // that was slow once keeps samples and keeps being measured.
  double min_share = 0.05;
};

// kShareTotal / world for every rank: equal values, so rank_slice_weighted
// cuts exactly like rank_slice.
// REQUIRES: world >= 1 (kInternal otherwise).
std::vector<int64_t> equal_shares(int world);

// The shares for the next interval from the current ones and every rank's
// times over the last interval (in rank order, with `samples` filled in).
// Returns `current` itself when no rank is outside the dead band. A rank that
// computed no samples (or no time) has no throughput to measure: it keeps its
// share and the others divide the rest. The sum of the shares is kept.
// Moves options.step of the way to the target.
// REQUIRES: ranks.size() == current.size() >= 1, current >= 0 with a sum in
// (0, kShareTotal], options.step in (0, 1], dead_band in [0, 1), min_share in
// [0, 1] (kInternal otherwise).
std::vector<int64_t> rebalanced_shares(const std::vector<PhaseTimes>& ranks, const std::vector<int64_t>& current,
                                       const SplitBalancerOptions& options);

// The current shares of a job and their update at each log interval.
//
// Why the adaptive step: a rank slowed by a CPU quota or a busy neighbour
// (cgroup cpu.max, another job on its cores) is slow only while it is
// saturated. Given slightly less than it can handle it finishes early, runs at
// full speed and measures as fast as the others, so the measured target jumps
// back to an even split; a fixed step then oscillates around the right split
// and loses a good part of the gain. Halving the step at each reversal makes
// the moves shrink onto the balance point (within the dead band), and doubling
// it while moves keep their direction keeps the response quick when the
// speeds really change.
class SplitBalancer {
 public:
  explicit SplitBalancer(int world, SplitBalancerOptions options = {});
  // The new shares when they changed, nullopt otherwise.
  std::optional<std::vector<int64_t>> observe(const std::vector<PhaseTimes>& ranks);
  const std::vector<int64_t>& shares() const { return shares_; }

 private:
  SplitBalancerOptions options_;
  std::vector<int64_t> shares_;
  double step_;                   // the adaptive step, in [options_.min_step, options_.step]
  std::vector<int> last_move_;    // per rank: -1, +1, or 0 before its first move
};

}  // namespace gradmesh::parallel
