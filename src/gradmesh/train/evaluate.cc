#include "gradmesh/train/evaluate.h"

#include <algorithm>

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

EvalResult evaluate_rows(nn::Model& model, const data::SampleSource& source, int64_t begin, int64_t end,
                         int64_t batch) {
  autograd::NoGradGuard no_grad;
  model.set_training(false);
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  const int64_t sample = source.sample_numel(), targets = source.targets_per_sample();
  const int64_t rows_per_batch = std::max<int64_t>(1, batch / targets);
  std::vector<int32_t> labels, predicted;
  for (int64_t lo = begin; lo < end; lo += rows_per_batch) {
    const int64_t n = std::min(rows_per_batch, end - lo);
    Shape shape = source.sample_shape();
    shape.insert(shape.begin(), n);
    Tensor x = Tensor::empty(shape);
    labels.resize(static_cast<size_t>(n * targets));
    for (int64_t i = 0; i < n; ++i) source.fill(0, lo + i, x.data() + i * sample, labels.data() + i * targets);
    autograd::Variable logits = model.forward(autograd::Variable(x));
    loss_sum += model.root().loss(logits, labels, 1.0f).value().item();  // denominator 1: the sum
    const int64_t rows = logits.shape()[0];
    predicted.resize(static_cast<size_t>(rows));
    model.root().predict(logits, predicted.data());
    for (int64_t i = 0; i < rows; ++i) correct += predicted[i] == labels[i];
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
