#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

TEST(BatchPlan, EqualSharesCutExactlyLikeRankSlice) {
  for (int64_t len : {0, 1, 2, 5, 7, 10, 64, 129, 1000})
    for (int world = 1; world <= 7; ++world)
      for (int64_t share : std::vector<int64_t>{1, 3, 1000, 333333, int64_t{1} << 28}) {
        const std::vector<int64_t> shares(static_cast<size_t>(world), share);
        for (int rank = 0; rank < world; ++rank)
          EXPECT_EQ(rank_slice_weighted(len, rank, shares), rank_slice(len, rank, world))
              << "len " << len << " rank " << rank << " world " << world << " share " << share;
      }
}

TEST(BatchPlan, WeightedSlicesFollowTheShares) {
  const std::vector<int64_t> two_to_one{2, 1};
  EXPECT_EQ(rank_slice_weighted(12, 0, two_to_one), std::make_pair(int64_t{0}, int64_t{8}));
  EXPECT_EQ(rank_slice_weighted(12, 1, two_to_one), std::make_pair(int64_t{8}, int64_t{12}));
  // Boundaries are cumulative floors: 10 * 600/1000 = 6, 10 * 900/1000 = 9.
  const std::vector<int64_t> per_mille{600, 300, 100};
  EXPECT_EQ(rank_slice_weighted(10, 0, per_mille), std::make_pair(int64_t{0}, int64_t{6}));
  EXPECT_EQ(rank_slice_weighted(10, 1, per_mille), std::make_pair(int64_t{6}, int64_t{9}));
  EXPECT_EQ(rank_slice_weighted(10, 2, per_mille), std::make_pair(int64_t{9}, int64_t{10}));
  // A zero share is an empty slice, at the boundary of its neighbours.
  const std::vector<int64_t> middle_idle{1, 0, 1};
  EXPECT_EQ(rank_slice_weighted(9, 1, middle_idle), std::make_pair(int64_t{4}, int64_t{4}));
  EXPECT_EQ(rank_slice_weighted(9, 2, middle_idle), std::make_pair(int64_t{4}, int64_t{9}));
}

// Any shares: contiguous slices in rank order that concatenate to the batch,
// each within one sample of its exact quota.
TEST(BatchPlan, WeightedSlicesTileTheBatch) {
  CounterRng rng(77, RngPurpose::kShuffle, 0);
  uint64_t draw = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const int world = 1 + static_cast<int>(rng.below(draw++, 6));
    std::vector<int64_t> shares;
    int64_t sum = 0;
    for (int r = 0; r < world; ++r) sum += shares.emplace_back(static_cast<int64_t>(rng.below(draw++, 1000)));
    if (sum == 0) shares[0] = sum = 1;
    const auto len = static_cast<int64_t>(rng.below(draw++, 300));
    int64_t expected_begin = 0;
    for (int r = 0; r < world; ++r) {
      const auto [lo, hi] = rank_slice_weighted(len, r, shares);
      EXPECT_EQ(lo, expected_begin);
      EXPECT_LE(lo, hi);
      const double quota = static_cast<double>(len) * static_cast<double>(shares[r]) / static_cast<double>(sum);
      EXPECT_LT(std::abs(static_cast<double>(hi - lo) - quota), 1.0) << "rank " << r << " of " << world;
      expected_begin = hi;
    }
    EXPECT_EQ(expected_begin, len);
  }
}

TEST(BatchPlan, WeightedSliceRejectsBadShares) {
  auto kind_of = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;  // did not throw
  };
  EXPECT_EQ(kind_of([] { rank_slice_weighted(10, 0, {0, 0}); }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([] { rank_slice_weighted(10, 0, {-1, 2}); }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([] { rank_slice_weighted(10, 2, {1, 1}); }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([] { rank_slice_weighted(10, 0, {}); }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([] { rank_slice_weighted(-1, 0, {1}); }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([] { rank_slice_weighted(10, 0, {kMaxShareSum, 1}); }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([] { check_shares({1, 2, 3}, 2, "split"); }), ErrorKind::kConfig);
  try {
    check_shares({1, -4}, 2, "parallel split");
    ADD_FAILURE() << "a negative share was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("share of rank 1"), std::string::npos) << e.what();
  }
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
