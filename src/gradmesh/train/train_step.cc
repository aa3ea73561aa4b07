#include "gradmesh/train/train_step.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gradmesh/autograd/ops.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/parallel/gradient_reducer.h"

namespace gradmesh::train {

namespace {

std::string value_text(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return std::to_string(v);
}

constexpr const char* kDivergenceHint = "; lower optim.lr or enable optim.clip_grad_norm";

}  // namespace

void StepRunner::stop_unless_finite(int64_t step, double loss) {
  if (sync_.step_finite()) return;
  const std::string where = "step " + std::to_string(step);
  // Every rank got the same verdict from the exchange, so every rank is here.
  const std::vector<float> losses = sync_.gather_step_losses();
  if (losses.size() == 1)
    throw_error(ErrorKind::kInternal, where,
                "the loss is not finite (" + value_text(static_cast<float>(loss)) + ")" + kDivergenceHint);
  const std::string ranks = parallel::non_finite_ranks(losses);
  if (ranks.empty())
    throw_error(ErrorKind::kInternal, where,
                "the summed gradients are not finite although every rank's loss is" + std::string(kDivergenceHint));
  throw_error(ErrorKind::kInternal, where, "the loss is not finite " + ranks + kDivergenceHint);
}

void StepRunner::update(float lr, parallel::PhaseTimes& times, obs::ChromeTrace* trace) {
  const double t0 = now_seconds();
  const auto max_norm = static_cast<float>(config_.optim.clip_grad_norm);
  if (max_norm > 0) sync_.clip_grad_norm(max_norm, model_, whole_);
  optimizer_.step(model_.flat_params().data(), model_.flat_grads().data(), lr);
  const double t1 = now_seconds();
  times[parallel::Phase::kOptimizer] += t1 - t0;
  if (trace) trace->span("compute", "optimizer", t0, t1);
  sync_.after_update(times, trace);
}

double StepRunner::run_pipeline(const data::Batch& batch, parallel::PhaseTimes& times, obs::ChromeTrace* trace) {
  using parallel::Phase;
  const PipelineSetup& pl = *pipeline_;
  const int stage = pl.forward->rank(), stages = pl.forward->size();
  const bool first = stage == 0, last = stage == stages - 1;
  const int64_t rows = batch.images.dim(0), t = batch.images.dim(1), targets = batch.targets_per_sample;
  const auto denominator = static_cast<float>(batch.global_batch_len * targets);
  const int m = pl.micro_batches;
  GRADMESH_CHECK(rows >= m, "a pipeline micro-batch without samples");
  struct Micro {
    autograd::Tape tape;
    autograd::Variable input, output;  // output: activations, or (last stage) the loss
  };
  std::vector<Micro> micro(static_cast<size_t>(m));
  std::vector<std::shared_ptr<comm::Work>> sends;
  // Sends run on the groups' communication threads: a send that waits for its
  // receiver must never hold up this thread, which the receiver may be waiting on.
  comm::CollectiveOptions in_background;
  in_background.background = true;
  double loss = 0;
  auto part = [&](int i) { return std::pair<int64_t, int64_t>{rows * i / m, rows * (i + 1) / m}; };
  const double pipeline_start = now_seconds();
  for (const parallel::PipelineStep& step : parallel::stage_schedule(pl.schedule, stage, stages, m)) {
    const int i = step.micro_batch;
    const auto [lo, hi] = part(i);
    Micro& mb = micro[static_cast<size_t>(i)];
    const double t0 = now_seconds();
    Tensor received;
    if (step.forward && !first) {
      received = Tensor::empty({hi - lo, t, pl.width});
      pl.forward->recv(received, stage - 1, i)->wait_or_throw();
    } else if (!step.forward && !last) {
      received = Tensor::empty(mb.output.shape());
      pl.backward->recv(received, stage + 1, i)->wait_or_throw();
    }
    const double t1 = now_seconds();
    times[Phase::kComm] += t1 - t0;
    autograd::TapeScope scope(mb.tape);
    if (step.forward) {
      nn::forward_context().first_sample = batch.offset_in_batch + lo;
      mb.input = first ? autograd::Variable(batch.images.slice_flat(lo * t, {hi - lo, t}))
                       : autograd::Variable(received, /*requires_grad=*/true);
      autograd::Variable out = model_.forward(mb.input);
      if (last) {
        const std::vector<int32_t> labels(batch.labels.begin() + lo * targets, batch.labels.begin() + hi * targets);
        mb.output = model_.root().loss(out, labels, denominator);
        loss += mb.output.value().item();
      } else {
        mb.output = out;
        sends.push_back(pl.forward->send(out.value(), stage + 1, i, in_background));
      }
    } else {
      if (last) mb.tape.backward(mb.output);
      else mb.tape.backward_from(mb.output, received);
      if (!first) sends.push_back(pl.backward->send(mb.input.grad(), stage - 1, i, in_background));
      mb.output = autograd::Variable();  // this micro-batch's activations are freed here
    }
    const double t2 = now_seconds();
    times[step.forward ? Phase::kForward : Phase::kBackward] += t2 - t1;
    if (trace)
      trace->span("stage " + std::to_string(stage), std::string(step.forward ? "forward" : "backward") + " mb " +
                  std::to_string(i), t1, t2);
  }
  const double t3 = now_seconds();
  times.pipeline_seconds += t3 - pipeline_start;
  for (const auto& w : sends) w->wait_or_throw();
  model_.zero_unwritten_grads();
  // A tied token table lives on the first and the last stage: both copies get the summed gradient.
  if (pl.tied != nullptr && pl.tied_offset >= 0) {
    Tensor grad = model_.flat_grads().slice_flat(pl.tied_offset, {pl.tied_numel});
    pl.tied->allreduce(grad)->wait_or_throw();
  }
  times[Phase::kComm] += now_seconds() - t3;
  return loss;
}

double StepRunner::run(const data::Batch& batch, float lr, int64_t step, parallel::PhaseTimes& times,
                       obs::ChromeTrace* trace) {
  using parallel::Phase;
  if (pipeline_ != nullptr) {
    model_.zero_grad();
    const autograd::GradReadyHook hook = sync_.begin_step(step);
    const double loss = run_pipeline(batch, times, trace);
    sync_.set_step_loss(loss);
    // Every gradient is final now: the data-parallel reduction starts from the last parameter, as backward would.
    if (hook)
      for (int i = static_cast<int>(model_.parameters().size()) - 1; i >= 0; --i) hook(i);
    sync_.finish(times, trace);
    stop_unless_finite(step, loss);
    update(lr, times, trace);
    ++times.steps;
    times.loss_sum += loss;  // only the last stage has the loss; the others add 0
    // Until the first log interval the progress line shows the returned loss
    // (on rank 0, the first stage): share it then, and only then, since the
    // log intervals gather the losses anyway.
    if (step >= config_.train.log_every) return loss;
    Tensor shared = Tensor::full({1}, static_cast<float>(loss));
    pipeline_->forward->allreduce(shared)->wait_or_throw();
    return shared.data()[0];
  }
  const int64_t rows = batch.images.dim(0), sample = batch.images.numel() / std::max<int64_t>(rows, 1);
  const int64_t micro = config_.train.accum_steps, targets = batch.targets_per_sample;
  // The mean over every target of the global batch (one per image, one per
  // token position); with local SGD over this rank's own targets.
  const bool local_mean = sync_.averages_locally();
  const int64_t averaged = local_mean ? rows : batch.global_batch_len;
  const auto denominator = static_cast<float>(std::max<int64_t>(averaged, 1) * targets);
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
  const autograd::GradReadyHook hook = sync_.begin_step(step);
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto [lo, hi] = parts[i];
    const double t0 = now_seconds();
    shape[0] = hi - lo;
    nn::forward_context().first_sample = batch.offset_in_batch + lo;
    autograd::Variable x(batch.images.slice_flat(lo * sample, shape));
    const std::vector<int32_t> labels(batch.labels.begin() + lo * targets, batch.labels.begin() + hi * targets);
    autograd::Variable out = model_.root().loss(model_.forward(x), labels, denominator);
    loss += out.value().item();
    // The step's loss is complete before the backward that launches buckets.
    if (i + 1 == parts.size()) sync_.set_step_loss(loss);
    const double t1 = now_seconds();
    // Only the last micro-batch's gradients are final: earlier ones accumulate without communication.
    model_.backward(out, i + 1 == parts.size() ? hook : autograd::GradReadyHook{});
    const double t2 = now_seconds();
    times[Phase::kForward] += t1 - t0;
    times[Phase::kBackward] += t2 - t1;
    span("compute", "forward", t0, t1);
    span("compute", "backward", t1, t2);
  }
  if (parts.empty()) {
    model_.flat_grads().zero();  // this rank contributes nothing to the sum
    sync_.set_step_loss(0);
  }
  sync_.finish(times, trace);
  stop_unless_finite(step, loss);
  update(lr, times, trace);
  // This rank's share of the batch loss either way (the logs sum the ranks' shares).
  if (local_mean && batch.global_batch_len > 0)
    loss *= static_cast<double>(rows) / static_cast<double>(batch.global_batch_len);
  ++times.steps;
  times.loss_sum += loss;
  return loss;
}

}  // namespace gradmesh::train
