#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "gradmesh/core/error.h"
#include "gradmesh/data/batch_loader.h"
#include "gradmesh/data/image_dataset.h"
#include "gradmesh/data/sample_order.h"

namespace gradmesh::data {
namespace {

BatchLoaderOptions make_options(int64_t global_batch, int rank, int world, int prefetch, bool drop_last = false) {
  BatchLoaderOptions o;
  o.global_batch = global_batch;
  o.seed = 123;
  o.shuffle = true;
  o.drop_last = drop_last;
  o.rank = rank;
  o.world = world;
  o.prefetch = prefetch;
  return o;
}

// Checks `b` against the batch plan computed directly from sample_order.h
// (cut by `shares` when given, else evenly).
void expect_batch(const ImageDataset& ds, const BatchLoaderOptions& o, int64_t epoch, int64_t step, const Batch& b,
                  const std::vector<int64_t>* shares = nullptr) {
  const auto order = epoch_order(ds.count, o.seed, epoch, o.shuffle);
  const auto [begin, end] = batch_range(step, ds.count, o.global_batch);
  const auto [lo, hi] = shares ? rank_slice_weighted(end - begin, o.rank, *shares) : rank_slice(end - begin, o.rank, o.world);
  const int64_t n = hi - lo, numel = ds.sample_numel();
  EXPECT_EQ(b.epoch, epoch);
  EXPECT_EQ(b.step_in_epoch, step);
  EXPECT_EQ(b.global_batch_len, end - begin);
  EXPECT_EQ(b.offset_in_batch, lo);
  ASSERT_EQ(b.images.shape(), (Shape{n, ds.channels, ds.height, ds.width}));
  ASSERT_EQ(b.labels.size(), static_cast<size_t>(n));
  ASSERT_EQ(b.sample_indices.size(), static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const int64_t row = order[begin + lo + k];
    EXPECT_EQ(b.sample_indices[k], row);
    EXPECT_EQ(b.labels[k], ds.labels[row]);
    EXPECT_EQ(std::memcmp(b.images.data() + k * numel, ds.pixels.data() + row * numel, numel * sizeof(float)), 0)
        << "sample " << k << " of step " << step;
  }
}

TEST(BatchLoader, YieldsTheDirectlyComputedBatches) {
  const ImageDataset ds = synthetic_image_dataset(103, 2, 3, 3, 4, 1);
  for (int prefetch : {1, 2, 4}) {
    for (int world : {1, 3}) {
      for (int rank = 0; rank < world; ++rank) {
        const BatchLoaderOptions o = make_options(16, rank, world, prefetch);
        BatchLoader loader(ds, o);
        EXPECT_EQ(loader.steps_per_epoch(), 7);
        for (int64_t epoch : {0, 1}) {
          loader.start_epoch(epoch);
          Batch b;
          int64_t step = 0;
          while (loader.next(b)) expect_batch(ds, o, epoch, step++, b);
          EXPECT_EQ(step, 7);
          EXPECT_FALSE(loader.next(b));  // stays at the end
        }
      }
    }
  }
}

// The loader-level data-parallel contract for N = 1..4 and uneven dataset
// sizes: every sample exactly once per epoch, and each global batch (the rank
// slices concatenated in rank order, each at its offset_in_batch) is the same
// sequence whatever the world size.
TEST(BatchLoader, RanksTogetherCoverEverySampleOnce) {
  for (int64_t count : {50, 53, 7}) {
    const ImageDataset ds = synthetic_image_dataset(count, 1, 2, 2, 3, 2);
    for (bool drop_last : {false, true}) {
      std::vector<std::vector<int64_t>> single_batches;
      for (int world = 1; world <= 4; ++world) {
        SCOPED_TRACE("count " + std::to_string(count) + " drop_last " + std::to_string(drop_last) + " world " +
                     std::to_string(world));
        std::vector<int> uses(static_cast<size_t>(count), 0);
        std::vector<std::vector<int64_t>> batches;
        for (int rank = 0; rank < world; ++rank) {
          BatchLoader loader(ds, make_options(8, rank, world, 2, drop_last));
          loader.start_epoch(5);
          Batch b;
          for (size_t step = 0; loader.next(b); ++step) {
            if (batches.size() <= step) batches.emplace_back(static_cast<size_t>(b.global_batch_len), -1);
            for (size_t k = 0; k < b.sample_indices.size(); ++k) {
              ++uses[static_cast<size_t>(b.sample_indices[k])];
              batches[step][static_cast<size_t>(b.offset_in_batch) + k] = b.sample_indices[k];
            }
          }
        }
        const int total = std::accumulate(uses.begin(), uses.end(), 0);
        EXPECT_EQ(total, drop_last ? count / 8 * 8 : count);
        EXPECT_LE(*std::max_element(uses.begin(), uses.end()), 1);
        if (world == 1) single_batches = batches;
        EXPECT_EQ(batches, single_batches);  // also: no slot left at -1
      }
    }
  }
}

TEST(BatchLoader, RanksBeyondTheBatchGetEmptySlices) {
  const ImageDataset ds = synthetic_image_dataset(6, 1, 2, 2, 2, 3);
  BatchLoader loader(ds, make_options(2, 0, 4, 2));
  loader.start_epoch(0);
  Batch b;
  int steps = 0;
  while (loader.next(b)) {
    EXPECT_EQ(b.images.dim(0), 0);
    EXPECT_TRUE(b.labels.empty());
    EXPECT_EQ(b.global_batch_len, 2);
    ++steps;
  }
  EXPECT_EQ(steps, 3);  // still takes part in every step
}

TEST(BatchLoader, SkipToResumesMidEpoch) {
  const ImageDataset ds = synthetic_image_dataset(40, 1, 2, 2, 2, 4);
  const BatchLoaderOptions o = make_options(6, 1, 2, 2);
  BatchLoader loader(ds, o);
  loader.skip_to(3, 4);
  Batch b;
  int64_t step = 4;
  while (loader.next(b)) expect_batch(ds, o, 3, step++, b);
  EXPECT_EQ(step, 7);
  loader.skip_to(1, 7);  // at the end already
  EXPECT_FALSE(loader.next(b));
  EXPECT_THROW(loader.skip_to(1, 8), Error);
  EXPECT_THROW(loader.skip_to(-1, 0), Error);
}

TEST(BatchLoader, RestartingAnEpochDiscardsQueuedBatches) {
  const ImageDataset ds = synthetic_image_dataset(64, 1, 2, 2, 2, 5);
  const BatchLoaderOptions o = make_options(4, 0, 1, 4);
  BatchLoader loader(ds, o);
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  ASSERT_TRUE(loader.next(b));
  loader.start_epoch(1);
  ASSERT_TRUE(loader.next(b));
  expect_batch(ds, o, 1, 0, b);
}

TEST(BatchLoader, NextBeforeStartIsAUsageError) {
  const ImageDataset ds = synthetic_image_dataset(4, 1, 1, 1, 2, 6);
  BatchLoader loader(ds, make_options(2, 0, 1, 2));
  Batch b;
  try {
    loader.next(b);
    ADD_FAILURE() << "next() before start_epoch() returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  }
}

TEST(BatchLoader, DestructionMidEpochDoesNotHang) {
  const ImageDataset ds = synthetic_image_dataset(200, 1, 4, 4, 2, 7);
  for (int prefetch : {1, 4}) {
    {
      BatchLoader loader(ds, make_options(3, 0, 1, prefetch));
      loader.start_epoch(0);
      Batch b;
      ASSERT_TRUE(loader.next(b));
    }  // producer is blocked on a full queue here
    {
      BatchLoader loader(ds, make_options(3, 0, 1, prefetch));
      loader.start_epoch(0);
    }  // producer may be mid-batch
    { BatchLoader loader(ds, make_options(3, 0, 1, prefetch)); }  // never started
  }
}

TEST(BatchLoader, ProducerErrorsReachTheConsumer) {
  const ImageDataset ds = synthetic_image_dataset(20, 1, 2, 2, 2, 8);
  BatchLoaderOptions o = make_options(4, 0, 1, 2);
  o.augment = [](Batch& b) {
    if (b.epoch == 0 && b.step_in_epoch == 2) throw Error(ErrorKind::kFormat, "augment: broken sample");
  };
  BatchLoader loader(ds, o);
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.step_in_epoch, 1);
  for (int attempt = 0; attempt < 2; ++attempt) {  // sticky, never a silent end of epoch
    try {
      loader.next(b);
      ADD_FAILURE() << "error was swallowed";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat);
      EXPECT_STREQ(e.what(), "augment: broken sample");
    }
  }
  loader.start_epoch(1);  // a new epoch clears the error
  int steps = 0;
  while (loader.next(b)) ++steps;
  EXPECT_EQ(steps, 5);
}

TEST(BatchLoader, AugmentRunsOnEveryBatch) {
  const ImageDataset ds = synthetic_image_dataset(10, 1, 1, 2, 2, 9);
  BatchLoaderOptions o = make_options(3, 0, 1, 1);
  o.augment = [](Batch& b) { b.images.fill(7.0f); };
  BatchLoader loader(ds, o);
  loader.start_epoch(0);
  Batch b;
  int steps = 0;
  while (loader.next(b)) {
    for (float v : b.images.to_vector()) EXPECT_EQ(v, 7.0f);
    ++steps;
  }
  EXPECT_EQ(steps, 4);
}

// Straggler rebalancing changes the split mid-epoch: all ranks make the same
// set_split calls at the same step, possibly with batches already queued. The
// ranks together must still cover every sample of the epoch exactly once, the
// slices of each step must concatenate to the global batch, and each step must
// be cut by the split in force at its global step.
TEST(BatchLoader, ChangingTheSplitKeepsEveryGlobalBatch) {
  const ImageDataset ds = synthetic_image_dataset(61, 1, 2, 2, 3, 11);
  constexpr int kWorld = 3;
  const std::vector<int64_t> first{500, 250, 250}, second{100, 100, 800};
  for (int prefetch : {1, 4}) {
    std::vector<std::vector<int64_t>> batches;  // [global step][offset] = dataset row
    std::vector<int> uses(static_cast<size_t>(ds.count) * 2, 0);  // [epoch * count + row]
    for (int rank = 0; rank < kWorld; ++rank) {
      const BatchLoaderOptions o = make_options(8, rank, kWorld, prefetch);
      BatchLoader loader(ds, o);
      ASSERT_EQ(loader.steps_per_epoch(), 8);
      Batch b;
      for (int64_t epoch : {0, 1}) {
        loader.start_epoch(epoch);
        for (int64_t step = 0; loader.next(b); ++step) {
          const int64_t global = epoch * 8 + step;
          // In force: even for steps 0-2, `first` for 3-9, `second` from 10.
          const std::vector<int64_t>* shares = global < 3 ? nullptr : global < 10 ? &first : &second;
          expect_batch(ds, o, epoch, step, b, shares);
          if (batches.size() <= static_cast<size_t>(global)) batches.emplace_back(b.global_batch_len, -1);
          for (size_t k = 0; k < b.sample_indices.size(); ++k) {
            ++uses[static_cast<size_t>(epoch * ds.count + b.sample_indices[k])];
            batches[global][static_cast<size_t>(b.offset_in_batch) + k] = b.sample_indices[k];
          }
          if (global == 2) loader.set_split(3, first);  // the queue may hold steps 3..
          if (global == 8) loader.set_split(10, second);
        }
      }
    }
    EXPECT_EQ(*std::min_element(uses.begin(), uses.end()), 1);
    EXPECT_EQ(*std::max_element(uses.begin(), uses.end()), 1);
    for (size_t global = 0; global < batches.size(); ++global) {
      const int64_t epoch = static_cast<int64_t>(global) / 8, step = static_cast<int64_t>(global) % 8;
      const auto order = epoch_order(ds.count, 123, epoch, true);
      const auto [begin, end] = batch_range(step, ds.count, 8);
      EXPECT_EQ(batches[global], std::vector<int64_t>(order.begin() + begin, order.begin() + end)) << global;
    }
  }
}

TEST(BatchLoader, SplitsAreKeyedByGlobalStepAndLaterCallsWin) {
  const ImageDataset ds = synthetic_image_dataset(40, 1, 2, 2, 2, 12);
  const BatchLoaderOptions o = make_options(8, 1, 2, 3);
  BatchLoader loader(ds, o);
  const std::vector<int64_t> replaced{1, 3}, kept{3, 1};
  loader.set_split(6, replaced);  // before any epoch: epoch 1, step 1
  loader.set_split(6, kept);      // the same step again replaces it
  Batch b;
  loader.start_epoch(0);
  for (int64_t step = 0; loader.next(b); ++step) expect_batch(ds, o, 0, step, b);
  loader.skip_to(1, 0);
  for (int64_t step = 0; loader.next(b); ++step) expect_batch(ds, o, 1, step, b, step >= 1 ? &kept : nullptr);
}

TEST(BatchLoader, SetSplitRejectsThePastAndBadShares) {
  const ImageDataset ds = synthetic_image_dataset(40, 1, 2, 2, 2, 13);
  BatchLoader loader(ds, make_options(8, 0, 2, 2));
  loader.skip_to(2, 1);  // the next batch is global step 2 * 5 + 1 = 11
  Batch b;
  ASSERT_TRUE(loader.next(b));
  auto kind_of = [&](int64_t from, std::vector<int64_t> shares) {
    try {
      loader.set_split(from, std::move(shares));
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;  // accepted
  };
  EXPECT_EQ(kind_of(11, {1, 1}), ErrorKind::kUsage);  // step 11 was handed out
  EXPECT_EQ(kind_of(12, {1, 1, 1}), ErrorKind::kConfig);
  EXPECT_EQ(kind_of(12, {0, 0}), ErrorKind::kConfig);
  EXPECT_EQ(kind_of(12, {3, 1}), ErrorKind::kInternal);
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.step_in_epoch, 2);
  EXPECT_EQ(b.images.dim(0), 6);  // 8 * 3/4
}

TEST(BatchLoader, RejectsInvalidOptions) {
  const ImageDataset ds = synthetic_image_dataset(4, 1, 1, 1, 2, 10);
  EXPECT_THROW(BatchLoader(ds, make_options(0, 0, 1, 2)), Error);
  EXPECT_THROW(BatchLoader(ds, make_options(2, 2, 2, 2)), Error);
  EXPECT_THROW(BatchLoader(ds, make_options(2, 0, 0, 2)), Error);
  EXPECT_THROW(BatchLoader(ds, make_options(2, 0, 1, 0)), Error);
  ImageDataset broken = ds;
  broken.labels.pop_back();
  EXPECT_THROW(BatchLoader(broken, make_options(2, 0, 1, 2)), Error);
}

}  // namespace
}  // namespace gradmesh::data
