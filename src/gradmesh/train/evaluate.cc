#include "gradmesh/train/evaluate.h"

#include <algorithm>
#include <cmath>

#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/kernels/loss.h"

namespace gradmesh::train {

EvalResult evaluate(nn::Model& model, const data::SampleSource& source, int64_t batch) {
  return evaluate_rows(model, source, 0, source.count(), batch);
}

EvalResult evaluate(nn::Model& model, const data::ImageDataset& dataset, int64_t batch) {
  const data::ImageSamples source(dataset);
  return evaluate_rows(model, source, 0, source.count(), batch);
}

namespace {

// Samples [lo, lo + n) as one batch; their targets into `labels`.
Tensor read_rows(const data::SampleSource& source, int64_t lo, int64_t n, std::vector<int32_t>& labels) {
  const int64_t sample = source.sample_numel(), targets = source.targets_per_sample();
  Shape shape = source.sample_shape();
  shape.insert(shape.begin(), n);
  Tensor x = Tensor::empty(shape);
  labels.resize(static_cast<size_t>(n * targets));
  for (int64_t i = 0; i < n; ++i) source.fill(0, lo + i, x.data() + i * sample, labels.data() + i * targets);
  return x;
}

// Adds a batch's summed loss and its correct predictions.
void score(nn::Model& model, const autograd::Variable& logits, const std::vector<int32_t>& labels,
           std::vector<int32_t>& predicted, double& loss_sum, int64_t& correct) {
  loss_sum += model.root().loss(logits, labels, 1.0f).value().item();  // denominator 1: the sum
  predicted.resize(static_cast<size_t>(logits.shape()[0]));
  model.root().predict(logits, predicted.data());
  for (size_t i = 0; i < predicted.size(); ++i) correct += predicted[i] == labels[i];
}

}  // namespace

EvalResult evaluate_pipeline_rows(nn::Model& model, const data::SampleSource& source, int64_t begin, int64_t end,
                                  comm::ProcessGroup& forward, int64_t width, int64_t batch) {
  autograd::NoGradGuard no_grad;
  model.set_training(false);
  const int stage = forward.rank(), stages = forward.size();
  const int64_t targets = source.targets_per_sample();
  const int64_t rows_per_batch = std::max<int64_t>(1, batch / targets);
  double loss_sum = 0;
  int64_t correct = 0;
  std::vector<int32_t> labels, predicted;
  for (int64_t lo = begin; lo < end; lo += rows_per_batch) {
    const int64_t n = std::min(rows_per_batch, end - lo);
    Tensor x = read_rows(source, lo, n, labels);
    if (stage > 0) {
      x = Tensor::empty({n, source.sample_shape()[0], width});
      forward.recv(x, stage - 1, 0)->wait_or_throw();
    }
    const autograd::Variable out = model.forward(autograd::Variable(x));
    if (stage + 1 < stages) {
      forward.send(out.value(), stage + 1, 0)->wait_or_throw();
      continue;
    }
    score(model, out, labels, predicted, loss_sum, correct);
  }
  model.set_training(true);
  // Only the last stage scored: the sums reach every stage.
  Tensor sums = Tensor::from_vector({2}, {static_cast<float>(loss_sum), static_cast<float>(correct)});
  forward.allreduce(sums)->wait_or_throw();
  EvalResult result;
  result.samples = (end - begin) * targets;
  result.loss_sum = sums.data()[0];
  result.correct = static_cast<int64_t>(std::lround(sums.data()[1]));
  result.loss = result.samples ? result.loss_sum / static_cast<double>(result.samples) : 0;
  result.accuracy = result.samples ? static_cast<double>(result.correct) / static_cast<double>(result.samples) : 0;
  return result;
}

EvalResult evaluate_rows(nn::Model& model, const data::SampleSource& source, int64_t begin, int64_t end,
                         int64_t batch) {
  autograd::NoGradGuard no_grad;
  model.set_training(false);
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  const int64_t targets = source.targets_per_sample();
  const int64_t rows_per_batch = std::max<int64_t>(1, batch / targets);
  std::vector<int32_t> labels, predicted;
  for (int64_t lo = begin; lo < end; lo += rows_per_batch) {
    const int64_t n = std::min(rows_per_batch, end - lo);
    Tensor x = read_rows(source, lo, n, labels);
    score(model, model.forward(autograd::Variable(x)), labels, predicted, loss_sum, correct);
  }
  model.set_training(true);
  result.samples = (end - begin) * targets;
  result.loss_sum = loss_sum;
  result.correct = correct;
  result.loss = result.samples ? loss_sum / static_cast<double>(result.samples) : 0;
  result.accuracy = result.samples ? static_cast<double>(correct) / static_cast<double>(result.samples) : 0;
  return result;
}

}  // namespace gradmesh::train
