// The shard-aware epoch order of a sharded set (MosaicML Streaming's block
// shuffles are the model): the shards in an order drawn from (seed, epoch),
// their samples concatenated in that order and cut into blocks of `block`
// samples, and each block permuted on its own. A global batch then draws its
// samples from the one or two blocks it falls in, that is from a few shards,
// so reads stay mostly within a few files at a time, while the order is
// still a pure function of (seed, epoch, the shards' sizes, block), the same
// at every world size.
//
// Nothing of size `count` is held: position -> sample is computed on demand
// (the shards' order, then a keyed Feistel bijection of the block, cycle
// walking into its length), so the order of ten million samples costs a few
// bytes per shard, where a materialised permutation costs 8 per sample.
#pragma once

#include <cstdint>
#include <vector>

namespace gradmesh::data {

class ShardBlockOrder {
 public:
  // `shard_sizes`: samples per shard in the set's order (each >= 0); `block`
  // >= 1 samples per block. Error(kConfig) otherwise.
  ShardBlockOrder(const std::vector<int64_t>& shard_sizes, int64_t block, uint64_t seed, int64_t epoch);

  int64_t count() const { return count_; }
  // The sample at `position` of the epoch, 0 <= position < count().
  int64_t at(int64_t position) const;

 private:
  // The sample at offset `p` of the concatenation of the shards in their drawn order.
  int64_t concatenated(int64_t p) const;
  // A bijection of [0, n) keyed by the block.
  int64_t permute(int64_t block, int64_t offset, int64_t n) const;

  std::vector<int64_t> order_starts_;  // start of each drawn shard in the concatenation, then count
  std::vector<int64_t> shard_first_;   // first sample (in the set) of each drawn shard
  int64_t block_;
  int64_t count_ = 0;
  uint64_t seed_;
  int64_t epoch_;
};

}  // namespace gradmesh::data
