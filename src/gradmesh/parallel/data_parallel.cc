#include "gradmesh/parallel/data_parallel.h"

#include <cmath>
#include <string>
#include <utility>

#include "gradmesh/autograd/ops.h"
#include "gradmesh/core/error.h"
#include "gradmesh/optim/clip.h"
#include "gradmesh/parallel/rank_agreement.h"

namespace gradmesh::parallel {

namespace {

constexpr const char* kDivergenceHint = "; lower the learning rate or clip the gradient norm";

}  // namespace

DataParallel::DataParallel(nn::Model& model, optim::Optimizer& optimizer, std::shared_ptr<comm::ProcessGroup> group,
                           ReducerOptions options)
    : model_(model), optimizer_(optimizer), group_(group && group->size() > 1 ? std::move(group) : nullptr) {
  if (group_) {
    // The same seed already gives every rank the same weights; rank 0's make that true whatever a program changes.
    broadcast_parameters(*group_, model_);
    reducer_ = std::make_unique<GradientReducer>(model_, group_, options);
  }
  model_.zero_grad();
}

double DataParallel::backward(const autograd::Variable& loss, int64_t rows, int64_t global_rows) {
  if (rows < 0 || global_rows <= 0 || rows > global_rows)
    throw_error(ErrorKind::kUsage, "DataParallel::backward",
                "expected 0 <= rows <= global_rows and global_rows > 0, got rows = " + std::to_string(rows) +
                    ", global_rows = " + std::to_string(global_rows));
  const std::string where = "step " + std::to_string(steps_);
  // This rank's mean weighted by its share of the batch: summed over the ranks, the global mean.
  const autograd::Variable share =
      autograd::scale(loss, static_cast<float>(static_cast<double>(rows) / static_cast<double>(global_rows)));
  const double value = share.value().item();
  if (!reducer_) {
    if (!std::isfinite(value)) throw_error(ErrorKind::kInternal, where, "the loss is not finite" + std::string(kDivergenceHint));
    model_.backward(share);
    return value;
  }
  autograd::GradReadyHook hook = reducer_->begin_step(steps_);
  reducer_->set_step_loss(value);  // before the backward that launches the first bucket
  model_.backward(share, hook);
  reducer_->finish_step();
  if (reducer_->step_finite()) return value;
  // Every rank got the same verdict from the reduction, so every rank is here.
  const std::string ranks = non_finite_ranks(reducer_->gather_step_losses());
  throw_error(ErrorKind::kInternal, where,
              (ranks.empty() ? std::string("the summed gradients are not finite") : "the loss is not finite " + ranks) +
                  kDivergenceHint);
}

void DataParallel::step(float lr, float max_grad_norm) {
  float* grads = model_.flat_grads().data();
  if (max_grad_norm > 0) optim::clip_grad_norm(grads, model_.num_parameters(), max_grad_norm);
  optimizer_.step(model_.flat_params().data(), grads, lr);
  model_.zero_grad();
  ++steps_;
}

std::vector<double> DataParallel::sum_over_ranks(std::vector<double> values) {
  if (!group_ || values.empty()) return values;
  std::vector<float> narrow(values.begin(), values.end());
  Tensor t = Tensor::from_vector({static_cast<int64_t>(narrow.size())}, narrow);
  group_->allreduce(t)->wait_or_throw();
  const std::vector<float> summed = t.to_vector();
  return {summed.begin(), summed.end()};
}

}  // namespace gradmesh::parallel
