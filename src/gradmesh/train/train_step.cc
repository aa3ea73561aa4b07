#include "gradmesh/train/train_step.h"

#include <string>
#include <utility>
#include <vector>

#include "gradmesh/autograd/ops.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/optim/clip.h"

namespace gradmesh::train {

double StepRunner::run(const data::Batch& batch, float lr, parallel::PhaseTimes& times, obs::ChromeTrace* trace) {
  using parallel::Phase;
  const int64_t rows = batch.images.dim(0), sample = batch.images.numel() / std::max<int64_t>(rows, 1);
  const int64_t micro = config_.train.accum_steps;
  const auto denominator = static_cast<float>(batch.global_batch_len);
  auto span = [&](const char* track, const std::string& name, double a, double b) {
    if (trace) trace->span(track, name, a, b);
  };
  // Micro-batches with samples; a rank may have none (a world larger than the batch).
  std::vector<std::pair<int64_t, int64_t>> parts;
  for (int64_t m = 0; m < micro; ++m) {
    const int64_t lo = rows * m / micro, hi = rows * (m + 1) / micro;
    if (hi > lo) parts.emplace_back(lo, hi);
  }
  Shape shape = batch.images.shape();
  double loss = 0;
  model_.zero_grad();
  autograd::GradReadyHook hook;
  if (reducer_) hook = reducer_->begin_step();
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto [lo, hi] = parts[i];
    const double t0 = now_seconds();
    shape[0] = hi - lo;
    nn::forward_context().first_sample = batch.offset_in_batch + lo;
    autograd::Variable x(batch.images.slice_flat(lo * sample, shape));
    const std::vector<int32_t> labels(batch.labels.begin() + lo, batch.labels.begin() + hi);
    autograd::Variable out = autograd::cross_entropy(model_.forward(x), labels, denominator);
    loss += out.value().item();
    const double t1 = now_seconds();
    // Only the last micro-batch's gradients are final: earlier ones accumulate without communication.
    model_.backward(out, i + 1 == parts.size() ? hook : autograd::GradReadyHook{});
    const double t2 = now_seconds();
    times[Phase::kForward] += t1 - t0;
    times[Phase::kBackward] += t2 - t1;
    span("compute", "forward", t0, t1);
    span("compute", "backward", t1, t2);
  }
  if (parts.empty()) model_.flat_grads().zero();  // this rank contributes nothing to the sum
  if (reducer_) {
    const double t0 = now_seconds();
    const double waited = reducer_->finish_step();
    times[Phase::kComm] += waited;
    span("compute", "wait for gradients", t0, t0 + waited);
    if (trace)
      for (const parallel::BucketSpan& b : reducer_->last_spans())
        trace->span("comm", "allreduce bucket " + std::to_string(b.bucket), b.start_s, b.end_s,
                    obs::JsonObject().add("bytes", b.bytes).add("queued_ms", (b.start_s - b.launch_s) * 1e3));
  }
  const double t0 = now_seconds();
  float* grads = model_.flat_grads().data();
  if (config_.optim.clip_grad_norm > 0)
    optim::clip_grad_norm(grads, model_.num_parameters(), static_cast<float>(config_.optim.clip_grad_norm));
  optimizer_.step(model_.flat_params().data(), grads, lr);
  const double t1 = now_seconds();
  times[Phase::kOptimizer] += t1 - t0;
  span("compute", "optimizer", t0, t1);
  ++times.steps;
  times.loss_sum += loss;
  return loss;
}

}  // namespace gradmesh::train
