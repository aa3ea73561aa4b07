#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/kernels/loss.h"

namespace gradmesh::autograd {

Variable cross_entropy(const Variable& logits, const std::vector<int32_t>& labels, float denominator) {
  if (logits.value().ndim() != 2 || logits.shape()[0] != static_cast<int64_t>(labels.size()))
    throw_error(ErrorKind::kShape, "cross_entropy",
                "logits " + shape_str(logits.shape()) + " for " + std::to_string(labels.size()) +
                    " labels (expected [B, classes] with B labels)");
  const int64_t rows = logits.shape()[0], classes = logits.shape()[1];
  for (int32_t label : labels)
    if (label < 0 || label >= classes)
      throw_error(ErrorKind::kShape, "cross_entropy",
                  "label " + std::to_string(label) + " outside [0, " + std::to_string(classes) + ")");
  const float denom = denominator > 0 ? denominator : static_cast<float>(rows);
  Tensor probs = Tensor::empty(logits.shape());
  const double total = kernels::softmax_xent_forward(logits.value().data(), labels.data(), rows, classes, probs.data());
  Variable loss(Tensor::full({1}, static_cast<float>(total / denom)));
  if (!should_record({&logits})) return loss;
  auto ls = logits.state(), ys = loss.state();
  current_tape().record({ls}, ys, [=] {
    GradTarget t = grad_target(*ls);
    kernels::softmax_xent_backward(probs.data(), labels.data(), rows, classes, ys->grad.data()[0] / denom, t.data,
                                   t.accumulate);
  });
  return loss;
}

Variable mse_loss(const Variable& pred, const Tensor& target, float denominator) {
  if (pred.shape() != target.shape())
    throw_error(ErrorKind::kShape, "mse_loss",
                "prediction " + shape_str(pred.shape()) + " vs target " + shape_str(target.shape()));
  const int64_t n = pred.value().numel();
  const float denom = denominator > 0 ? denominator : static_cast<float>(n);
  const double total = kernels::squared_error_sum(pred.value().data(), target.data(), n);
  Variable loss(Tensor::full({1}, static_cast<float>(total / denom)));
  if (!should_record({&pred})) return loss;
  auto ps = pred.state(), ys = loss.state();
  current_tape().record({ps}, ys, [=] {
    GradTarget t = grad_target(*ps);
    kernels::squared_error_backward(ps->value.data(), target.data(), n, ys->grad.data()[0] / denom, t.data,
                                    t.accumulate);
  });
  return loss;
}

}  // namespace gradmesh::autograd
