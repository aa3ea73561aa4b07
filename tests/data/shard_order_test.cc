// The shard-aware order (data/shard_order.h): a permutation of the set for
// any shard sizes and block, a pure function of (seed, epoch), each block
// drawn from a few whole shards, and through the loader the same global
// batches at every world size and after a mid-epoch resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/data/batch_loader.h"
#include "gradmesh/data/image_dataset.h"
#include "gradmesh/data/sample_source.h"
#include "gradmesh/data/shard_order.h"

namespace gradmesh::data {
namespace {

std::vector<int64_t> whole_order(const ShardBlockOrder& o) {
  std::vector<int64_t> out;
  for (int64_t p = 0; p < o.count(); ++p) out.push_back(o.at(p));
  return out;
}

TEST(ShardBlockOrder, IsAPermutationForAnyShardsAndBlock) {
  const std::vector<std::vector<int64_t>> sets = {{10}, {7, 0, 13, 1}, {100, 100, 100, 37}, {1, 1, 1, 1, 1, 1, 1}};
  for (const auto& shards : sets)
    for (int64_t block : {1, 3, 16, 100, 1000}) {
      const std::vector<int64_t> order = whole_order(ShardBlockOrder(shards, block, 5, 2));
      std::vector<int64_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], static_cast<int64_t>(i)) << block;
    }
}

TEST(ShardBlockOrder, DependsOnlyOnSeedAndEpoch) {
  const std::vector<int64_t> shards = {50, 50, 50, 50};
  const std::vector<int64_t> a = whole_order(ShardBlockOrder(shards, 100, 1, 0));
  EXPECT_EQ(whole_order(ShardBlockOrder(shards, 100, 1, 0)), a);
  EXPECT_NE(whole_order(ShardBlockOrder(shards, 100, 1, 1)), a);
  EXPECT_NE(whole_order(ShardBlockOrder(shards, 100, 2, 0)), a);
}

TEST(ShardBlockOrder, EachBlockComesFromItsFewShards) {
  // 20 shards of 64 samples, blocks of 3 shards: a block's samples lie in 3
  // shards (4 when it straddles), and each block is shuffled, not in shard order.
  const std::vector<int64_t> shards(20, 64);
  const ShardBlockOrder order(shards, 3 * 64, 9, 4);
  for (int64_t begin = 0; begin < order.count(); begin += 3 * 64) {
    std::set<int64_t> touched;
    bool sorted = true;
    for (int64_t p = begin; p < std::min(order.count(), begin + 3 * 64); ++p) {
      touched.insert(order.at(p) / 64);
      if (p > begin && order.at(p) < order.at(p - 1)) sorted = false;
    }
    EXPECT_LE(touched.size(), 3u) << begin;
    EXPECT_FALSE(sorted) << begin;
  }
}

TEST(ShardBlockOrder, BadArgumentsAreNamed) {
  EXPECT_THROW(ShardBlockOrder({}, 4, 0, 0), Error);
  EXPECT_THROW(ShardBlockOrder({4}, 0, 0, 0), Error);
  EXPECT_THROW(ShardBlockOrder({4, -1}, 4, 0, 0), Error);
}

// A synthetic image set that says it lives in shards.
class ShardedSynthetic : public ImageSamples {
 public:
  ShardedSynthetic(const ImageDataset& d, std::vector<int64_t> shards) : ImageSamples(d), shards_(std::move(shards)) {}
  std::vector<int64_t> shard_sizes() const override { return shards_; }

 private:
  std::vector<int64_t> shards_;
};

// Every global batch of `epoch`, as the concatenation of the ranks' slices, from step `from` on.
std::vector<std::vector<int64_t>> global_batches(const SampleSource& source, int world, int64_t epoch, int64_t from) {
  std::vector<std::vector<int64_t>> batches;
  for (int rank = 0; rank < world; ++rank) {
    BatchLoaderOptions o;
    o.global_batch = 24;
    o.seed = 3;
    o.rank = rank;
    o.world = world;
    o.shuffle_block = 50;
    BatchLoader loader(source, o);
    loader.skip_to(epoch, from);
    Batch b;
    for (size_t i = 0; loader.next(b); ++i) {
      if (batches.size() <= i) batches.emplace_back();
      batches[i].insert(batches[i].end(), b.sample_indices.begin(), b.sample_indices.end());
    }
  }
  return batches;
}

TEST(ShardBlockOrder, TheLoaderGivesTheSameBatchesAtEveryWorldSizeAndOnResume) {
  const ImageDataset data = synthetic_image_dataset(230, 1, 2, 2, 3, 1);
  const ShardedSynthetic source(data, {40, 40, 40, 40, 40, 30});
  const auto one = global_batches(source, 1, 1, 0);
  std::set<int64_t> seen;
  for (const auto& batch : one) seen.insert(batch.begin(), batch.end());
  EXPECT_EQ(seen.size(), 230u) << "every sample once per epoch";
  for (int world : {2, 3, 4}) EXPECT_EQ(global_batches(source, world, 1, 0), one) << world;
  const auto resumed = global_batches(source, 3, 1, 4);
  EXPECT_EQ(resumed, std::vector<std::vector<int64_t>>(one.begin() + 4, one.end()));
}

}  // namespace
}  // namespace gradmesh::data
