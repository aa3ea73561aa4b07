// A checkpoint's weights, whole or in pieces.
//
//   whole    model.safetensors: one tensor per parameter, PyTorch's names and
//            shapes (what one process, data parallelism and ZeRO write).
//   sharded  model.shard-<i>-of-<K>.safetensors, one per rank that holds
//            part of a split model (tensor or pipeline parallelism): one F32
//            tensor "weights" with the rank's elements, and the metadata
//            "ranges" = "<begin>+<count>,..." (ascending) saying which
//            elements of the whole model's flat buffer those are, and
//            "params" = "<name>:<d0>x<d1>,..." naming the whole model's
//            parameters with their shapes in flat-buffer order (a scalar's
//            shape is empty: "<name>:").
//
// Over the set, the ranges cover the whole model exactly once, so any layout
// can take its pieces from them (reshard on load) and `gradmesh export`
// joins them into one model.safetensors. The optimizer's shards use the same
// ranges (optimizer_state.h).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/optimizer_state.h"
#include "gradmesh/checkpoint/snapshot.h"

namespace gradmesh::checkpoint {

inline constexpr const char* kModelFileName = "model.safetensors";
inline constexpr const char* kModelShardOf = "model";

// "wte.weight:65x32,ln.bias:32" <-> the list; parse_param_shapes is strict
// (Error(kFormat) naming `source` and the entry).
std::string param_shapes_text(const std::vector<std::pair<std::string, Shape>>& params);
std::vector<std::pair<std::string, Shape>> parse_param_shapes(const std::string& text, const std::string& source);

// Shard `index` (1-based) of `count`: `values` (1-D F32, the sum of the
// range counts) are the whole model's elements `ranges`; written by `rank`.
TensorFile model_shard_file(int index, int count, int rank, const std::vector<ElementRange>& ranges,
                            const Tensor& values, const std::vector<std::pair<std::string, Shape>>& params,
                            std::map<std::string, std::string> metadata);

// Whether the weights are stored in shards.
bool has_model_shards(const LoadedCheckpoint& checkpoint);

// The whole model's weights in order, from model.safetensors or joined from
// its shards. Error(kFormat) naming the file for a missing or malformed
// "ranges" or "params", shards that disagree on "params", a "weights"
// tensor of the wrong size or dtype, or ranges that do not cover the model
// exactly once; Error(kFormat) naming the checkpoint when it holds neither
// form, or both.
std::vector<NamedTensor> read_model_weights(const LoadedCheckpoint& checkpoint);

}  // namespace gradmesh::checkpoint
