#include "gradmesh/parallel/whole_model_view.h"

#include <algorithm>
#include <cmath>
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
  // Which rank provides each parameter or piece: the lowest holding it. Several
  // ranks hold the same piece when a tied copy sits on another pipeline stage
  // (tp > 1: both stages hold the table's rows of their tp index). A piece is
  // named by where it starts (first row, first column, plus one: zero means
  // "not held"), small integers that floats carry exactly.
  const int64_t members = group_->size(), me = group_->rank(), count = static_cast<int64_t>(whole_.size());
  Tensor starts = Tensor::zeros({2, count, members});
  for (const auto& [name, param] : named_parameters_of(model_)) {
    const auto it = index.find(name);
    GRADMESH_CHECK(it != index.end(), "a parameter missing from the whole model: " + name);
    const std::shared_ptr<const nn::InitShard>& shard = param->init.shard;
    local_.push_back({it->second, shard, true});
    const int64_t row = shard && !shard->row_ranges.empty() ? shard->row_ranges.front().first : 0;
    starts.data()[(0 * count + it->second) * members + me] = static_cast<float>(row + 1);
    starts.data()[(1 * count + it->second) * members + me] = static_cast<float>((shard ? shard->col_begin : 0) + 1);
  }
  group_->allreduce(starts)->wait_or_throw();
  const float* s = starts.data();
  for (Local& l : local_) {
    const float* rows = s + l.whole_index * members;
    const float* cols = s + (count + l.whole_index) * members;
    for (int64_t r = 0; r < me && l.provides; ++r)
      if (rows[r] == rows[me] && cols[r] == cols[me]) l.provides = false;
  }
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

std::vector<ViewSegment> WholeModelView::provided_segments() const {
  std::vector<ViewSegment> segments;
  const std::vector<nn::ParameterInfo>& mine = model_.parameters();
  for (size_t i = 0; i < local_.size(); ++i) {
    if (!local_[i].provides) continue;
    const int64_t local = mine[i].offset, whole = whole_[static_cast<size_t>(local_[i].whole_index)].offset;
    if (!local_[i].shard) {
      segments.push_back({local, whole, mine[i].numel});
      continue;
    }
    nn::for_each_piece_run(*local_[i].shard, [&](int64_t at, int64_t to, int64_t n) {
      // Rows whose columns are all here are one run.
      if (!segments.empty() && segments.back().local + segments.back().count == local + at &&
          segments.back().whole + segments.back().count == whole + to)
        segments.back().count += n;
      else
        segments.push_back({local + at, whole + to, n});
    });
  }
  return segments;
}

double WholeModelView::clip_grad_norm(float max_norm, const std::vector<FlatRange>* owned,
                                      comm::ProcessGroup* shards) const {
  const std::vector<nn::ParameterInfo>& mine = model_.parameters();
  float* grads = model_.flat_grads().data();
  const std::vector<FlatRange> everything{{0, model_.num_parameters()}};
  const std::vector<FlatRange>& ranges = owned ? *owned : everything;
  double counted = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!local_[i].provides) continue;
    for (const FlatRange& r : ranges) {
      const int64_t lo = std::max(r.begin, mine[i].offset), hi = std::min(r.end, mine[i].offset + mine[i].numel);
      if (lo < hi) counted += optim::grad_sq_sum(grads + lo, hi - lo);
    }
  }
  Tensor sum = Tensor::full({1}, static_cast<float>(counted));
  if (shards != nullptr) shards->allreduce(sum)->wait_or_throw();
  group_->allreduce(sum)->wait_or_throw();
  const double norm = std::sqrt(static_cast<double>(sum.data()[0]));
  for (const FlatRange& r : ranges) optim::clip_to_norm(grads + r.begin, r.size(), norm, max_norm);
  return norm;
}

}  // namespace gradmesh::parallel
