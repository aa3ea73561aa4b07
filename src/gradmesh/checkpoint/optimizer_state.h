// The optimizer state inside a checkpoint, in either of its two forms, read
// back as pieces of the flat parameter buffer so that state saved at any
// world size and ZeRO stage can be cut for any other (docs/checkpoint.md):
//
//   whole    optimizer.safetensors: one tensor per parameter and state buffer
//            under PyTorch's state_dict names, "state.<i>.<key>" (i the
//            parameter's index, key "exp_avg", "exp_avg_sq",
//            "momentum_buffer"), shaped like the parameter, and
//            "state.<i>.step" ([1]). Parameter i covers the flat elements after
//            those of parameters 0..i-1.
//   sharded  optimizer.shard-<r+1>-of-<N>.safetensors, one per rank (ZeRO):
//            per key one flat tensor of the rank's elements, "step" ([1]),
//            and the metadata "ranges" = "<begin>+<count>,..." saying which
//            elements of the flat buffer those are, in tensor order.
//
// Both carry the metadata "optimizer" (sgd, adamw) and "param_names" (the
// parameters in flat-buffer order, comma-separated).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/snapshot.h"
#include "gradmesh/core/tensor.h"

namespace gradmesh::checkpoint {

inline constexpr const char* kOptimizerFileName = "optimizer.safetensors";
inline constexpr const char* kOptimizerShardOf = "optimizer";

// Flat elements [begin, begin + count).
struct ElementRange {
  int64_t begin = 0, count = 0;
  bool operator==(const ElementRange&) const = default;
};

// Stored values of flat elements [begin, begin + values.numel()): a 1-D F32 view.
struct StatePiece {
  int64_t begin = 0;
  Tensor values;
};

struct StoredOptimizerState {
  std::string source;                    // the file, for messages
  std::string optimizer;                 // metadata "optimizer"
  std::vector<std::string> param_names;  // metadata "param_names"
  Tensor step;                           // [1]
  // PyTorch key ("exp_avg", "momentum_buffer") -> its pieces, ascending and disjoint.
  std::map<std::string, std::vector<StatePiece>> pieces;
};

// "a+3,b+4" <-> ranges; parse_ranges is strict (Error(kFormat) naming `source`).
std::string ranges_text(const std::vector<ElementRange>& ranges);
std::vector<ElementRange> parse_ranges(const std::string& text, const std::string& source);
// parse_ranges, and each range after the one before it (as shards write them).
std::vector<ElementRange> parse_ascending_ranges(const std::string& text, const std::string& source);

// The optimizer files of a checkpoint: {"optimizer.safetensors"}, or the
// shard files 1..N in index order. Error(kFormat) naming the checkpoint when
// it has none, both forms, or a shard set that is incomplete or whose counts
// disagree.
std::vector<std::string> optimizer_state_files(const LoadedCheckpoint& checkpoint);

// One optimizer file read (and verified against the manifest) as pieces.
// Error(kFormat) naming the file and tensor for anything malformed.
StoredOptimizerState read_optimizer_state(const LoadedCheckpoint& checkpoint, const std::string& file);

// The shard file of rank `rank` of `world_size`: `buffers` (key -> 1-D F32
// tensor of the rank's elements, in `ranges` order) and `step`, with
// `metadata` (optimizer, param_names, ...) plus "ranges".
// REQUIRES: every buffer holds the sum of the range counts.
TensorFile optimizer_shard_file(int rank, int world_size, const std::vector<ElementRange>& ranges,
                                const std::vector<std::pair<std::string, Tensor>>& buffers, const Tensor& step,
                                std::map<std::string, std::string> metadata);

// Error(kFormat) "<what>: ..." unless `ranges` (any order) cover [0, numel)
// exactly once.
void check_ranges_tile(std::vector<ElementRange> ranges, int64_t numel, const std::string& what);

// Every file's pieces assembled into one [numel] buffer per key (the whole
// form's per-element state, whatever form was stored). Error(kFormat) when
// the files disagree on the optimizer, the step or the keys, or their pieces
// do not cover [0, numel) exactly once.
struct ConsolidatedOptimizerState {
  std::string optimizer;
  std::vector<std::string> param_names;
  Tensor step;                          // [1]
  std::map<std::string, Tensor> values;  // key -> [numel]
};
ConsolidatedOptimizerState consolidate_optimizer_state(const LoadedCheckpoint& checkpoint, int64_t numel);

}  // namespace gradmesh::checkpoint
