#include "gradmesh/train/evaluate.h"

#include <algorithm>
#include <cstring>

#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/kernels/loss.h"

namespace gradmesh::train {

EvalResult evaluate(nn::Model& model, const data::ImageDataset& dataset, int64_t batch) {
  return evaluate_rows(model, dataset, 0, dataset.count, batch);
}

EvalResult evaluate_rows(nn::Model& model, const data::ImageDataset& dataset, int64_t begin, int64_t end,
                         int64_t batch) {
  autograd::NoGradGuard no_grad;
  model.set_training(false);
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  const int64_t sample = dataset.sample_numel();
  std::vector<int32_t> predicted;
  for (int64_t lo = begin; lo < end; lo += batch) {
    const int64_t n = std::min(batch, end - lo);
    Tensor x = Tensor::empty({n, dataset.channels, dataset.height, dataset.width});
    std::memcpy(x.data(), dataset.pixels.data() + lo * sample, static_cast<size_t>(n * sample) * sizeof(float));
    const std::vector<int32_t> labels(dataset.labels.begin() + lo, dataset.labels.begin() + lo + n);
    autograd::Variable logits = model.forward(autograd::Variable(x));
    loss_sum += autograd::cross_entropy(logits, labels, 1.0f).value().item();  // denominator 1: the sum
    predicted.resize(static_cast<size_t>(n));
    kernels::argmax_rows(logits.value().data(), n, logits.shape()[1], predicted.data());
    for (int64_t i = 0; i < n; ++i) correct += predicted[i] == labels[i];
  }
  model.set_training(true);
  result.samples = end - begin;
  result.loss_sum = loss_sum;
  result.correct = correct;
  result.loss = result.samples ? loss_sum / static_cast<double>(result.samples) : 0;
  result.accuracy = result.samples ? static_cast<double>(correct) / static_cast<double>(result.samples) : 0;
  return result;
}

}  // namespace gradmesh::train
