#include "gradmesh/parallel/gradient_reducer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "gradmesh/core/bf16.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/parallel/step_collectives.h"

namespace gradmesh::parallel {

std::vector<Bucket> plan_buckets(const std::vector<nn::ParameterInfo>& params, int64_t first_bytes, int64_t bytes) {
  if (first_bytes < 1 || bytes < 1)
    throw_error(ErrorKind::kConfig, "parallel.bucket_mb",
                "bucket sizes must be at least one byte, got first " + std::to_string(first_bytes) + " and " +
                    std::to_string(bytes));
  std::vector<Bucket> buckets;
  int end = static_cast<int>(params.size());
  while (end > 0) {
    const int64_t budget = buckets.empty() ? first_bytes : bytes;
    Bucket b;
    b.end_param = end;
    int first = end;
    int64_t held = 0;
    while (first > 0 && (first == end || held < budget)) {
      --first;
      held += params[static_cast<size_t>(first)].numel * static_cast<int64_t>(sizeof(float));
    }
    b.first_param = first;
    b.offset = params[static_cast<size_t>(first)].offset;
    const nn::ParameterInfo& last = params[static_cast<size_t>(end - 1)];
    b.numel = last.offset + last.numel - b.offset;
    buckets.push_back(b);
    end = first;
  }
  return buckets;
}

GradientReducer::GradientReducer(nn::Model& model, std::shared_ptr<comm::ProcessGroup> group, ReducerOptions options)
    : model_(model), group_(std::move(group)), options_(options) {
  buckets_ = plan_buckets(model_.parameters(), options_.first_bucket_bytes, options_.bucket_bytes);
  bucket_of_param_.assign(model_.parameters().size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (int p = buckets_[b].first_param; p < buckets_[b].end_param; ++p)
      bucket_of_param_[static_cast<size_t>(p)] = static_cast<int>(b);
  missing_.assign(buckets_.size(), 0);
  work_.resize(buckets_.size());
  wire_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (options_.bf16) wire_[b] = Tensor::empty({buckets_[b].numel}, DType::kBF16);
  next_launch_ = buckets_.size();  // nothing to launch until begin_step()
  if (options_.powersgd) compressor_ = std::make_unique<PowerSgdCompressor>(model_.parameters(), *options_.powersgd);
}

autograd::GradReadyHook GradientReducer::begin_step(int64_t step) {
  if (next_launch_ < buckets_.size())
    throw_error(ErrorKind::kInternal, "GradientReducer::begin_step", "the previous step was not finished");
  for (size_t b = 0; b < buckets_.size(); ++b) {
    missing_[b] = buckets_[b].end_param - buckets_[b].first_param;
    work_[b].reset();
  }
  spans_.assign(buckets_.size(), BucketSpan{});
  next_launch_ = 0;
  step_loss_set_ = false;
  step_finite_ = true;
  compressing_ = compressor_ && step >= options_.powersgd_start_step;
  return [this](int param) { on_grad_ready(param); };
}

void GradientReducer::set_step_loss(double loss) {
  step_loss_ = loss;
  step_loss_set_ = true;
}

void GradientReducer::on_grad_ready(int param) {
  const int b = bucket_of_param_.at(static_cast<size_t>(param));
  // PowerSGD needs every gradient at once (its factors span the model): it runs in finish_step().
  if (--missing_[static_cast<size_t>(b)] == 0 && options_.overlap && !compressing_) launch_in_order();
}

void GradientReducer::launch_in_order() {
  while (next_launch_ < buckets_.size() && missing_[next_launch_] == 0) launch(next_launch_++);
}

void GradientReducer::launch(size_t b) {
  const Bucket& bucket = buckets_[b];
  Tensor grads = model_.flat_grads().slice_flat(bucket.offset, {bucket.numel});
  if (b == 0) {
    GRADMESH_CHECK(step_loss_set_, "GradientReducer::set_step_loss must come before bucket 0 is launched");
    // This rank's verdict on its loss, carried by the sum (see the header).
    if (!std::isfinite(step_loss_)) grads.data()[0] = std::numeric_limits<float>::quiet_NaN();
  }
  if (options_.bf16) {
    uint16_t* out = static_cast<uint16_t*>(wire_[b].raw());
    const float* in = grads.data();
    for (int64_t i = 0; i < bucket.numel; ++i) out[i] = float_to_bf16(in[i]);
  } else {
    wire_[b] = grads;
  }
  comm::AllreduceOptions options;
  options.op = comm::ReduceOp::kSum;
  options.timeout = options_.timeout;
  options.background = true;
  spans_[b].bucket = static_cast<int>(b);
  spans_[b].bytes = static_cast<int64_t>(wire_[b].nbytes());
  spans_[b].launch_s = now_seconds();
  work_[b] = group_->allreduce(wire_[b], options);
}

void GradientReducer::wait_for(comm::Work& work, const std::string& what_expired) const {
  wait_for_collective(work, options_.timeout, what_expired);
}

double GradientReducer::finish_step() {
  const double start = now_seconds();
  // Parameters that got no gradient event (a rank with an empty slice runs
  // no backward at all) have zero gradients set by the caller; launch them.
  for (int& m : missing_) m = 0;
  if (compressing_) {
    reduce_compressed();
    return now_seconds() - start;
  }
  launch_in_order();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    comm::Work& work = *work_[b];
    wait_for(work, "gradient bucket " + std::to_string(b) + " was not reduced within the timeout");
    spans_[b].start_s = work.start_time_s();
    spans_[b].end_s = work.finish_time_s();
    if (options_.bf16) {
      float* out = model_.flat_grads().data() + buckets_[b].offset;
      const uint16_t* in = static_cast<const uint16_t*>(wire_[b].raw());
      for (int64_t i = 0; i < buckets_[b].numel; ++i) out[i] = bf16_to_float(in[i]);
    }
  }
  step_finite_ = buckets_.empty() ? agree_on_finite_loss_without_buckets()
                                  : std::isfinite(model_.flat_grads().data()[buckets_[0].offset]);
  return now_seconds() - start;
}

void GradientReducer::reduce_compressed() {
  GRADMESH_CHECK(step_loss_set_, "GradientReducer::set_step_loss must come before finish_step");
  next_launch_ = buckets_.size();
  // This rank's loss verdict rides with the exact part of the reduction (see the header).
  const float verdict = std::isfinite(step_loss_) ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  const float summed = compressor_->reduce(model_.flat_grads().data(), verdict, *group_, options_.timeout);
  step_finite_ = std::isfinite(summed);
  spans_.clear();
  for (const PowerSgdSpan& s : compressor_->last_spans()) {
    BucketSpan span;
    span.bucket = static_cast<int>(spans_.size());
    span.bytes = s.bytes;
    span.launch_s = span.start_s = s.start_s;
    span.end_s = s.end_s;
    spans_.push_back(span);
  }
}

// A model without parameters has no bucket to carry the verdict.
bool GradientReducer::agree_on_finite_loss_without_buckets() {
  GRADMESH_CHECK(step_loss_set_, "GradientReducer::set_step_loss must come before finish_step");
  Tensor flag = Tensor::from_vector({1}, {std::isfinite(step_loss_) ? 0.0f : std::numeric_limits<float>::quiet_NaN()});
  comm::AllreduceOptions options;
  options.timeout = options_.timeout;
  wait_for(*group_->allreduce(flag, options), "the loss check was not reduced within the timeout");
  return std::isfinite(flag.data()[0]);
}

std::vector<float> GradientReducer::gather_step_losses() {
  return parallel::gather_step_losses(*group_, step_loss_, options_.timeout);
}

std::string non_finite_ranks(const std::vector<float>& losses) {
  std::vector<std::string> named;
  for (size_t r = 0; r < losses.size(); ++r) {
    if (std::isfinite(losses[r])) continue;
    const char* value = std::isnan(losses[r]) ? "nan" : losses[r] > 0 ? "inf" : "-inf";
    named.push_back(std::to_string(r) + " (" + value + ")");
  }
  if (named.empty()) return "";
  std::string out = named.size() == 1 ? "on rank " : "on ranks ";
  for (size_t i = 0; i < named.size(); ++i) out += (i == 0 ? "" : i + 1 == named.size() ? " and " : ", ") + named[i];
  return out;
}

}  // namespace gradmesh::parallel
