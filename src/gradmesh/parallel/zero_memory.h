// What one data-parallel rank holds for training state under ZeRO stage
// 0 (plain data parallelism) to 3, with float32 (4-byte) values: the
// formula of the ZeRO paper (Rajbhandari et al., 2020, section 5) for our
// optimizers. Activations, buckets in flight and scratch are left out: they
// do not depend on the stage.
//
//   stage 0: params P + grads P + optimizer state k*P          (all replicated)
//   stage 1: params P + grads P + optimizer state k*P / N
//   stage 2: params P + grads P / N + optimizer state k*P / N
//   stage 3: params P / N + grads P / N + optimizer state k*P / N
//
// with k the optimizer's state floats per parameter (sgd 0, sgd with
// momentum 1, adamw 2) and X / N rounded up to whole elements per rank
// (the padding a shard carries).
#pragma once

#include <cstdint>
#include <string>

namespace gradmesh::parallel {

struct ZeroMemory {
  int64_t params_bytes = 0;
  int64_t grads_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t total_bytes() const { return params_bytes + grads_bytes + optimizer_bytes; }
};

// Float32 state values each optimizer keeps per parameter: "sgd" 0, or 1
// with momentum != 0; "adamw" 2. Another name is Error(kConfig) naming
// optim.name and the known ones.
int optimizer_state_per_param(const std::string& optimizer, double momentum);

// Per-rank bytes for `num_params` parameters on `world_size` ranks.
// REQUIRES: stage in 0..3, num_params >= 0, world_size >= 1 (kConfig otherwise).
ZeroMemory zero_memory_per_rank(int stage, int64_t num_params, int world_size, int state_per_param);

// "12.5 MiB": bytes in MiB with one decimal, as the descriptions spell them.
std::string mib_text(int64_t bytes);

// "params 1.2 MiB + grads 0.3 MiB + optimizer 0.6 MiB = 2.1 MiB per rank (ZeRO stage 2, 4 ranks)".
std::string describe_zero_memory(const ZeroMemory& memory, int stage, int world_size);

}  // namespace gradmesh::parallel
