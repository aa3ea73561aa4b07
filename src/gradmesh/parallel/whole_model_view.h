// WholeModelView: a tensor-parallel model seen as the whole model it splits.
//
// Each rank of a tensor-parallel group holds pieces of the split parameters
// (nn::InitShard says where each piece sits in its whole tensor) and a copy
// of the replicated ones. Checkpoints, the saved weights and resumes speak
// of the whole model, with PyTorch's names and shapes, so a checkpoint saved
// under one layout loads under any other. This class maps between a rank's
// flat buffers (parameters, gradients, optimizer moments: all laid out like
// the model's flat parameters) and the whole model's flat buffer.
#pragma once

#include <memory>
#include <vector>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/model.h"

namespace gradmesh::parallel {

class WholeModelView {
 public:
  // REQUIRES: `model` outlives the view; `tp` is the group that splits it.
  WholeModelView(nn::Model& model, std::shared_ptr<comm::ProcessGroup> tp);

  // The whole model's parameters: names, whole shapes, offsets in the whole flat buffer.
  const std::vector<nn::ParameterInfo>& parameters() const { return whole_; }
  int64_t numel() const { return numel_; }
  comm::ProcessGroup& group() const { return *tp_; }

  // Collective over the group: the whole flat buffer (float32) assembled from
  // every rank's `local` buffer. Exact: each element comes from one rank and
  // the others add zeros.
  Tensor assemble(const Tensor& local) const;
  // This rank's pieces of a whole flat buffer, written into `local`.
  void take(const Tensor& whole, Tensor& local) const;

  // Global-norm gradient clipping of this rank's gradients (the model's flat
  // gradients): the split pieces' squares are summed over the group and the
  // replicated parameters counted once, so every rank scales by the same
  // coefficient one process would. Returns the norm before clipping.
  double clip_grad_norm(float max_norm) const;

 private:
  nn::Model& model_;
  std::shared_ptr<comm::ProcessGroup> tp_;
  std::vector<nn::ParameterInfo> whole_;
  std::vector<std::shared_ptr<const nn::InitShard>> shards_;  // per parameter; null: replicated
  int64_t numel_ = 0;
};

}  // namespace gradmesh::parallel
