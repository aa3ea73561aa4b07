#include "gradmesh/parallel/whole_model_view.h"

#include <cmath>

#include "gradmesh/core/error.h"
#include "gradmesh/optim/clip.h"

namespace gradmesh::parallel {

WholeModelView::WholeModelView(nn::Model& model, std::shared_ptr<comm::ProcessGroup> tp)
    : model_(model), tp_(std::move(tp)) {
  GRADMESH_CHECK(tp_ != nullptr, "WholeModelView needs the tensor-parallel group");
  std::vector<std::pair<std::string, nn::Parameter*>> named;
  model_.root().collect_parameters("", named);
  GRADMESH_CHECK(named.size() == model_.parameters().size(), "the model's parameters changed");
  for (size_t i = 0; i < named.size(); ++i) {
    shards_.push_back(named[i].second->init.shard);
    nn::ParameterInfo info = model_.parameters()[i];
    info.shape = shards_.back() ? shards_.back()->full_shape : info.shape;
    info.numel = shape_numel(info.shape);
    info.offset = numel_;
    numel_ += info.numel;
    whole_.push_back(std::move(info));
  }
}

Tensor WholeModelView::assemble(const Tensor& local) const {
  GRADMESH_CHECK(local.numel() == model_.num_parameters() && local.dtype() == DType::kF32,
                 "assemble takes a buffer laid out like the model's parameters");
  Tensor whole = Tensor::zeros({numel_});
  const std::vector<nn::ParameterInfo>& mine = model_.parameters();
  for (size_t i = 0; i < whole_.size(); ++i) {
    const Tensor piece = local.slice_flat(mine[i].offset, mine[i].shape);
    Tensor target = whole.slice_flat(whole_[i].offset, whole_[i].shape);
    if (shards_[i]) nn::put_piece(piece, *shards_[i], target);
    else if (tp_->rank() == 0) target.copy_from(piece);  // replicated: the same on every rank, taken once
  }
  tp_->allreduce(whole)->wait_or_throw();
  return whole;
}

void WholeModelView::take(const Tensor& whole, Tensor& local) const {
  GRADMESH_CHECK(whole.numel() == numel_ && local.numel() == model_.num_parameters(),
                 "take needs a whole buffer and a local one");
  const std::vector<nn::ParameterInfo>& mine = model_.parameters();
  for (size_t i = 0; i < whole_.size(); ++i) {
    const Tensor source = whole.slice_flat(whole_[i].offset, whole_[i].shape);
    Tensor target = local.slice_flat(mine[i].offset, mine[i].shape);
    target.copy_from(shards_[i] ? nn::take_piece(source, *shards_[i]) : source);
  }
}

double WholeModelView::clip_grad_norm(float max_norm) const {
  const std::vector<nn::ParameterInfo>& mine = model_.parameters();
  float* grads = model_.flat_grads().data();
  double split = 0, replicated = 0;
  for (size_t i = 0; i < mine.size(); ++i)
    (shards_[i] ? split : replicated) += optim::grad_sq_sum(grads + mine[i].offset, mine[i].numel);
  Tensor sum = Tensor::full({1}, static_cast<float>(split));
  tp_->allreduce(sum)->wait_or_throw();
  const double norm = std::sqrt(static_cast<double>(sum.data()[0]) + replicated);
  optim::clip_to_norm(grads, model_.num_parameters(), norm, max_norm);
  return norm;
}

}  // namespace gradmesh::parallel
