// Checkpoints of a split model (tensor or pipeline parallelism, with or
// without ZeRO on the dp groups), written in pieces: each writing rank saves
// the elements it provides (WholeModelView) as ranges of the whole model's
// flat buffer, model.shard-<i>-of-<K> and optimizer.shard-<i>-of-<K>
// (checkpoint/model_shards.h, optimizer_state.h), and no rank ever gathers
// the whole model to save it. Rank 0 commits the checkpoint with the
// layout in its manifest. Any layout loads it (restore_split_state,
// restore_state), and `gradmesh export` joins the pieces.
//
// Who writes: without ZeRO the dp replicas are identical, so the ranks of
// dp index 0 (world ranks 0 .. pp x tp - 1) write; under ZeRO every rank
// writes the part of its pieces whose optimizer state it owns.
#pragma once

#include "gradmesh/checkpoint/manifest.h"
#include "gradmesh/checkpoint/snapshot.h"
#include "gradmesh/checkpoint/trainer_state.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/parallel/whole_model_view.h"

namespace gradmesh::train {

struct SplitSave {
  int index = 0;  // this writer, 0 .. count - 1 (its world rank)
  int count = 1;  // the writers
  checkpoint::SavedLayout layout;
};

// Writers of a layout, and whether `world_rank` (at `dp_rank`) is one.
int split_checkpoint_writers(const checkpoint::SavedLayout& layout);
bool writes_split_checkpoint(const checkpoint::SavedLayout& layout, int dp_rank);

// This writer's part of the checkpoint: deep copies of its pieces of the
// weights and of the optimizer state (the elements of its optimizer groups:
// all, or its ZeRO shard), so training may go on at once. Writer 0's
// snapshot also holds trainer.json and names the others' files.
checkpoint::Snapshot take_split_snapshot(const parallel::WholeModelView& view, nn::Model& model,
                                         optim::Optimizer& optimizer, const checkpoint::TrainerState& state,
                                         const SplitSave& save);

}  // namespace gradmesh::train
