// Assembles this rank's slice of each global batch on a background thread.
//
// One producer thread walks the epoch's batch plan (sample_order.h) and has
// each sample written into a fresh batch tensor (by itself and `workers` - 1
// helper threads: sample_workers.h), keeping up to
// `prefetch` finished batches in a bounded queue so the training step never
// waits for data. The batch sequence is a pure function of (seed, epoch,
// global_batch, drop_last, rank, world) and the split schedule (set_split):
// resuming with skip_to() reproduces exactly the batches an uninterrupted run
// would have produced.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gradmesh/core/tensor.h"
#include "gradmesh/data/image_dataset.h"
#include "gradmesh/data/sample_source.h"
#include "gradmesh/data/sample_workers.h"

namespace gradmesh::data {

struct Batch {
  Tensor images;                        // (b, sample shape...) float32, e.g. (b, C, H, W) or (b, T) token ids; b = this rank's slice, may be 0
  std::vector<int32_t> labels;          // (b * targets_per_sample): a class, or the next token of each position
  int64_t targets_per_sample = 1;
  std::vector<int64_t> sample_indices;  // (b) dataset rows, for checks and debugging
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  // Samples in the whole global batch (all ranks): divide summed losses and
  // gradients by this, not by b, so averaging is exact when slices are uneven.
  int64_t global_batch_len = 0;
  // Where this rank's slice starts inside the global batch: sample k of the
  // slice is sample offset_in_batch + k of the batch (dropout masks are keyed
  // by it, so they do not depend on the world size).
  int64_t offset_in_batch = 0;
};

struct BatchLoaderOptions {
  int64_t global_batch = 64;  // samples per step summed over all ranks, >= 1
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;  // skip the short final batch of each epoch
  int rank = 0;            // 0 <= rank < world
  int world = 1;           // >= 1
  int prefetch = 2;        // finished batches queued ahead, >= 1
  // Threads filling each batch's samples (reading, decoding, augmenting),
  // the producer thread included; >= 1.
  int workers = 1;
  // > 0 with a sharded source (SampleSource::shard_sizes()) and shuffle: the
  // shard-aware order (shard_order.h) in blocks of this many samples;
  // otherwise one permutation of the whole epoch (epoch_order).
  int64_t shuffle_block = 0;
  // Optional, runs on the producer thread on every assembled batch (e.g. data
  // augmentation). Whatever it throws is rethrown by next().
  std::function<void(Batch&)> augment;
};

// Not thread-safe: one consumer thread calls start_epoch/skip_to/next.
class BatchLoader {
 public:
  // REQUIRES: `source` outlives the loader and is not modified while it exists.
  // Throws kConfig for invalid options.
  BatchLoader(const SampleSource& source, BatchLoaderOptions options);
  // The same over an image data set. Throws kInternal for an inconsistent `data`.
  BatchLoader(const ImageDataset& data, BatchLoaderOptions options);
  // Stops and joins the producer, also in the middle of an epoch.
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Discards whatever is queued and starts producing `epoch` from step 0.
  void start_epoch(int64_t epoch) { skip_to(epoch, 0); }
  // Same, starting at `step` (for resuming mid-epoch).
  // REQUIRES: epoch >= 0, 0 <= step <= steps_per_epoch() (kConfig otherwise).
  void skip_to(int64_t epoch, int64_t step);
  // Blocks until the next batch of the current epoch is ready. Returns false
  // once the epoch is exhausted; rethrows an error raised while producing
  // (batches before the failing one are delivered first).
  // REQUIRES: start_epoch or skip_to was called (kUsage otherwise).
  bool next(Batch& out);
  // From global step `from_step` on (epoch * steps_per_epoch() + step in the
  // epoch: the trainer's step counter) each global batch is cut in proportion
  // to `shares` (rank_slice_weighted) instead of evenly, until a later
  // set_split. Keyed by step, not by call time, so every rank that makes the
  // same calls cuts every batch the same way. Queued batches of steps >=
  // from_step are discarded and assembled again with the new split.
  // REQUIRES: `shares` has one entry per rank, each >= 0, sum in
  // (0, kMaxShareSum] (kConfig otherwise); from_step is not before the step of
  // the next batch next() hands out (kUsage otherwise).
  void set_split(int64_t from_step, std::vector<int64_t> shares);

  int64_t steps_per_epoch() const { return steps_; }
  const BatchLoaderOptions& options() const { return options_; }

 private:
  struct SplitChange {
    int64_t from_step;            // global step
    std::vector<int64_t> shares;  // one per rank
  };

  void run();
  void produce(uint64_t generation, int64_t epoch, int64_t first_step, const std::vector<SplitChange>& splits);
  // `order(p)`: the sample at position p of the epoch.
  Batch assemble(const std::function<int64_t(int64_t)>& order, int64_t epoch, int64_t step,
                 const std::vector<SplitChange>& splits) const;

  std::unique_ptr<SampleSource> owned_source_;  // the adapter of an ImageDataset
  const SampleSource& source_;
  const BatchLoaderOptions options_;
  const int64_t steps_;

  std::mutex mutex_;
  std::condition_variable producer_cv_;  // new job, queue space, or stop
  std::condition_variable consumer_cv_;  // a batch, end of epoch, or an error
  // Bumped by every skip_to: the producer drops work of older generations.
  uint64_t generation_ = 0;
  int64_t epoch_ = 0;
  int64_t first_step_ = 0;
  int64_t next_step_ = 0;  // step in the epoch of the batch next() hands out next
  std::vector<SplitChange> splits_;  // ascending from_step; before the first, even slices
  std::deque<Batch> queue_;
  bool done_ = false;  // the producer finished the current generation
  std::exception_ptr error_;
  bool stop_ = false;
  std::unique_ptr<SampleWorkers> workers_;  // the producer's helpers
  std::thread producer_;  // last: starts after every member above exists
};

}  // namespace gradmesh::data
