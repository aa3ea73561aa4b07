// WholeModelView: a model split across a group, seen as the whole model.
//
// Tensor parallelism gives each rank pieces of the split parameters
// (nn::InitShard says where each piece sits in its whole tensor) and a copy
// of the others; pipeline parallelism gives each rank (stage) some of the
// parameters whole. Checkpoints, the saved weights and resumes speak of the
// whole model, with PyTorch's names and shapes, so a checkpoint saved under
// one layout loads under any other. This class maps between a rank's flat
// buffers (parameters, gradients, optimizer moments: all laid out like the
// model's flat parameters) and the whole model's flat buffer. A parameter
// held whole by several ranks (replicated, or a tied copy) is provided by
// the lowest of them; so is a piece held by several (a tied table split
// across tp ranks on the first and the last pipeline stage).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/parallel/zero_shard.h"

namespace gradmesh::parallel {

// `count` elements at `local` in a rank's flat buffer are the elements at
// `whole` in the whole model's.
struct ViewSegment {
  int64_t local = 0, whole = 0, count = 0;
};

class WholeModelView {
 public:
  // Tensor parallelism: every rank holds every parameter, whole or a piece;
  // the whole shapes come from the pieces' InitShard.
  // REQUIRES: `model` outlives the view; `group` is the group that splits it.
  WholeModelView(nn::Model& model, std::shared_ptr<comm::ProcessGroup> group);
  // Any split: `whole` lists the whole model's parameters (names, shapes) in
  // order; each of this rank's parameters is one of them by name. Collective
  // over `group` (finds which rank provides each parameter).
  WholeModelView(nn::Model& model, std::shared_ptr<comm::ProcessGroup> group,
                 const std::vector<std::pair<std::string, Shape>>& whole);

  // The whole model's parameters: names, whole shapes, offsets in the whole flat buffer.
  const std::vector<nn::ParameterInfo>& parameters() const { return whole_; }
  int64_t numel() const { return numel_; }
  comm::ProcessGroup& group() const { return *group_; }

  // Collective over the group: the whole flat buffer (float32) assembled from
  // every rank's `local` buffer. Exact: each element comes from one rank and
  // the others add zeros.
  Tensor assemble(const Tensor& local) const;
  // This rank's pieces of a whole flat buffer, written into `local`.
  void take(const Tensor& whole, Tensor& local) const;

  // Where the elements this rank provides sit in the whole model, in local
  // order, one segment per contiguous run (a row of a piece split by columns).
  // Over the group they cover the whole model exactly once: what a sharded
  // checkpoint stores.
  std::vector<ViewSegment> provided_segments() const;

  // Global-norm gradient clipping of this rank's gradients (the model's flat
  // gradients): each element of the whole model counted once over the group,
  // so every rank scales by the coefficient one process would use. Returns
  // the norm before clipping. Collective over the group.
  // Under ZeRO (`owned`, `shards`): only the `owned` ranges of the local
  // gradients are summed (and clipped), and the sum goes over `shards` too,
  // the group whose ranks own the other ranges (the dp group); collective
  // over both.
  double clip_grad_norm(float max_norm, const std::vector<FlatRange>* owned = nullptr,
                        comm::ProcessGroup* shards = nullptr) const;

 private:
  void place_local(std::vector<int64_t> provider);

  nn::Model& model_;
  std::shared_ptr<comm::ProcessGroup> group_;
  std::vector<nn::ParameterInfo> whole_;
  struct Local {
    int64_t whole_index;
    std::shared_ptr<const nn::InitShard> shard;  // null: held whole
    bool provides;                               // this rank supplies it: the lowest holding it
  };
  std::vector<Local> local_;  // per parameter of the model
  int64_t numel_ = 0;
};

}  // namespace gradmesh::parallel
