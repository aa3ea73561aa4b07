#include "gradmesh/parallel/zero_param_shards.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/parallel/released_pages.h"

namespace gradmesh::parallel {

ZeroParamShards::ZeroParamShards(nn::Model& model, std::shared_ptr<comm::ProcessGroup> group,
                                 const ShardLayout& layout, std::optional<comm::Millis> timeout)
    : model_(model), group_(std::move(group)), layout_(layout), timeout_(timeout), rank_(group_->rank()) {
  const std::vector<ShardBucket>& buckets = layout_.buckets();
  for (const std::vector<int>& params : model_.parameter_units()) {
    std::vector<size_t> mine;
    for (size_t b = 0; b < buckets.size(); ++b)
      for (int p : params)
        if (p >= buckets[b].first_param && p < buckets[b].end_param) {
          mine.push_back(b);
          break;
        }
    buckets_of_unit_.push_back(std::move(mine));
  }
  int64_t total = 0;
  for (const ShardBucket& b : buckets) {
    piece_offset_.push_back(total);
    total += b.piece;
  }
  pieces_ = Tensor::zeros({total});
  if (!buckets.empty() && buckets.back().padded != buckets.back().range.size())
    padded_ = Tensor::zeros({buckets.back().padded});
  users_.assign(buckets.size(), 0);
  resident_.assign(buckets.size(), true);
  pending_.resize(buckets.size());
  release_all();
}

void ZeroParamShards::start_gather(size_t b) {
  if (resident_[b] || pending_[b]) return;
  const ShardBucket& bucket = layout_.buckets()[b];
  const FlatRange mine = layout_.owned(b, rank_);
  // The input is a copy: the output covers this rank's own piece too.
  float* piece = pieces_.data() + piece_offset_[b];
  std::memcpy(piece, model_.flat_params().data() + mine.begin, static_cast<size_t>(mine.size()) * sizeof(float));
  std::fill(piece + mine.size(), piece + bucket.piece, 0.0f);
  Tensor out = bucket.padded == bucket.range.size()
                   ? model_.flat_params().slice_flat(bucket.range.begin, {bucket.range.size()})
                   : padded_;
  comm::CollectiveOptions options;
  options.timeout = timeout_;
  options.background = true;
  pending_[b] = group_->allgather(pieces_.slice_flat(piece_offset_[b], {bucket.piece}), out, options);
}

void ZeroParamShards::finish_gather(size_t b) {
  if (resident_[b]) return;
  start_gather(b);
  const double start = now_seconds();
  pending_[b]->wait_or_throw();
  pending_[b].reset();
  waited_ += now_seconds() - start;
  const ShardBucket& bucket = layout_.buckets()[b];
  if (bucket.padded != bucket.range.size())
    std::memcpy(model_.flat_params().data() + bucket.range.begin, padded_.data(),
                static_cast<size_t>(bucket.range.size()) * sizeof(float));
  resident_[b] = true;
}

void ZeroParamShards::release(size_t b) {
  if (!resident_[b] || users_[b] > 0) return;
  const FlatRange range = layout_.buckets()[b].range;
  const FlatRange mine = layout_.owned(b, rank_);
  float* params = model_.flat_params().data();
  // An empty piece (all padding) is [range.end, range.end): everything goes.
  zero_and_give_back(params + range.begin, mine.begin - range.begin);
  zero_and_give_back(params + mine.end, range.end - mine.end);
  resident_[b] = false;
}

void ZeroParamShards::use(int unit, int prefetch_unit) {
  GRADMESH_CHECK(unit >= 0 && static_cast<size_t>(unit) < buckets_of_unit_.size(),
                 "parameter unit " + std::to_string(unit) + " of a model with " +
                     std::to_string(buckets_of_unit_.size()));
  for (size_t b : buckets_of_unit_[unit]) ++users_[b];
  for (size_t b : buckets_of_unit_[unit]) start_gather(b);
  for (size_t b : buckets_of_unit_[unit]) finish_gather(b);
  if (prefetch_unit >= 0 && static_cast<size_t>(prefetch_unit) < buckets_of_unit_.size())
    for (size_t b : buckets_of_unit_[prefetch_unit]) start_gather(b);
}

void ZeroParamShards::done(int unit, int next_unit) {
  for (size_t b : buckets_of_unit_[unit]) --users_[b];
  const bool has_next = next_unit >= 0 && static_cast<size_t>(next_unit) < buckets_of_unit_.size();
  for (size_t b : buckets_of_unit_[unit]) {
    const std::vector<size_t>& next = has_next ? buckets_of_unit_[next_unit] : std::vector<size_t>{};
    if (std::find(next.begin(), next.end(), b) == next.end()) release(b);
  }
}

void ZeroParamShards::before_forward(int unit) { use(unit, unit + 1); }

void ZeroParamShards::after_forward(int unit) {
  // The last unit's backward comes right after its forward: keep it.
  const bool last = static_cast<size_t>(unit) + 1 == buckets_of_unit_.size();
  if (last && autograd::grad_enabled()) {
    for (size_t b : buckets_of_unit_[unit]) --users_[b];
    return;
  }
  done(unit, unit + 1);
}

void ZeroParamShards::before_backward(int unit) { use(unit, unit - 1); }

void ZeroParamShards::after_backward(int unit) { done(unit, unit - 1); }

void ZeroParamShards::gather_all() {
  for (size_t b = 0; b < resident_.size(); ++b) start_gather(b);
  for (size_t b = 0; b < resident_.size(); ++b) finish_gather(b);
}

void ZeroParamShards::release_all() {
  for (size_t b = 0; b < resident_.size(); ++b) release(b);
}

int ZeroParamShards::resident_buckets() const {
  return static_cast<int>(std::count(resident_.begin(), resident_.end(), true));
}

double ZeroParamShards::take_wait_seconds() {
  const double w = waited_;
  waited_ = 0;
  return w;
}

}  // namespace gradmesh::parallel
