// A training run's whole state as a checkpoint sees it, and the ways it moves:
// into a snapshot (to disk), out of a loaded checkpoint, and from one replica
// to the others over the process group (resume on several ranks, in-process
// recovery).
//
// The optimizer's flat state buffers are cut per parameter under PyTorch's
// optimizer state_dict names — "state.<i>.momentum_buffer" (SGD),
// "state.<i>.exp_avg" / "state.<i>.exp_avg_sq" (AdamW), "state.<i>.step" —
// where i is the parameter's index in model.parameters() order; the file's
// metadata lists the parameter names in that order. Under ZeRO each rank
// writes its own shard instead (optimizer_checkpoint.h), and any form
// restores into any layout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/snapshot.h"
#include "gradmesh/checkpoint/trainer_state.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/parallel/whole_model_view.h"

namespace gradmesh::train {

// Deep copies of the weights, the optimizer state and trainer.json: the step
// loop may go on as soon as this returns.
checkpoint::Snapshot take_snapshot(const nn::Model& model, optim::Optimizer& optimizer,
                                   const checkpoint::TrainerState& state);

// Under ZeRO (stage >= 1, `world_size` ranks): rank `rank`'s part of one
// checkpoint. Rank 0's holds the weights (every rank has them whole after
// the parameter all-gather), trainer.json and its optimizer shard, and names
// the other ranks' shards for the writer to collect; every other rank's is a
// part holding its shard alone.
checkpoint::Snapshot take_sharded_snapshot(const nn::Model& model, optim::Optimizer& optimizer,
                                           const checkpoint::TrainerState& state, int rank, int world_size);

// Writes the checkpoint's weights and optimizer state into `model` and
// `optimizer`. A missing tensor, a shape or dtype that does not match, or a
// checkpoint of another optimizer is Error(kFormat) naming the file and the
// tensor; nothing is half-restored in a way the caller would keep (it throws
// before the first step). The checkpoint may be whole or sharded, of any
// world size; `optimizer` may be built over any groups (restore_optimizer).
void restore_state(const checkpoint::LoadedCheckpoint& loaded, nn::Model& model, optim::Optimizer& optimizer);
// The weights alone (model.safetensors, or joined from model shards). `others_allowed`: the file may hold
// parameters this model does not (a pipeline stage reads its part).
void restore_weights(const checkpoint::LoadedCheckpoint& loaded, nn::Model& model, bool others_allowed = false);

// Collective with several ranks: continue from `loaded` (rank 0's; nullopt
// there: a fresh start). Rank 0 restores the weights and its optimizer
// state; every rank receives the weights and `state`, and either the
// optimizer state too (`sharded` false) or, under ZeRO (`sharded`), reads
// the pieces of its own groups from the same checkpoint (any world size and
// stage it was saved at). A rank that fails makes every rank fail. Returns
// whether the run resumed.
bool resume_ranks(comm::ProcessGroup* group, const std::optional<checkpoint::LoadedCheckpoint>& loaded,
                  nn::Model& model, optim::Optimizer& optimizer, bool sharded, checkpoint::TrainerState& state);

// Collective: every rank's weights, optimizer state and `state` become those
// of rank `root`. `optimizer` null: the optimizer state stays (ZeRO: each
// rank's shard is its own, restored by each rank).
void broadcast_training_state(comm::ProcessGroup& group, int root, nn::Model& model, optim::Optimizer* optimizer,
                              checkpoint::TrainerState& state);

// A split model (parallel.mesh tp or pp > 1): each rank holds pieces of the
// whole model. The whole parameters, assembled: collective over the view's
// group (the final model.safetensors). Checkpoints are written in pieces
// (split_checkpoint.h).
std::vector<std::pair<std::string, Tensor>> whole_named_parameters(const parallel::WholeModelView& view,
                                                                   nn::Model& model);
// This rank's pieces of a checkpoint saved under any layout (whole, ZeRO shards, split).
void restore_split_state(const checkpoint::LoadedCheckpoint& loaded, const parallel::WholeModelView& view,
                         nn::Model& model, optim::Optimizer& optimizer);
// resume_ranks for a split model: every rank reads its own pieces from the
// checkpoint rank 0 chose; nothing but trainer.json travels.
bool resume_split_ranks(comm::ProcessGroup* world, const std::optional<checkpoint::LoadedCheckpoint>& loaded,
                        const parallel::WholeModelView& view, nn::Model& model, optim::Optimizer& optimizer,
                        checkpoint::TrainerState& state);

}  // namespace gradmesh::train
