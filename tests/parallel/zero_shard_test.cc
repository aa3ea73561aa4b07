// ZeRO's shard layout: buckets whose pieces are equal for the reduce-scatter,
// every element owned exactly once, and optimizer groups that split
// parameters straddling pieces; plus the per-rank memory formula.
#include <gtest/gtest.h>

#include <algorithm>

#include "gradmesh/core/error.h"
#include "gradmesh/parallel/zero_memory.h"
#include "gradmesh/parallel/zero_shard.h"
#include "parallel/param_sizes.h"

namespace gradmesh::parallel {
namespace {

using testing::params_of_sizes;

// Weight decay by parameter, so a group's value names the parameter it came from.
float decay_of(const nn::ParameterInfo& p) { return static_cast<float>(p.offset + 1); }

TEST(ShardLayout, BucketsArePaddedPiecesAndCutsRoundUpOntoTheGrid) {
  // P = 67 on 3 ranks; budgets of 10 floats. Cuts are parameter starts
  // rounded up onto 67 - 3k: p3 starts at 55 (on the grid), p2 at 35 -> 37.
  const auto params = params_of_sizes({30, 5, 20, 4, 8});
  const ShardLayout layout(params, 3, 40, 40);
  const std::vector<ShardBucket>& b = layout.buckets();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].range, (FlatRange{55, 67}));
  EXPECT_EQ(b[0].piece, 4);
  EXPECT_EQ(b[0].padded, 12);
  EXPECT_EQ(b[0].first_param, 3);
  EXPECT_EQ(b[0].end_param, 5);
  EXPECT_EQ(b[1].range, (FlatRange{37, 55}));
  EXPECT_EQ(b[1].piece, 6);
  EXPECT_EQ(b[1].first_param, 2);  // p2 alone ...
  EXPECT_EQ(b[1].end_param, 3);
  EXPECT_EQ(b[2].range, (FlatRange{0, 37}));  // ... and its first 2 elements sit in the last bucket
  EXPECT_EQ(b[2].piece, 13);
  EXPECT_EQ(b[2].padded, 39);  // 2 pad elements
  EXPECT_EQ(b[2].first_param, 0);
  EXPECT_EQ(b[2].end_param, 3);
  // Rank 2's piece of the last bucket is [26, 39) clipped to [26, 37).
  EXPECT_EQ(layout.owned(2, 2), (FlatRange{26, 37}));
  EXPECT_EQ(layout.owned_ranges(2), (std::vector<FlatRange>{{26, 37}, {49, 55}, {63, 67}}));
  EXPECT_EQ(layout.shard_numel(2), 11 + 6 + 4);
  EXPECT_EQ(layout.padded_numel(), 69);
}

TEST(ShardLayout, GroupsSplitParametersAtPieceBoundaries) {
  const auto params = params_of_sizes({30, 5, 20, 4, 8});
  const ShardLayout layout(params, 3, 40, 40);
  // Rank 2 owns [26, 37): the tail of p0, all of p1, the head of p2.
  const std::vector<optim::ParamGroup> g = shard_param_groups(layout, 2, params, decay_of);
  ASSERT_EQ(g.size(), 5u);
  EXPECT_EQ(g[0].offset, 26);
  EXPECT_EQ(g[0].count, 4);
  EXPECT_EQ(g[0].weight_decay, 1.0f);  // p0
  EXPECT_EQ(g[1].offset, 30);
  EXPECT_EQ(g[1].count, 5);
  EXPECT_EQ(g[1].weight_decay, 31.0f);  // p1
  EXPECT_EQ(g[2].offset, 35);
  EXPECT_EQ(g[2].count, 2);
  EXPECT_EQ(g[2].weight_decay, 36.0f);  // p2, in the last bucket
  EXPECT_EQ(g[3].offset, 49);           // p2 again, in bucket 1
  EXPECT_EQ(g[3].count, 6);
  EXPECT_EQ(g[4].offset, 63);  // p4's tail
  EXPECT_EQ(g[4].count, 4);
  EXPECT_EQ(g[4].weight_decay, 60.0f);
}

// Every element of [0, P) is owned by exactly one rank and lies in exactly
// one of that rank's groups, which never cross a parameter boundary; every
// bucket but the last has N equal pieces with no padding.
void expect_exact_cover(const std::vector<int64_t>& sizes, int world, int64_t first_bytes, int64_t bytes) {
  SCOPED_TRACE("world " + std::to_string(world) + ", budgets " + std::to_string(first_bytes) + "/" +
               std::to_string(bytes));
  const auto params = params_of_sizes(sizes);
  const ShardLayout layout(params, world, first_bytes, bytes);
  const int64_t total = layout.numel();
  int64_t top = total;
  for (size_t b = 0; b < layout.buckets().size(); ++b) {
    const ShardBucket& bucket = layout.buckets()[b];
    EXPECT_EQ(bucket.range.end, top) << "bucket " << b;
    EXPECT_LT(bucket.range.begin, bucket.range.end) << "bucket " << b;
    EXPECT_EQ(bucket.padded, bucket.piece * world);
    EXPECT_GE(bucket.padded, bucket.range.size());
    EXPECT_LT(bucket.padded - bucket.range.size(), world);
    if (b + 1 < layout.buckets().size()) {
      EXPECT_EQ(bucket.range.size() % world, 0) << "bucket " << b;
    }
    top = bucket.range.begin;
  }
  EXPECT_EQ(top, 0);
  std::vector<int> owners(static_cast<size_t>(total), 0), grouped(static_cast<size_t>(total), 0);
  int64_t shards = 0;
  for (int rank = 0; rank < world; ++rank) {
    for (const FlatRange& r : layout.owned_ranges(rank))
      for (int64_t i = r.begin; i < r.end; ++i) ++owners[static_cast<size_t>(i)];
    shards += layout.shard_numel(rank);
    int64_t previous_end = 0;
    for (const optim::ParamGroup& g : shard_param_groups(layout, rank, params, decay_of)) {
      EXPECT_GE(g.offset, previous_end) << "groups ascend and do not overlap";
      previous_end = g.offset + g.count;
      const auto owner = std::find_if(params.begin(), params.end(), [&](const nn::ParameterInfo& q) {
        return q.offset <= g.offset && g.offset < q.offset + q.numel;
      });
      ASSERT_NE(owner, params.end());
      EXPECT_LE(g.offset + g.count, owner->offset + owner->numel) << "a group crosses a parameter boundary";
      EXPECT_EQ(g.weight_decay, decay_of(*owner));
      for (int64_t i = g.offset; i < g.offset + g.count; ++i) ++grouped[static_cast<size_t>(i)];
    }
  }
  EXPECT_EQ(shards, total);
  for (int64_t i = 0; i < total; ++i) {
    ASSERT_EQ(owners[static_cast<size_t>(i)], 1) << "element " << i;
    ASSERT_EQ(grouped[static_cast<size_t>(i)], 1) << "element " << i;
  }
}

TEST(ShardLayout, EveryElementOwnedExactlyOnce) {
  const std::vector<std::vector<int64_t>> models = {
      {30, 5, 20, 4, 8}, {1}, {7, 1, 1, 1}, {1000, 3, 250, 250, 1, 17}, {2, 2}, {64, 64, 64, 64}};
  for (const auto& sizes : models)
    for (int world = 1; world <= 5; ++world)
      for (const auto& [first, bytes] : std::vector<std::pair<int64_t, int64_t>>{{4, 4}, {40, 100}, {1 << 20, 1 << 20}})
        expect_exact_cover(sizes, world, first, bytes);
}

TEST(ShardLayout, MoreRanksThanElementsLeavesSomeShardsEmpty) {
  const auto params = params_of_sizes({2, 1});
  const ShardLayout layout(params, 5, 4, 4);
  ASSERT_EQ(layout.buckets().size(), 1u);  // no grid point above 0 fits under P = 3
  EXPECT_EQ(layout.buckets()[0].piece, 1);
  EXPECT_EQ(layout.buckets()[0].padded, 5);
  EXPECT_EQ(layout.shard_numel(2), 1);
  EXPECT_EQ(layout.shard_numel(3), 0);
  EXPECT_TRUE(layout.owned_ranges(4).empty());
  EXPECT_TRUE(shard_param_groups(layout, 4, params, decay_of).empty());
}

TEST(ShardLayout, RejectsBadWorldAndBudgets) {
  const auto params = params_of_sizes({3});
  EXPECT_THROW(ShardLayout(params, 0, 4, 4), Error);
  EXPECT_THROW(ShardLayout(params, 2, 0, 4), Error);
  EXPECT_THROW(ShardLayout(params, 2, 4, 0), Error);
  EXPECT_TRUE(ShardLayout({}, 3, 4, 4).buckets().empty());
}

TEST(ZeroMemory, StagesShardOptimizerStateThenGradientsThenParameters) {
  // P = 1000, N = 4, AdamW (2 state floats per parameter), 4-byte values.
  const int adamw = optimizer_state_per_param("adamw", 0);
  ASSERT_EQ(adamw, 2);
  const ZeroMemory s0 = zero_memory_per_rank(0, 1000, 4, adamw);
  EXPECT_EQ(s0.params_bytes, 4000);
  EXPECT_EQ(s0.grads_bytes, 4000);
  EXPECT_EQ(s0.optimizer_bytes, 8000);
  EXPECT_EQ(s0.total_bytes(), 16000);
  EXPECT_EQ(zero_memory_per_rank(1, 1000, 4, adamw).total_bytes(), 4000 + 4000 + 2000);
  EXPECT_EQ(zero_memory_per_rank(2, 1000, 4, adamw).total_bytes(), 4000 + 1000 + 2000);
  const ZeroMemory s3 = zero_memory_per_rank(3, 1000, 4, adamw);
  EXPECT_EQ(s3.params_bytes, 1000);
  EXPECT_EQ(s3.total_bytes(), 1000 + 1000 + 2000);
  // The ZeRO paper's example: 7.5B parameters, 64 ranks, mixed-precision Adam
  // (K = 12) is 120 GB -> 31.4 GB -> 16.6 GB -> 1.9 GB; here with float32
  // values and AdamW's 2 states: 4+4+8 = 16 bytes per parameter at stage 0.
  EXPECT_EQ(zero_memory_per_rank(0, 7'500'000'000, 64, adamw).total_bytes(), 120'000'000'000);
  // A shard is rounded up to whole elements: 10 over 4 ranks is 3 each.
  EXPECT_EQ(zero_memory_per_rank(3, 10, 4, optimizer_state_per_param("sgd", 0.9)).total_bytes(), 12 + 12 + 12);
  EXPECT_EQ(zero_memory_per_rank(2, 10, 4, optimizer_state_per_param("sgd", 0)).total_bytes(), 40 + 12);
  EXPECT_EQ(zero_memory_per_rank(1, 10, 1, adamw).total_bytes(), 40 + 40 + 80);
}

TEST(ZeroMemory, DescribesAndRejects) {
  EXPECT_EQ(describe_zero_memory(zero_memory_per_rank(2, 1 << 20, 4, 2), 2, 4),
            "params 4.0 MiB + grads 1.0 MiB + optimizer 2.0 MiB = 7.0 MiB per rank (ZeRO stage 2, 4 ranks)");
  EXPECT_EQ(mib_text(3 << 20), "3.0 MiB");
  try {
    zero_memory_per_rank(4, 10, 2, 2);
    ADD_FAILURE() << "stage 4 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.zero: "), std::string::npos) << e.what();  // the config key
  }
  EXPECT_THROW(zero_memory_per_rank(1, 10, 0, 2), Error);
  try {
    optimizer_state_per_param("lamb", 0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("lamb"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradmesh::parallel
