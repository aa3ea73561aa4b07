// A training run's whole state as a checkpoint sees it, and the ways it moves:
// into a snapshot (to disk), out of a loaded checkpoint, and from one replica
// to the others over the process group (resume on several ranks, in-process
// recovery).
//
// The optimizer's flat state buffers are cut per parameter under PyTorch's
// optimizer state_dict names — "state.<i>.momentum_buffer" (SGD),
// "state.<i>.exp_avg" / "state.<i>.exp_avg_sq" (AdamW), "state.<i>.step" —
// where i is the parameter's index in model.parameters() order; the file's
// metadata lists the parameter names in that order.
#pragma once

#include <cstdint>
#include <string>

#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/snapshot.h"
#include "gradmesh/checkpoint/trainer_state.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/optim/optimizer.h"

namespace gradmesh::train {

// Deep copies of the weights, the optimizer state and trainer.json: the step
// loop may go on as soon as this returns.
checkpoint::Snapshot take_snapshot(const nn::Model& model, optim::Optimizer& optimizer,
                                   const checkpoint::TrainerState& state);

// Writes the checkpoint's weights and optimizer state into `model` and
// `optimizer`. A missing tensor, a shape or dtype that does not match, or a
// checkpoint of another optimizer is Error(kFormat) naming the file and the
// tensor; nothing is half-restored in a way the caller would keep (it throws
// before the first step).
void restore_state(const checkpoint::LoadedCheckpoint& loaded, nn::Model& model, optim::Optimizer& optimizer);

// Collective: every rank's weights, optimizer state and `state` become those
// of rank `root`.
void broadcast_training_state(comm::ProcessGroup& group, int root, nn::Model& model, optim::Optimizer& optimizer,
                              checkpoint::TrainerState& state);

}  // namespace gradmesh::train
