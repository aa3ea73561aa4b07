#include "gradmesh/data/sample_order.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"

namespace gradmesh::data {

std::vector<int64_t> epoch_order(int64_t count, uint64_t seed, int64_t epoch, bool shuffle) {
  if (count < 0 || epoch < 0)
    throw_error(ErrorKind::kConfig, "epoch_order",
                "count and epoch must be >= 0, got count=" + std::to_string(count) +
                    " epoch=" + std::to_string(epoch));
  std::vector<int64_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  const CounterRng rng(seed, RngPurpose::kShuffle, static_cast<uint64_t>(epoch));
  for (int64_t i = count - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i), static_cast<uint64_t>(i + 1)));
    std::swap(order[i], order[j]);
  }
  return order;
}

int64_t batches_per_epoch(int64_t count, int64_t global_batch, bool drop_last) {
  if (count < 0 || global_batch < 1)
    throw_error(ErrorKind::kConfig, "batch plan",
                "global batch size must be >= 1 and the sample count >= 0, got global_batch=" +
                    std::to_string(global_batch) + " count=" + std::to_string(count));
  // Rounded up without count + global_batch - 1, which could overflow.
  return count / global_batch + (!drop_last && count % global_batch != 0 ? 1 : 0);
}

std::pair<int64_t, int64_t> batch_range(int64_t step, int64_t count, int64_t global_batch) {
  const int64_t steps = batches_per_epoch(count, global_batch, false);
  if (step < 0 || step >= steps)
    throw_error(ErrorKind::kConfig, "batch plan",
                "step " + std::to_string(step) + " is outside the epoch's " + std::to_string(steps) +
                    " batches of " + std::to_string(global_batch) + " from " + std::to_string(count) + " samples");
  const int64_t begin = step * global_batch;
  return {begin, std::min(begin + global_batch, count)};
}

std::pair<int64_t, int64_t> rank_slice(int64_t batch_len, int rank, int world) {
  if (batch_len < 0 || world < 1 || rank < 0 || rank >= world)
    throw_error(ErrorKind::kConfig, "rank slice",
                "need batch_len >= 0, world >= 1 and 0 <= rank < world, got batch_len=" + std::to_string(batch_len) +
                    " rank=" + std::to_string(rank) + " world=" + std::to_string(world));
  return {batch_len * rank / world, batch_len * (rank + 1) / world};
}

void check_shares(const std::vector<int64_t>& shares, int world, const std::string& what) {
  if (world < 1 || shares.size() != static_cast<size_t>(world))
    throw_error(ErrorKind::kConfig, what,
                "need one share per rank: " + std::to_string(world) + " ranks, got " + std::to_string(shares.size()) +
                    " shares");
  int64_t sum = 0;
  for (size_t r = 0; r < shares.size(); ++r) {
    if (shares[r] < 0 || shares[r] > kMaxShareSum)
      throw_error(ErrorKind::kConfig, what,
                  "share of rank " + std::to_string(r) + " must be in [0, " + std::to_string(kMaxShareSum) + "], got " +
                      std::to_string(shares[r]));
    sum += shares[r];  // cannot overflow: each term is at most 2^31 and the loop stops past 2^31
    if (sum > kMaxShareSum)
      throw_error(ErrorKind::kConfig, what, "the shares must sum to at most " + std::to_string(kMaxShareSum));
  }
  if (sum <= 0) throw_error(ErrorKind::kConfig, what, "the shares must not all be 0");
}

std::pair<int64_t, int64_t> rank_slice_weighted(int64_t batch_len, int rank, const std::vector<int64_t>& shares) {
  const int world = static_cast<int>(shares.size());
  if (batch_len < 0 || rank < 0 || rank >= world)
    throw_error(ErrorKind::kConfig, "weighted rank slice",
                "need batch_len >= 0 and 0 <= rank < " + std::to_string(world) + " (one share per rank), got batch_len=" +
                    std::to_string(batch_len) + " rank=" + std::to_string(rank));
  check_shares(shares, world, "weighted rank slice");
  if (batch_len > (int64_t{1} << 31))
    throw_error(ErrorKind::kConfig, "weighted rank slice",
                "batch_len must be at most 2^31, got " + std::to_string(batch_len));
  int64_t sum = 0, before = 0;
  for (int r = 0; r < world; ++r) {
    if (r < rank) before += shares[static_cast<size_t>(r)];
    sum += shares[static_cast<size_t>(r)];
  }
  // Cumulative floors (not per-rank rounding): the boundaries only grow, the
  // last one is batch_len, and equal shares reduce to rank_slice's formula.
  const int64_t mine = shares[static_cast<size_t>(rank)];
  return {batch_len * before / sum, batch_len * (before + mine) / sum};
}

}  // namespace gradmesh::data
