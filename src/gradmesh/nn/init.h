// Parameter initialisation from the counter-based RNG: element j of parameter
// i is a function of (seed, i, j) only, so weights are identical on every
// rank and for every thread count without broadcasting anything.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradmesh/core/tensor.h"

namespace gradmesh::nn {

enum class InitKind {
  kPytorchDefault,  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's Linear/Conv2d default (weights and biases)
  kKaimingNormal,   // N(0, 2/fan_in)
  kKaimingUniform,  // U(-sqrt(6/fan_in), sqrt(6/fan_in))
  kXavierUniform,   // U(-sqrt(6/(fan_in+fan_out)), +)
  kXavierNormal,    // N(0, 2/(fan_in+fan_out))
  kNormal,          // N(0, std^2), std = InitSpec::std (1: PyTorch's Embedding default)
  kZeros,
  kOnes,
};

// "default" | "kaiming_normal" | "kaiming_uniform" | "xavier_uniform" | "xavier_normal"; throws kConfig otherwise.
InitKind parse_weight_init(const std::string& name);

// A parameter that is a piece of a larger one (a tensor-parallel shard):
// its element (r, c), row-major with `cols` columns, is element
// (full row of r, col_begin + c) of the full tensor with `full_cols` columns,
// where the rows of `row_ranges` ([begin, end) of the full tensor's rows,
// in order) are laid end to end. A 1-D piece has cols = full_cols = 1.
// Initialised through it, the piece holds exactly the values the full
// parameter would hold there, so a split model starts as the whole one.
struct InitShard {
  Shape full_shape;  // the whole parameter's
  int64_t full_cols = 1;
  int64_t col_begin = 0;
  int64_t cols = 1;
  std::vector<std::pair<int64_t, int64_t>> row_ranges;
};

// Calls f(piece_offset, whole_offset, count) for each contiguous run of
// elements of the piece: one per row, in the piece's order.
template <class F>
void for_each_piece_run(const InitShard& shard, F&& f) {
  int64_t piece_row = 0;
  for (const auto& [begin, end] : shard.row_ranges)
    for (int64_t r = begin; r < end; ++r, ++piece_row)
      f(piece_row * shard.cols, r * shard.full_cols + shard.col_begin, shard.cols);
}

// The piece `shard` describes, copied out of the whole tensor (float32).
// REQUIRES: whole has shard.full_shape.
Tensor take_piece(const Tensor& whole, const InitShard& shard);
// The opposite: writes `piece` into its place in `whole`.
void put_piece(const Tensor& piece, const InitShard& shard, Tensor& whole);

struct InitSpec {
  InitKind kind = InitKind::kZeros;
  int64_t fan_in = 1;   // of the full parameter when `shard` is set
  int64_t fan_out = 1;
  double std = 1.0;  // kNormal only
  std::shared_ptr<const InitShard> shard = nullptr;  // null: the whole parameter
  // The parameter's place in the whole model, which keys its random stream;
  // -1: its place in the model holding it. A pipeline stage holds some of a
  // model's parameters and sets this, so they start as the whole model's.
  int64_t index = -1;
};

// A layer's weight of `kind` with these fans, and its bias: PyTorch
// initialises biases from U(+-1/sqrt(fan_in)) by default; other schemes
// start them at zero.
inline InitSpec weight_init(InitKind kind, int64_t fan_in, int64_t fan_out) { return {kind, fan_in, fan_out}; }
inline InitSpec bias_init(InitKind weight_kind, int64_t fan_in) {
  return {weight_kind == InitKind::kPytorchDefault ? InitKind::kPytorchDefault : InitKind::kZeros, fan_in, 1};
}

// Fills `t` (float32) as `spec` says, drawing from CounterRng(seed, kInit, param_index).
void initialize(Tensor& t, const InitSpec& spec, uint64_t seed, uint64_t param_index);
// Elements [first, first + count) of that parameter only, into `data`: the
// values initialize() gives them, so a rank can fill just the piece it owns.
void initialize_elements(float* data, int64_t first, int64_t count, const InitSpec& spec, uint64_t seed,
                         uint64_t param_index);

}  // namespace gradmesh::nn
