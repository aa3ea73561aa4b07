#include "gradmesh/parallel/whole_model_view.h"

#include <cmath>
#include <limits>
#include <map>

#include "gradmesh/core/error.h"
#include "gradmesh/optim/clip.h"

namespace gradmesh::parallel {
namespace {

std::vector<std::pair<std::string, nn::Parameter*>> named_parameters_of(nn::Model& model) {
  std::vector<std::pair<std::string, nn::Parameter*>> named;
  model.root().collect_parameters("", named);
  GRADMESH_CHECK(named.size() == model.parameters().size(), "the model's parameters changed");
  return named;
}

std::vector<std::pair<std::string, Shape>> whole_of_pieces(nn::Model& model) {
  std::vector<std::pair<std::string, Shape>> whole;
  for (const auto& [name, param] : named_parameters_of(model))
    whole.emplace_back(name, param->init.shard ? param->init.shard->full_shape : param->shape);
  return whole;
}

}  // namespace

WholeModelView::WholeModelView(nn::Model& model, std::shared_ptr<comm::ProcessGroup> group)
    : WholeModelView(model, std::move(group), whole_of_pieces(model)) {}

WholeModelView::WholeModelView(nn::Model& model, std::shared_ptr<comm::ProcessGroup> group,
                               const std::vector<std::pair<std::string, Shape>>& whole)
    : model_(model), group_(std::move(group)) {
  GRADMESH_CHECK(group_ != nullptr, "WholeModelView needs the group that splits the model");
  std::map<std::string, int64_t> index;
  for (const auto& [name, shape] : whole) {
    nn::ParameterInfo info;
    info.name = name;
    info.shape = shape;
    info.numel = shape_numel(shape);
    info.offset = numel_;
    numel_ += info.numel;
    index[name] = static_cast<int64_t>(whole_.size());
    whole_.push_back(std::move(info));
  }
  // Which rank provides each whole parameter held whole: the lowest holding it.
  Tensor lowest = Tensor::full({static_cast<int64_t>(whole_.size())}, std::numeric_limits<float>::infinity());
  for (const auto& [name, param] : named_parameters_of(model_)) {
    const auto it = index.find(name);
    GRADMESH_CHECK(it != index.end(), "a parameter missing from the whole model: " + name);
    local_.push_back({it->second, param->init.shard, true});
    if (!param->init.shard) lowest.data()[it->second] = static_cast<float>(group_->rank());
  }
  comm::AllreduceOptions min;
  min.op = comm::ReduceOp::kMin;
  group_->allreduce(lowest, min)->wait_or_throw();
  for (Local& l : local_)
    if (!l.shard) l.provides = lowest.data()[l.whole_index] == static_cast<float>(group_->rank());
}

Tensor WholeModelView::assemble(const Tensor& local) const {
  GRADMESH_CHECK(local.numel() == model_.num_parameters() && local.dtype() == DType::kF32,
                 "assemble takes a buffer laid out like the model's parameters");
  Tensor whole = Tensor::zeros({numel_});
  const std::vector<nn::ParameterInfo>& mine = model_.parameters();
  for (size_t i = 0; i < local_.size(); ++i) {
    if (!local_[i].provides) continue;
    const nn::ParameterInfo& w = whole_[static_cast<size_t>(local_[i].whole_index)];
    const Tensor piece = local.slice_flat(mine[i].offset, mine[i].shape);
    Tensor target = whole.slice_flat(w.offset, w.shape);
    if (local_[i].shard) nn::put_piece(piece, *local_[i].shard, target);
    else target.copy_from(piece);
  }
  group_->allreduce(whole)->wait_or_throw();
  return whole;
}

void WholeModelView::take(const Tensor& whole, Tensor& local) const {
  GRADMESH_CHECK(whole.numel() == numel_ && local.numel() == model_.num_parameters(),
                 "take needs a whole buffer and a local one");
  const std::vector<nn::ParameterInfo>& mine = model_.parameters();
  for (size_t i = 0; i < local_.size(); ++i) {
    const nn::ParameterInfo& w = whole_[static_cast<size_t>(local_[i].whole_index)];
    const Tensor source = whole.slice_flat(w.offset, w.shape);
    Tensor target = local.slice_flat(mine[i].offset, mine[i].shape);
    target.copy_from(local_[i].shard ? nn::take_piece(source, *local_[i].shard) : source);
  }
}

double WholeModelView::clip_grad_norm(float max_norm) const {
  const std::vector<nn::ParameterInfo>& mine = model_.parameters();
  float* grads = model_.flat_grads().data();
  double counted = 0;
  for (size_t i = 0; i < mine.size(); ++i)
    if (local_[i].provides) counted += optim::grad_sq_sum(grads + mine[i].offset, mine[i].numel);
  Tensor sum = Tensor::full({1}, static_cast<float>(counted));
  group_->allreduce(sum)->wait_or_throw();
  const double norm = std::sqrt(static_cast<double>(sum.data()[0]));
  optim::clip_to_norm(grads, model_.num_parameters(), norm, max_norm);
  return norm;
}

}  // namespace gradmesh::parallel
