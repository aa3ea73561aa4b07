#include "gradmesh/data/shard_order.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"

namespace gradmesh::data {

namespace {

// The shard draws take indices from the top of the stream, the Feistel rounds from the bottom.
constexpr uint64_t kShardDraws = uint64_t{1} << 63;
constexpr int kRounds = 4;

}  // namespace

ShardBlockOrder::ShardBlockOrder(const std::vector<int64_t>& shard_sizes, int64_t block, uint64_t seed, int64_t epoch)
    : block_(block), seed_(seed), epoch_(epoch) {
  if (block < 1 || epoch < 0 || shard_sizes.empty())
    throw_error(ErrorKind::kConfig, "shard-aware order",
                "needs shards, a block of >= 1 samples and an epoch >= 0; got " + std::to_string(shard_sizes.size()) +
                    " shards, block " + std::to_string(block) + ", epoch " + std::to_string(epoch));
  std::vector<int64_t> first(shard_sizes.size());
  int64_t total = 0;
  for (size_t s = 0; s < shard_sizes.size(); ++s) {
    if (shard_sizes[s] < 0) throw_error(ErrorKind::kConfig, "shard-aware order", "a shard of negative size");
    first[s] = total;
    total += shard_sizes[s];
  }
  count_ = total;
  // The shards in an order drawn from (seed, epoch): Fisher-Yates over their indices.
  std::vector<size_t> drawn(shard_sizes.size());
  std::iota(drawn.begin(), drawn.end(), size_t{0});
  const CounterRng rng(seed_, RngPurpose::kShardShuffle, static_cast<uint64_t>(epoch_));
  for (size_t i = drawn.size() - 1; i > 0; --i)
    std::swap(drawn[i], drawn[rng.below(kShardDraws + i, i + 1)]);
  order_starts_.push_back(0);
  for (const size_t s : drawn) {
    shard_first_.push_back(first[s]);
    order_starts_.push_back(order_starts_.back() + shard_sizes[s]);
  }
}

int64_t ShardBlockOrder::concatenated(int64_t p) const {
  const auto it = std::upper_bound(order_starts_.begin(), order_starts_.end(), p);
  const auto shard = static_cast<size_t>(it - order_starts_.begin() - 1);
  return shard_first_[shard] + (p - order_starts_[shard]);
}

int64_t ShardBlockOrder::permute(int64_t block, int64_t offset, int64_t n) const {
  if (n <= 1) return offset;
  // A balanced Feistel network on the smallest even-width bit domain holding
  // n, walked until it lands inside [0, n): a bijection of [0, n) (the domain
  // is under 4n, so a walk takes under four steps on average).
  int bits = 2;
  while ((int64_t{1} << bits) < n) bits += 2;
  const int half = bits / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  const CounterRng rng(seed_, RngPurpose::kShardShuffle, static_cast<uint64_t>(epoch_));
  auto x = static_cast<uint64_t>(offset);
  do {
    uint64_t left = x >> half, right = x & mask;
    for (int round = 0; round < kRounds; ++round) {
      const uint64_t key = ((static_cast<uint64_t>(block) * kRounds + static_cast<uint64_t>(round)) << 32) | right;
      const uint64_t mixed = (left ^ rng.bits(key)) & mask;
      left = right;
      right = mixed;
    }
    x = (left << half) | right;
  } while (x >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(x);
}

int64_t ShardBlockOrder::at(int64_t position) const {
  GRADMESH_CHECK(position >= 0 && position < count_, "position outside the epoch");
  const int64_t block = position / block_, begin = block * block_;
  const int64_t n = std::min(block_, count_ - begin);
  return concatenated(begin + permute(block, position - begin, n));
}

}  // namespace gradmesh::data
