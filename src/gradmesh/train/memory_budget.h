// What one rank of a training run will hold, estimated from the config
// before anything large is allocated; the memory limit the process runs
// under; and the check between the two, so a run that cannot fit stops at
// start with a sentence instead of being killed by the OOM killer (or
// failing an allocation) minutes later.
//
// The estimate is the ZeRO formula (parallel/zero_memory.h: parameters,
// gradients and optimizer state as the stage shards them) plus the
// activations one micro-batch keeps for backward:
//
//   GPT, floats per token (C = n_embd, H = n_head, V = vocab, L = n_layer):
//     block = 18C + H + 4           every tensor a block's forward creates and the
//                                   tape keeps: ln_1 C (+2 stats), qkv 3C, attention C
//                                   (+H log-sum-exp), c_proj C, residual C, ln_2 C (+2),
//                                   c_fc 4C, GELU 4C, c_proj C, residual C
//             + 2.5C                with dropout > 0: two dropouts, output C + byte mask C/4
//     head  = 4C + 2 + 2V           token and position rows, their sum, ln_f (+2),
//             + 1.25C               logits V and the softmax probabilities V kept by
//                                   the loss; the embedding dropout when dropout > 0
//     kept  = L * block             or, with model.recompute, (L + 1) * C + block:
//                                   each checkpointed block keeps its input and output,
//                                   and one block is recomputed at a time in backward
//     bytes = 4 * rows * block_size * (kept + head)
//   MLP, floats per sample: 2h (+1.25h with dropout) per hidden layer h, and
//     2 * classes for the logits and probabilities.
//   CNN: not estimated (0).
//
// with rows = the samples of this rank's largest micro-batch,
// ceil(ceil(batch_size / N) / accum_steps).
//
// A split GPT (parallel.mesh) counts the rank that holds the most:
//   tp    each block keeps 6C + 4 floats per token whole and 12C + H split
//         (qkv, attention, c_fc, GELU), the logits and probabilities 2V/tp;
//         parameters as nn::gpt_parameter_count(spec, tp) splits them.
//   pp    every stage is estimated with its own blocks, the first with the
//         embeddings (3C), the last with ln_f and the head (C + 2 + 2V);
//         rows are one pipeline micro-batch, ceil(ceil(batch_size / dp) /
//         micro_batches), times the micro-batches a stage holds at once under
//         the schedule (1F1B: min(pp - stage, m); GPipe: m); the stage with
//         the largest total is reported.
// Not counted: the dataset, the
// buckets and scratch of the reducers, the transient gradients of backward,
// thread stacks, libraries. It is a floor: a run above it cannot fit, one
// below it may still not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/gpt.h"
#include "gradmesh/obs/json_object.h"
#include "gradmesh/parallel/mesh.h"
#include "gradmesh/parallel/zero_memory.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/model_factory.h"

namespace gradmesh::train {

struct MemoryEstimate {
  parallel::ZeroMemory state;    // parameters, gradients and optimizer state of one rank
  int64_t activation_bytes = 0;  // 0 when not estimated (CNN)
  int stage = 0;                 // the ZeRO stage in effect (0 on one process)
  int world_size = 1;            // the ranks that shard the state (dp)
  parallel::MeshShape mesh;      // the layout estimated
  int pipeline_stage = 0;        // pp > 1: the stage reported (the largest)
  int64_t total_bytes() const { return state.total_bytes() + activation_bytes; }
  // "params 3.0 MiB + grads 0.8 MiB + optimizer 1.5 MiB + activations 2.0 MiB = 7.3 MiB per rank (ZeRO stage 2, 4 ranks)"
  std::string describe() const;
};

// Activation bytes of `rows` samples of the GPT (formula above): of the
// blocks and ends spec.stage holds, with `tensor_parallel` ranks splitting it.
int64_t gpt_activation_bytes(const nn::GptSpec& spec, int64_t rows, int tensor_parallel = 1);
// The samples of one rank's largest micro-batch.
int64_t micro_batch_rows(const TrainConfig& train, int world_size);

// The estimate for one of `world_size` ranks training `num_params`
// parameters as `config` says (parallel.zero applies with several ranks only).
MemoryEstimate estimate_rank_memory(const Config& config, const InputGeometry& geometry, int64_t num_params,
                                    int world_size);
// The same for one rank of `mesh` (dp replicas of a model split pp x tp):
// the largest of the ranks' estimates.
MemoryEstimate estimate_rank_memory(const Config& config, const InputGeometry& geometry,
                                    const parallel::MeshShape& mesh);

struct MemoryLimit {
  int64_t bytes = 0;
  std::string source;   // "RLIMIT_AS (ulimit -v)", "cgroup memory.max (/sys/fs/cgroup/a/memory.max)"
  bool shared = false;  // a cgroup's: every process in it (this node's ranks) counts against it
};

// Where cgroup file systems are mounted (replaceable in tests).
struct CgroupMounts {
  std::vector<std::string> v2_roots = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
  std::string v1_memory_root = "/sys/fs/cgroup/memory";
};

// The tightest memory limit of the cgroup `proc_self_cgroup` (the text of
// /proc/self/cgroup) names and its ancestors: cgroup v2 memory.max, or cgroup
// v1 memory.limit_in_bytes; "max" and v1's "unlimited" (>= 2^62) count as none.
std::optional<MemoryLimit> cgroup_memory_limit(const std::string& proc_self_cgroup, const CgroupMounts& mounts = {});

// The tightest of RLIMIT_AS and this process's cgroup limit; nullopt when neither is set.
std::optional<MemoryLimit> process_memory_limit();

// Error(kConfig) naming the estimate, the limit and where it comes from, and
// what to change, when `estimate` exceeds `limit` (for a shared cgroup limit:
// `local_ranks` estimates, one per rank of this node).
void check_memory_fits(const MemoryEstimate& estimate, const std::optional<MemoryLimit>& limit, int local_ranks);

// The ranks of this node: LOCAL_WORLD_SIZE of a launched worker, else 1.
int local_rank_count();

// The start-up line: "memory (estimate): <describe>; limit 4096.0 MiB from <source>".
std::string memory_message(const MemoryEstimate& estimate, const std::optional<MemoryLimit>& limit);
// metrics.jsonl's {"type": "memory", "estimate_bytes", "params_bytes", "grads_bytes", "optimizer_bytes",
// "activation_bytes", "zero_stage", "world_size"[, "limit_bytes", "limit_source"]}.
obs::JsonObject memory_metrics(const MemoryEstimate& estimate, const std::optional<MemoryLimit>& limit);

}  // namespace gradmesh::train
