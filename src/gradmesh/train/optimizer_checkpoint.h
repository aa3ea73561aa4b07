// The optimizer's part of a checkpoint, whole or sharded
// (checkpoint/optimizer_state.h), and restoring it into an optimizer built
// over any groups: the whole model's, or any rank's ZeRO shard at any world
// size. Resharding is just that: the stored pieces of the flat buffer are cut
// along the new groups, so state saved at one (world size, stage) loads at
// any other, including one process.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/snapshot.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/optim/optimizer.h"

namespace gradmesh::train {

// The parameters' names in order, comma-separated (the metadata "param_names").
std::string parameter_names_text(const std::vector<nn::ParameterInfo>& params);
// Where each group starts in the optimizer's per-element state buffers:
// the groups back to back, in the order given.
std::vector<int64_t> optimizer_state_positions(const std::vector<optim::ParamGroup>& groups);

// Our state buffer name -> PyTorch's key inside state[i] ("momentum" -> "momentum_buffer").
std::string pytorch_state_key(const std::string& ours);

// optimizer.safetensors with PyTorch's per-parameter names.
// REQUIRES: the optimizer's groups tile [0, P) in order (not a ZeRO shard).
checkpoint::TensorFile whole_optimizer_file(const nn::Model& model, optim::Optimizer& optimizer);
// The same from parameters and state buffers laid out like them (a
// tensor-parallel run's whole model, assembled from its pieces).
checkpoint::TensorFile whole_optimizer_file(const std::vector<nn::ParameterInfo>& params,
                                            const std::vector<std::pair<std::string, Tensor>>& state,
                                            const std::string& optimizer_name);

// optimizer.shard-<rank+1>-of-<world_size>.safetensors: this rank's state
// elements in group order, the flat element ranges they belong to, and the
// ZeRO stage and world size in the metadata.
checkpoint::TensorFile optimizer_shard_file(const nn::Model& model, optim::Optimizer& optimizer, int rank,
                                            int world_size, int zero_stage);

// Fills every state buffer of `optimizer` (its groups only) and its step
// counter from the checkpoint's optimizer files, one file at a time, so a
// rank holds at most one stored file besides its own state. Error(kFormat)
// naming the file for another optimizer's state, a missing state buffer, or
// pieces that do not cover the model's parameters exactly once.
void restore_optimizer(const checkpoint::LoadedCheckpoint& loaded, const nn::Model& model,
                       optim::Optimizer& optimizer);

}  // namespace gradmesh::train
