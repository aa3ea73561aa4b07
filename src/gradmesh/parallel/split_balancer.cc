#include "gradmesh/parallel/split_balancer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "gradmesh/core/error.h"

namespace gradmesh::parallel {
namespace {

void check_inputs(const std::vector<PhaseTimes>& ranks, const std::vector<int64_t>& current,
                  const SplitBalancerOptions& o) {
  GRADMESH_CHECK(!current.empty() && ranks.size() == current.size(),
                 "split balancer: " + std::to_string(ranks.size()) + " ranks' times for " +
                     std::to_string(current.size()) + " shares");
  int64_t sum = 0;
  for (int64_t s : current) {
    GRADMESH_CHECK(s >= 0, "split balancer: negative share " + std::to_string(s));
    sum += s;
  }
  GRADMESH_CHECK(sum > 0 && sum <= kShareTotal, "split balancer: the current shares sum to " + std::to_string(sum));
  GRADMESH_CHECK(o.step > 0 && o.step <= 1 && o.dead_band >= 0 && o.dead_band < 1 && o.min_share >= 0 &&
                     o.min_share <= 1,
                 "split balancer: options out of range");
}

// Raises every share below `floor` to it and takes the difference from the
// shares above it, in proportion to their excess over the floor, so the sum stays.
void apply_floor(std::vector<double>& shares, double floor) {
  double deficit = 0, spare = 0;
  for (double s : shares) {
    if (s < floor) deficit += floor - s;
    else spare += s - floor;
  }
  if (deficit <= 0 || spare <= 0) return;
  for (double& s : shares) s = s < floor ? floor : s - (s - floor) * (deficit / spare);
}

// Rounds to integers summing exactly to `total`: the rounding error goes to
// the largest share (lowest rank on ties), where it matters least.
std::vector<int64_t> rounded(const std::vector<double>& shares, int64_t total) {
  std::vector<int64_t> out;
  int64_t sum = 0;
  for (double s : shares) sum += out.emplace_back(std::llround(s));
  const auto largest = std::max_element(out.begin(), out.end());
  *largest += total - sum;
  return out;
}

}  // namespace

std::vector<int64_t> equal_shares(int world) {
  GRADMESH_CHECK(world >= 1, "equal_shares: world " + std::to_string(world));
  return std::vector<int64_t>(static_cast<size_t>(world), kShareTotal / world);
}

std::vector<int64_t> rebalanced_shares(const std::vector<PhaseTimes>& ranks, const std::vector<int64_t>& current,
                                       const SplitBalancerOptions& options) {
  check_inputs(ranks, current, options);
  const size_t world = current.size();
  // Measured ranks divide their current shares in proportion to throughput.
  double measured_share = 0, throughput_sum = 0;
  std::vector<double> throughput(world, -1.0);  // -1: not measured
  for (size_t r = 0; r < world; ++r) {
    const double compute = ranks[r].compute();
    if (ranks[r].samples <= 0 || !(compute > 0)) continue;
    throughput[r] = static_cast<double>(ranks[r].samples) / compute;
    throughput_sum += throughput[r];
    measured_share += static_cast<double>(current[r]);
  }
  int64_t total = 0;
  for (int64_t s : current) total += s;
  const double equal = static_cast<double>(total) / static_cast<double>(world);
  std::vector<double> next(world);
  bool outside_dead_band = false;
  for (size_t r = 0; r < world; ++r) {
    const auto now = static_cast<double>(current[r]);
    const double target = throughput[r] < 0 ? now : measured_share * throughput[r] / throughput_sum;
    if (std::abs(target - now) > options.dead_band * equal) outside_dead_band = true;
    next[r] = now + options.step * (target - now);
  }
  if (!outside_dead_band) return current;
  apply_floor(next, options.min_share * equal);
  return rounded(next, total);
}

SplitBalancer::SplitBalancer(int world, SplitBalancerOptions options)
    : options_(options), shares_(equal_shares(world)), step_(options.step),
      last_move_(static_cast<size_t>(world), 0) {
  GRADMESH_CHECK(options.min_step > 0 && options.min_step <= options.step, "split balancer: min_step out of range");
}

std::optional<std::vector<int64_t>> SplitBalancer::observe(const std::vector<PhaseTimes>& ranks) {
  SplitBalancerOptions now = options_;
  now.step = step_;
  std::vector<int64_t> next = rebalanced_shares(ranks, shares_, now);
  if (next == shares_) return std::nullopt;
  bool reverses = false;
  for (size_t r = 0; r < shares_.size(); ++r) {
    const int move = next[r] > shares_[r] ? 1 : next[r] < shares_[r] ? -1 : 0;
    if (move != 0 && last_move_[r] != 0 && move != last_move_[r]) reverses = true;
  }
  if (reverses) {
    step_ = std::max(step_ / 2, options_.min_step);
    now.step = step_;
    next = rebalanced_shares(ranks, shares_, now);
  } else {
    step_ = std::min(step_ * 2, options_.step);  // for the next move
  }
  for (size_t r = 0; r < shares_.size(); ++r)
    if (next[r] != shares_[r]) last_move_[r] = next[r] > shares_[r] ? 1 : -1;
  if (next == shares_) return std::nullopt;
  shares_ = std::move(next);
  return shares_;
}

}  // namespace gradmesh::parallel
