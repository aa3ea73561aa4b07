#include "gradmesh/parallel/zero_reducer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/parallel/step_collectives.h"
#include "gradmesh/optim/clip.h"
#include "gradmesh/parallel/released_pages.h"

namespace gradmesh::parallel {

namespace {

// Copies n floats and says whether they were all finite (one pass, while
// they are in cache; the exponent test vectorises where isfinite would not).
bool copy_finite(const float* from, float* to, int64_t n) {
  uint32_t non_finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = from[i];
    to[i] = v;
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    non_finite |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return non_finite == 0;
}

}  // namespace

ZeroReducer::ZeroReducer(nn::Model& model, std::shared_ptr<comm::ProcessGroup> group, ZeroOptions options)
    : model_(model),
      group_(std::move(group)),
      options_(options),
      layout_(model_.parameters(), group_->size(), options_.first_bucket_bytes, options_.bucket_bytes),
      rank_(group_->rank()) {
  if (options_.stage < 1 || options_.stage > 3)
    throw_error(ErrorKind::kConfig, "parallel.zero",
                "ZeroReducer runs stage 1, 2 or 3, got " + std::to_string(options_.stage) +
                    " (stage 0 is GradientReducer's plain data parallelism)");
  owned_ = layout_.owned_ranges(rank_);
  const std::vector<ShardBucket>& buckets = layout_.buckets();
  buckets_of_param_.resize(model_.parameters().size());
  int64_t received = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (int p = buckets[b].first_param; p < buckets[b].end_param; ++p)
      buckets_of_param_[static_cast<size_t>(p)].push_back(b);
    received_offset_.push_back(received);
    received += buckets[b].piece;
  }
  received_ = Tensor::zeros({received});
  if (!buckets.empty() && buckets.back().padded != buckets.back().range.size())
    padded_ = Tensor::zeros({buckets.back().padded});
  missing_.assign(buckets.size(), 0);
  work_.resize(buckets.size());
  next_launch_ = next_take_in_ = buckets.size();  // nothing to launch until begin_step()
}

std::vector<optim::ParamGroup> ZeroReducer::param_groups(const WeightDecayRule& weight_decay) const {
  return shard_param_groups(layout_, rank_, model_.parameters(), weight_decay);
}

autograd::GradReadyHook ZeroReducer::begin_step() {
  const std::vector<ShardBucket>& buckets = layout_.buckets();
  if (next_launch_ < buckets.size() || next_take_in_ < buckets.size())
    throw_error(ErrorKind::kInternal, "ZeroReducer::begin_step", "the previous step was not finished");
  for (size_t b = 0; b < buckets.size(); ++b) {
    missing_[b] = buckets[b].end_param - buckets[b].first_param;
    work_[b].reset();
  }
  spans_.assign(buckets.size(), BucketSpan{});
  next_launch_ = next_take_in_ = 0;
  step_loss_set_ = false;
  shard_finite_ = step_finite_ = true;
  return [this](int param) { on_grad_ready(param); };
}

void ZeroReducer::set_step_loss(double loss) {
  step_loss_ = loss;
  step_loss_set_ = true;
}

void ZeroReducer::on_grad_ready(int param) {
  for (size_t b : buckets_of_param_.at(static_cast<size_t>(param))) --missing_[b];
  if (!options_.overlap) return;
  launch_in_order();
  take_in_completed(/*wait=*/false);
}

void ZeroReducer::launch_in_order() {
  while (next_launch_ < missing_.size() && missing_[next_launch_] == 0) launch(next_launch_++);
}

void ZeroReducer::launch(size_t b) {
  const ShardBucket& bucket = layout_.buckets()[b];
  Tensor grads = model_.flat_grads().slice_flat(bucket.range.begin, {bucket.range.size()});
  Tensor in = grads;
  if (bucket.padded != bucket.range.size()) {  // the last bucket: pieces of N equal lengths need a zero tail
    in = padded_;
    std::memcpy(in.data(), grads.data(), grads.nbytes());
    std::fill(in.data() + bucket.range.size(), in.data() + bucket.padded, 0.0f);
  }
  Tensor out = received_.slice_flat(received_offset_[b], {bucket.piece});
  comm::AllreduceOptions options;
  options.op = comm::ReduceOp::kSum;
  options.timeout = options_.timeout;
  options.background = true;
  spans_[b].bucket = static_cast<int>(b);
  spans_[b].bytes = static_cast<int64_t>(in.nbytes());
  spans_[b].launch_s = now_seconds();
  work_[b] = group_->reduce_scatter(in, out, options);
}

void ZeroReducer::take_in_completed(bool wait) {
  while (next_take_in_ < next_launch_) {
    comm::Work& work = *work_[next_take_in_];
    if (wait)
      wait_for(work, "gradient bucket " + std::to_string(next_take_in_) +
                         " was not reduce-scattered within the timeout");
    else if (!work.completed() || work.error())
      return;  // a failure surfaces in finish_step(), not inside backward
    spans_[next_take_in_].start_s = work.start_time_s();
    spans_[next_take_in_].end_s = work.finish_time_s();
    take_in(next_take_in_++);
  }
}

void ZeroReducer::take_in(size_t b) {
  const FlatRange mine = layout_.owned(b, rank_);
  const float* sum = received_.data() + received_offset_[b];
  shard_finite_ &= copy_finite(sum, model_.flat_grads().data() + mine.begin, mine.size());
  if (options_.stage >= 2) release_others_gradients(b);
}

void ZeroReducer::release_others_gradients(size_t b) {
  const FlatRange range = layout_.buckets()[b].range;
  const FlatRange mine = layout_.owned(b, rank_);
  float* grads = model_.flat_grads().data();
  zero_and_give_back(grads + range.begin, mine.begin - range.begin);
  zero_and_give_back(grads + mine.end, range.end - mine.end);
  // The received piece is copied out; its pages are scratch until the next step.
  float* received = received_.data() + received_offset_[b];
  give_back_whole_pages(received, received + layout_.buckets()[b].piece);
}

void ZeroReducer::wait_for(comm::Work& work, const std::string& what_expired) const {
  wait_for_collective(work, options_.timeout, what_expired);
}

double ZeroReducer::finish_step() {
  const double start = now_seconds();
  GRADMESH_CHECK(step_loss_set_, "ZeroReducer::set_step_loss must come before finish_step");
  // Parameters that got no gradient event (a rank with an empty slice runs
  // no backward at all) have zero gradients set by the caller; launch them.
  for (int& m : missing_) m = 0;
  launch_in_order();
  take_in_completed(/*wait=*/true);
  step_finite_ = agree_on_finite_step();
  return now_seconds() - start;
}

bool ZeroReducer::agree_on_finite_step() {
  const bool mine = std::isfinite(step_loss_) && shard_finite_;
  Tensor flag = Tensor::from_vector({1}, {mine ? 0.0f : 1.0f});
  comm::AllreduceOptions options;
  options.timeout = options_.timeout;
  wait_for(*group_->allreduce(flag, options), "the finite-step check was not reduced within the timeout");
  return flag.data()[0] == 0.0f;
}

std::vector<float> ZeroReducer::gather_step_losses() {
  return parallel::gather_step_losses(*group_, step_loss_, options_.timeout);
}

double ZeroReducer::shard_grad_sq_sum() const {
  const float* grads = model_.flat_grads().data();
  double sum = 0;
  for (const FlatRange& r : owned_) sum += optim::grad_sq_sum(grads + r.begin, r.size());
  return sum;
}

double ZeroReducer::global_grad_norm() {
  // Each rank's double travels as three floats: its mantissa split into a
  // high and a low float (48 of 53 bits) and its binary exponent, so neither
  // precision nor range is lost to float32. Every rank then adds the same
  // values in rank order and gets the same double.
  const double sum = shard_grad_sq_sum();
  int exponent = 0;
  const double mantissa = std::isfinite(sum) ? std::frexp(sum, &exponent) : sum;
  const auto high = static_cast<float>(mantissa);
  const float low = std::isfinite(mantissa) ? static_cast<float>(mantissa - high) : 0.0f;
  Tensor in = Tensor::from_vector({3}, {high, low, static_cast<float>(exponent)});
  Tensor out = Tensor::empty({3 * group_->size()}, DType::kF32);
  comm::CollectiveOptions options;
  options.timeout = options_.timeout;
  wait_for(*group_->allgather(in, out, options), "the gradient norm was not gathered within the timeout");
  const float* parts = out.data();
  double total = 0;
  for (int r = 0; r < group_->size(); ++r)
    total += std::ldexp(static_cast<double>(parts[3 * r]) + parts[3 * r + 1], static_cast<int>(parts[3 * r + 2]));
  return std::sqrt(total);
}

float ZeroReducer::clip_grad_norm(float max_norm) {
  // Checked before the collective, so a bad value fails every rank alike
  // instead of leaving the others waiting.
  if (!std::isfinite(max_norm) || max_norm <= 0)
    throw_error(ErrorKind::kConfig, "clip_grad_norm",
                "max_norm must be finite and > 0, got " + std::to_string(max_norm) +
                    "; use a positive threshold such as 1.0, or disable clipping");
  const double norm = global_grad_norm();
  float* grads = model_.flat_grads().data();
  for (const FlatRange& r : owned_) optim::clip_to_norm(grads + r.begin, r.size(), norm, max_norm);
  return static_cast<float>(norm);
}

double ZeroReducer::gather_params() {
  // Stage 3 keeps the parameters sharded: ZeroParamShards gathers each unit when it runs.
  if (options_.stage == 3) return 0;
  const double start = now_seconds();
  const std::vector<ShardBucket>& buckets = layout_.buckets();
  float* params = model_.flat_params().data();
  comm::CollectiveOptions options;
  options.timeout = options_.timeout;
  options.background = true;
  std::vector<std::shared_ptr<comm::Work>> work(buckets.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    const ShardBucket& bucket = buckets[b];
    const FlatRange mine = layout_.owned(b, rank_);
    // The received piece is free between steps: it carries this rank's
    // updated piece (zero padded), as the output may not overlap the input.
    Tensor piece = received_.slice_flat(received_offset_[b], {bucket.piece});
    std::memcpy(piece.data(), params + mine.begin, static_cast<size_t>(mine.size()) * sizeof(float));
    std::fill(piece.data() + mine.size(), piece.data() + bucket.piece, 0.0f);
    Tensor out = bucket.padded == bucket.range.size()
                     ? model_.flat_params().slice_flat(bucket.range.begin, {bucket.range.size()})
                     : padded_;
    work[b] = group_->allgather(piece, out, options);
  }
  for (size_t b = 0; b < buckets.size(); ++b)
    wait_for(*work[b], "parameter bucket " + std::to_string(b) + " was not all-gathered within the timeout");
  if (!buckets.empty() && buckets.back().padded != buckets.back().range.size())
    std::memcpy(params + buckets.back().range.begin, padded_.data(),
                static_cast<size_t>(buckets.back().range.size()) * sizeof(float));
  if (options_.stage == 2) give_back_whole_pages(received_.data(), received_.data() + received_.numel());
  return now_seconds() - start;
}

}  // namespace gradmesh::parallel
