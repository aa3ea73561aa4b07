// The global sample order and how it is cut into batches and rank slices.
//
// Invariants that make data-parallel training reproducible:
//   * the order of an epoch depends only on (seed, epoch, count) — never on
//     the thread count or the world size;
//   * global batch s of an epoch is order[s*B, min((s+1)*B, count)), the same
//     sequence for every world size;
//   * rank r of W takes the contiguous slice [r*len/W, (r+1)*len/W) of that
//     batch, so the slices concatenated in rank order are the global batch and
//     every sample is used exactly once per epoch across all ranks.
// A world larger than a batch gives some ranks empty slices; they still take
// part in the step (and its all-reduce), contributing zero samples.
// rank_slice_weighted cuts the same batch in proportion to per-rank shares
// (straggler rebalancing): still contiguous, in rank order and complete, so
// only who computes which sample changes, never the global batch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gradmesh::data {

// A permutation of [0, count): the identity when !shuffle, otherwise a
// Fisher-Yates shuffle whose swap at position i draws
// CounterRng(seed, kShuffle, epoch).below(i, i + 1).
// REQUIRES: count >= 0, epoch >= 0 (kConfig otherwise).
std::vector<int64_t> epoch_order(int64_t count, uint64_t seed, int64_t epoch, bool shuffle);

// Steps per epoch: count / B rounded down when drop_last (the short final
// batch is skipped), rounded up otherwise.
// REQUIRES: count >= 0, global_batch >= 1 (kConfig otherwise).
int64_t batches_per_epoch(int64_t count, int64_t global_batch, bool drop_last);

// [begin, end) positions in the epoch order covered by global batch `step`.
// REQUIRES: 0 <= step < batches_per_epoch(count, global_batch, false).
std::pair<int64_t, int64_t> batch_range(int64_t step, int64_t count, int64_t global_batch);

// [begin, end) offsets inside a global batch of `batch_len` samples that rank
// `rank` of `world` takes.
// REQUIRES: batch_len >= 0, world >= 1, 0 <= rank < world (kConfig otherwise).
std::pair<int64_t, int64_t> rank_slice(int64_t batch_len, int rank, int world);

// Largest sum of shares rank_slice_weighted accepts: with batches of at most
// 2^31 samples, batch_len * sum stays inside int64.
inline constexpr int64_t kMaxShareSum = int64_t{1} << 31;

// [begin, end) offsets inside a global batch of `batch_len` samples that rank
// `rank` takes when rank r's part is proportional to shares[r]. Boundary r is
// floor(batch_len * (shares[0] + ... + shares[r-1]) / sum): each rank's count
// is within one sample of its exact quota, and equal shares give exactly
// rank_slice(batch_len, rank, shares.size()).
// REQUIRES: 0 <= batch_len <= 2^31, 0 <= rank < shares.size(), every share
// >= 0, 0 < sum of shares <= kMaxShareSum (kConfig otherwise).
std::pair<int64_t, int64_t> rank_slice_weighted(int64_t batch_len, int rank, const std::vector<int64_t>& shares);

// Throws kConfig naming `what` unless `shares` is a valid split for `world` ranks
// (world entries >= 0 whose sum is in (0, kMaxShareSum]).
void check_shares(const std::vector<int64_t>& shares, int world, const std::string& what);

}  // namespace gradmesh::data
