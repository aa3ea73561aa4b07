// Snapshot: everything one checkpoint holds, copied out of the training
// state so a background thread can write it while training continues.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gradmesh/checkpoint/manifest.h"
#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/core/tensor.h"

namespace gradmesh::checkpoint {

// One safetensors file of a checkpoint. Sharded state is one TensorFile per
// shard, named with shard_file_name() (manifest.h) so the manifest records it.
struct TensorFile {
  std::string name;                  // "model.safetensors": a plain file name, unique in the snapshot
  std::vector<NamedTensor> tensors;  // owned copies (see copy_tensors)
  std::map<std::string, std::string> metadata;
  int rank = 0;                      // writer rank recorded in the manifest
};

struct Snapshot {
  int64_t step = 0;
  int world_size = 1;
  std::optional<SavedLayout> layout;  // the manifest's "layout" (split runs)
  std::vector<TensorFile> tensor_files;
  std::vector<std::pair<std::string, std::string>> text_files;  // {"trainer.json", "..."}
  // State written by several ranks (ZeRO's optimizer shards), see
  // CheckpointWriter: a part is one rank's files for another rank (the
  // committer) to take into the checkpoint; `parts_from_others` are the
  // file names the committer waits for before it writes the manifest.
  bool is_part = false;
  std::vector<std::string> parts_from_others;
};

// Deep copies of `views` (e.g. parameters living in one flat buffer) into
// fresh storage, so later optimizer steps do not change the snapshot.
std::vector<NamedTensor> copy_tensors(const std::vector<std::pair<std::string, Tensor>>& views);

// Sum of the tensors' bytes: what a snapshot costs in memory.
int64_t snapshot_tensor_bytes(const Snapshot& snapshot);

}  // namespace gradmesh::checkpoint
