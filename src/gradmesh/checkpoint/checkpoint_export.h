// `gradmesh export`: one consolidated safetensors file from any checkpoint,
// whole or sharded, for PyTorch (safetensors.torch.load_file) or for
// gradmesh eval/generate --weights.
#pragma once

#include <cstdint>
#include <string>

namespace gradmesh::checkpoint {

struct ExportResult {
  std::string checkpoint;      // the step-<N> directory exported
  int64_t step = 0;
  std::string weights_path;    // the model's parameters
  int64_t weights_tensors = 0;
  std::string optimizer_path;  // empty unless with_optimizer
  int64_t optimizer_tensors = 0;
};

// <output without ".safetensors">.optimizer.safetensors
std::string optimizer_export_path(const std::string& output);

// Loads `checkpoint_path` as gradmesh train --resume does (a step directory,
// a checkpoints directory or a run directory; verified), writes the model's
// parameters to `output` (PyTorch names, as stored, metadata format "pt",
// step and source checkpoint) and, with `with_optimizer`, the optimizer
// state consolidated from every shard to optimizer_export_path(output):
// "state.<i>.<key>" per parameter, shaped like it, and "state.<i>.step",
// exactly the tensors a whole (unsharded) checkpoint's optimizer.safetensors
// holds. Errors as the loader's (kIo, kFormat naming the file); the files
// are written atomically.
ExportResult export_checkpoint(const std::string& checkpoint_path, const std::string& output, bool with_optimizer);

}  // namespace gradmesh::checkpoint
