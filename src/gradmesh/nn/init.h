// Parameter initialisation from the counter-based RNG: element j of parameter
// i is a function of (seed, i, j) only, so weights are identical on every
// rank and for every thread count without broadcasting anything.
#pragma once

#include <cstdint>
#include <string>

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

struct InitSpec {
  InitKind kind = InitKind::kZeros;
  int64_t fan_in = 1;
  int64_t fan_out = 1;
  double std = 1.0;  // kNormal only
};

// Fills `t` (float32) as `spec` says, drawing from CounterRng(seed, kInit, param_index).
void initialize(Tensor& t, const InitSpec& spec, uint64_t seed, uint64_t param_index);
// Elements [first, first + count) of that parameter only, into `data`: the
// values initialize() gives them, so a rank can fill just the piece it owns.
void initialize_elements(float* data, int64_t first, int64_t count, const InitSpec& spec, uint64_t seed,
                         uint64_t param_index);

}  // namespace gradmesh::nn
