#include "gradmesh/data/batch_loader.h"

#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "gradmesh/core/error.h"
#include "gradmesh/data/sample_order.h"
#include "gradmesh/data/shard_order.h"

namespace gradmesh::data {
namespace {

BatchLoaderOptions validated(BatchLoaderOptions o) {
  if (o.global_batch < 1)
    throw_error(ErrorKind::kConfig, "batch loader", "global_batch must be >= 1, got " + std::to_string(o.global_batch));
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world)
    throw_error(ErrorKind::kConfig, "batch loader",
                "need world >= 1 and 0 <= rank < world, got rank=" + std::to_string(o.rank) +
                    " world=" + std::to_string(o.world));
  if (o.prefetch < 1)
    throw_error(ErrorKind::kConfig, "batch loader", "prefetch must be >= 1, got " + std::to_string(o.prefetch));
  if (o.workers < 1)
    throw_error(ErrorKind::kConfig, "batch loader", "workers must be >= 1, got " + std::to_string(o.workers));
  return o;
}

}  // namespace

BatchLoader::BatchLoader(const SampleSource& source, BatchLoaderOptions options)
    : source_(source),
      options_(validated(std::move(options))),
      steps_(batches_per_epoch(source.count(), options_.global_batch, options_.drop_last)),
      workers_(std::make_unique<SampleWorkers>(options_.workers)),
      producer_([this] { run(); }) {}

BatchLoader::BatchLoader(const ImageDataset& data, BatchLoaderOptions options)
    : owned_source_(std::make_unique<ImageSamples>(data)),
      source_(*owned_source_),
      options_(validated(std::move(options))),
      steps_(batches_per_epoch(data.count, options_.global_batch, options_.drop_last)),
      workers_(std::make_unique<SampleWorkers>(options_.workers)),
      producer_([this] { run(); }) {}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  producer_cv_.notify_all();
  producer_.join();
}

void BatchLoader::skip_to(int64_t epoch, int64_t step) {
  if (epoch < 0 || step < 0 || step > steps_)
    throw_error(ErrorKind::kConfig, "batch loader",
                "cannot resume at epoch " + std::to_string(epoch) + " step " + std::to_string(step) +
                    ": epochs count from 0 and steps run 0.." + std::to_string(steps_) + " (" +
                    std::to_string(steps_) + " = the epoch is finished)");
  std::deque<Batch> stale;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    stale.swap(queue_);
    done_ = false;
    error_ = nullptr;
    epoch_ = epoch;
    first_step_ = step;
    next_step_ = step;
  }
  producer_cv_.notify_all();
}

void BatchLoader::set_split(int64_t from_step, std::vector<int64_t> shares) {
  check_shares(shares, options_.world, "batch loader split");
  std::deque<Batch> stale;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t next_global = generation_ == 0 ? 0 : epoch_ * steps_ + next_step_;
    if (from_step < next_global)
      throw_error(ErrorKind::kUsage, "batch loader",
                  "cannot change the split from step " + std::to_string(from_step) + ": batches up to step " +
                      std::to_string(next_global - 1) + " were already handed out");
    while (!splits_.empty() && splits_.back().from_step >= from_step) splits_.pop_back();
    splits_.push_back({from_step, std::move(shares)});
    if (generation_ == 0) return;  // nothing produced yet
    // The queue holds consecutive steps from next_step_: keep those before from_step.
    size_t keep = 0;
    while (keep < queue_.size() && epoch_ * steps_ + next_step_ + static_cast<int64_t>(keep) < from_step) ++keep;
    stale.assign(std::make_move_iterator(queue_.begin() + static_cast<std::ptrdiff_t>(keep)),
                 std::make_move_iterator(queue_.end()));
    queue_.resize(keep);
    ++generation_;
    first_step_ = next_step_ + static_cast<int64_t>(keep);
    done_ = false;
    error_ = nullptr;
  }
  producer_cv_.notify_all();
}

bool BatchLoader::next(Batch& out) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (generation_ == 0)
    throw_error(ErrorKind::kUsage, "batch loader", "next() called before start_epoch() or skip_to()");
  consumer_cv_.wait(lock, [&] { return !queue_.empty() || done_; });
  if (!queue_.empty()) {
    out = std::move(queue_.front());
    queue_.pop_front();
    next_step_ = out.step_in_epoch + 1;
    lock.unlock();
    producer_cv_.notify_all();
    return true;
  }
  // Sticky until the next skip_to: retrying must not look like a clean end.
  if (error_) std::rethrow_exception(error_);
  return false;
}

void BatchLoader::run() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    producer_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const int64_t epoch = epoch_, first_step = first_step_;
    const std::vector<SplitChange> splits = splits_;
    lock.unlock();
    produce(seen, epoch, first_step, splits);
    lock.lock();
  }
}

void BatchLoader::produce(uint64_t generation, int64_t epoch, int64_t first_step,
                          const std::vector<SplitChange>& splits) {
  const auto queue_limit = static_cast<size_t>(options_.prefetch);
  try {
    // The epoch's order: shard-aware and computed on demand for a sharded
    // source, else one permutation of the whole epoch.
    std::vector<int64_t> whole;
    std::optional<ShardBlockOrder> blocks;
    const std::vector<int64_t> shards = source_.shard_sizes();
    if (options_.shuffle && options_.shuffle_block > 0 && !shards.empty())
      blocks.emplace(shards, options_.shuffle_block, options_.seed, epoch);
    else
      whole = epoch_order(source_.count(), options_.seed, epoch, options_.shuffle);
    const std::function<int64_t(int64_t)> order = [&](int64_t p) {
      return blocks ? blocks->at(p) : whole[static_cast<size_t>(p)];
    };
    for (int64_t step = first_step; step < steps_; ++step) {
      {
        // Waiting for space before assembling bounds memory at `prefetch`
        // queued batches plus none in flight.
        std::unique_lock<std::mutex> lock(mutex_);
        producer_cv_.wait(lock, [&] { return stop_ || generation_ != generation || queue_.size() < queue_limit; });
        if (stop_ || generation_ != generation) return;
      }
      Batch batch = assemble(order, epoch, step, splits);
      if (options_.augment) options_.augment(batch);
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_ || generation_ != generation) return;
      queue_.push_back(std::move(batch));
      consumer_cv_.notify_one();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (generation_ == generation) done_ = true;
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (generation_ == generation) {
      error_ = std::current_exception();
      done_ = true;
    }
  }
  consumer_cv_.notify_one();
}

Batch BatchLoader::assemble(const std::function<int64_t(int64_t)>& order, int64_t epoch, int64_t step,
                            const std::vector<SplitChange>& splits) const {
  const auto [global_begin, global_end] = batch_range(step, source_.count(), options_.global_batch);
  const int64_t global_step = epoch * steps_ + step;
  const SplitChange* split = nullptr;  // the last change at or before this step
  for (const SplitChange& change : splits)
    if (change.from_step <= global_step) split = &change;
  const auto [slice_begin, slice_end] =
      split ? rank_slice_weighted(global_end - global_begin, options_.rank, split->shares)
            : rank_slice(global_end - global_begin, options_.rank, options_.world);
  const int64_t n = slice_end - slice_begin;
  const int64_t numel = source_.sample_numel(), targets = source_.targets_per_sample();

  Batch batch;
  batch.epoch = epoch;
  batch.step_in_epoch = step;
  batch.global_batch_len = global_end - global_begin;
  batch.offset_in_batch = slice_begin;
  batch.targets_per_sample = targets;
  Shape shape = source_.sample_shape();
  shape.insert(shape.begin(), n);
  batch.images = Tensor::empty(shape);
  batch.labels.resize(static_cast<size_t>(n * targets));
  batch.sample_indices.resize(static_cast<size_t>(n));
  float* dst = batch.images.data();
  for (int64_t k = 0; k < n; ++k) batch.sample_indices[static_cast<size_t>(k)] = order(global_begin + slice_begin + k);
  workers_->run(n, [&](int64_t k) {
    source_.fill(epoch, batch.sample_indices[static_cast<size_t>(k)], dst + k * numel,
                 batch.labels.data() + k * targets);
  });
  return batch;
}

}  // namespace gradmesh::data
