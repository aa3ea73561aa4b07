// ShardLayout: which rank owns which elements of the flat parameter and
// gradient buffers under ZeRO stages 1 and 2 (docs/zero.md).
//
// The buffer of P elements (nn/model.h: every parameter contiguous, in
// registration order) is cut into buckets, each reduce-scattered as one
// collective. A reduce-scatter hands rank r the r-th of N EQUAL, contiguous
// pieces of its input (comm/process_group.h), so ownership follows the
// buckets: rank r owns the r-th piece of every bucket, and its shard is one
// contiguous range per bucket rather than one range of the whole buffer.
// That is what lets a bucket be reduce-scattered in place, straight from the
// gradient buffer, as soon as backward has finished it (FSDP shards each
// flat parameter the same way).
//
// Invariants:
//   - buckets are listed in launch order, from the top of the buffer down
//     (bucket 0 ends at P and holds the last layers, final first in
//     backward), and together cover [0, P) exactly once;
//   - every bucket but the last (the one starting at 0) has a multiple of N
//     elements; the last has P mod N extra and is padded with zeros up to the
//     next multiple of N — pad elements exist only in the collective's staging
//     buffer, are never updated and belong to nobody;
//   - cuts fall on parameter starts rounded up to the grid P - k*N, so a
//     parameter straddles at most two buckets (fewer than N of its elements
//     reach into the lower one) and any number of rank pieces.
//
// Cost: per step each rank sends (N-1)/N of the padded buffer in the
// reduce-scatters and again in the parameter all-gather: the same bytes as
// one ring all-reduce, split in two halves around the optimizer step.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "gradmesh/nn/model.h"
#include "gradmesh/optim/optimizer.h"

namespace gradmesh::parallel {

// Flat elements [begin, end).
struct FlatRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool operator==(const FlatRange&) const = default;
};

// One reduce-scatter / all-gather unit.
struct ShardBucket {
  FlatRange range;        // the real elements, a slice of the flat buffers
  int64_t piece = 0;      // elements per rank in the collective: ceil(range.size() / N)
  int64_t padded = 0;     // piece * N: the collective's length, range plus zero padding
  int first_param = 0;    // parameters with at least one element in `range`:
  int end_param = 0;      //   [first_param, end_param); the bucket is final when they all are
};

class ShardLayout {
 public:
  // Buckets over `params` (flat-buffer order, contiguous from 0) for
  // `world_size` ranks. A bucket closes once it holds at least its byte
  // budget of float32 gradients (first_bucket_bytes for bucket 0,
  // bucket_bytes after), as GradientReducer's buckets do.
  // REQUIRES: world_size >= 1; both budgets >= 1 (kConfig otherwise).
  ShardLayout(const std::vector<nn::ParameterInfo>& params, int world_size, int64_t first_bucket_bytes,
              int64_t bucket_bytes);

  int world_size() const { return world_size_; }
  int64_t numel() const { return numel_; }  // P
  const std::vector<ShardBucket>& buckets() const { return buckets_; }

  // Rank `rank`'s real elements of bucket `bucket`: the r-th piece clipped to
  // the bucket's end (empty when the piece is all padding).
  FlatRange owned(size_t bucket, int rank) const;
  // Rank `rank`'s shard: its non-empty pieces, by ascending offset.
  std::vector<FlatRange> owned_ranges(int rank) const;
  int64_t shard_numel(int rank) const;
  // Elements each collective moves in all: P plus the last bucket's padding.
  int64_t padded_numel() const;

 private:
  int world_size_ = 1;
  int64_t numel_ = 0;
  std::vector<ShardBucket> buckets_;
};

// The weight decay of one parameter (the trainer's rule, e.g. none for biases).
using WeightDecayRule = std::function<float(const nn::ParameterInfo&)>;

// The optimizer groups of rank `rank`: every parameter intersected with each
// of the rank's pieces, by ascending offset, with the parameter's weight
// decay. A parameter that straddles pieces of several ranks appears, split,
// in each of their lists; one that this rank does not own appears in none.
// An optimizer built from them updates exactly this rank's shard and keeps
// state for it alone (its state() buffers follow the groups' order).
// REQUIRES: `params` is the list the layout was built from.
std::vector<optim::ParamGroup> shard_param_groups(const ShardLayout& layout, int rank,
                                                  const std::vector<nn::ParameterInfo>& params,
                                                  const WeightDecayRule& weight_decay);

}  // namespace gradmesh::parallel
