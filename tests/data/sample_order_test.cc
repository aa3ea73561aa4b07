#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/data/sample_order.h"

namespace gradmesh::data {
namespace {

bool is_permutation_of_range(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != static_cast<int64_t>(i)) return false;
  return true;
}

TEST(EpochOrder, IdentityWithoutShuffle) {
  std::vector<int64_t> expected(17);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(epoch_order(17, 5, 3, false), expected);
  EXPECT_TRUE(epoch_order(0, 5, 0, true).empty());
  EXPECT_EQ(epoch_order(1, 5, 0, true), std::vector<int64_t>{0});
}

TEST(EpochOrder, ShuffleIsAPermutation) {
  for (int64_t count : {2, 7, 129, 1000})
    for (int64_t epoch : {0, 1, 9}) EXPECT_TRUE(is_permutation_of_range(epoch_order(count, 42, epoch, true))) << count;
}

TEST(EpochOrder, DependsOnlyOnSeedEpochAndCount) {
  const auto a = epoch_order(1000, 42, 0, true);
  EXPECT_EQ(a, epoch_order(1000, 42, 0, true));
  EXPECT_NE(a, epoch_order(1000, 42, 1, true));
  EXPECT_NE(a, epoch_order(1000, 43, 0, true));
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(a, identity);
}

// Pins the documented construction so an independent implementation (or a
// future refactor) reproduces the exact order.
TEST(EpochOrder, IsTheDocumentedFisherYates) {
  const CounterRng rng(77, RngPurpose::kShuffle, 4);
  std::vector<int64_t> expected = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (int64_t i = 9; i > 0; --i) std::swap(expected[i], expected[rng.below(i, i + 1)]);
  EXPECT_EQ(epoch_order(10, 77, 4, true), expected);
}

TEST(EpochOrder, EveryPositionIsReachable) {
  std::set<int64_t> first_values;
  for (int64_t epoch = 0; epoch < 200; ++epoch) first_values.insert(epoch_order(5, 1, epoch, true)[0]);
  EXPECT_EQ(first_values.size(), 5u);
}

TEST(BatchPlan, BatchesPerEpoch) {
  EXPECT_EQ(batches_per_epoch(10, 3, false), 4);
  EXPECT_EQ(batches_per_epoch(10, 3, true), 3);
  EXPECT_EQ(batches_per_epoch(9, 3, false), 3);
  EXPECT_EQ(batches_per_epoch(9, 3, true), 3);
  EXPECT_EQ(batches_per_epoch(2, 5, true), 0);
  EXPECT_EQ(batches_per_epoch(2, 5, false), 1);
  EXPECT_EQ(batches_per_epoch(0, 5, false), 0);
  EXPECT_THROW(batches_per_epoch(10, 0, false), Error);
  EXPECT_THROW(batches_per_epoch(-1, 3, false), Error);
}

TEST(BatchPlan, BatchRange) {
  EXPECT_EQ(batch_range(0, 10, 4), std::make_pair(int64_t{0}, int64_t{4}));
  EXPECT_EQ(batch_range(2, 10, 4), std::make_pair(int64_t{8}, int64_t{10}));
  EXPECT_THROW(batch_range(3, 10, 4), Error);
  EXPECT_THROW(batch_range(-1, 10, 4), Error);
}

TEST(BatchPlan, RankSlice) {
  EXPECT_EQ(rank_slice(10, 0, 3), std::make_pair(int64_t{0}, int64_t{3}));
  EXPECT_EQ(rank_slice(10, 1, 3), std::make_pair(int64_t{3}, int64_t{6}));
  EXPECT_EQ(rank_slice(10, 2, 3), std::make_pair(int64_t{6}, int64_t{10}));
  EXPECT_EQ(rank_slice(1, 0, 2), std::make_pair(int64_t{0}, int64_t{0}));
  EXPECT_EQ(rank_slice(1, 1, 2), std::make_pair(int64_t{0}, int64_t{1}));
  EXPECT_THROW(rank_slice(10, 3, 3), Error);
  EXPECT_THROW(rank_slice(10, -1, 3), Error);
  EXPECT_THROW(rank_slice(10, 0, 0), Error);
}

// The whole data-parallel contract: for every world size, the rank slices of
// each global batch concatenate to the world = 1 batch, and over an epoch every
// sample is used exactly once (or count - count % B times with drop_last).
TEST(BatchPlan, EverySampleExactlyOncePerEpochForAnyWorld) {
  for (int64_t count : {1, 7, 129, 1000}) {
    for (int64_t batch : {1, 3, 32, 1000, 2048}) {
      for (bool drop_last : {false, true}) {
        const auto order = epoch_order(count, 9, 2, true);
        const int64_t steps = batches_per_epoch(count, batch, drop_last);
        for (int world = 1; world <= 4; ++world) {
          std::vector<int> uses(count, 0);
          int64_t used = 0;
          for (int64_t step = 0; step < steps; ++step) {
            const auto [begin, end] = batch_range(step, count, batch);
            std::vector<int64_t> joined;
            for (int rank = 0; rank < world; ++rank) {
              const auto [lo, hi] = rank_slice(end - begin, rank, world);
              ASSERT_LE(lo, hi);
              for (int64_t k = lo; k < hi; ++k) joined.push_back(order[begin + k]);
            }
            EXPECT_EQ(joined, std::vector<int64_t>(order.begin() + begin, order.begin() + end));
            for (int64_t s : joined) ++uses[s];
            used += static_cast<int64_t>(joined.size());
          }
          const std::string where = "count=" + std::to_string(count) + " batch=" + std::to_string(batch) +
                                    " drop_last=" + std::to_string(drop_last) + " world=" + std::to_string(world);
          EXPECT_EQ(used, drop_last ? count - count % batch : count) << where;
          EXPECT_LE(*std::max_element(uses.begin(), uses.end()), 1) << where;
          if (!drop_last) {
            EXPECT_EQ(*std::min_element(uses.begin(), uses.end()), 1) << where;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace gradmesh::data
