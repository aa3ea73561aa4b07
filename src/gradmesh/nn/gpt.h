// A GPT-style decoder-only transformer language model (the layout of
// nanoGPT's GPT, so a PyTorch nn.Module of the same config loads the weights
// by name):
//
//   transformer.wte   Embedding(vocab_size, n_embd)      token embedding
//   transformer.wpe   Embedding(block_size, n_embd)      position embedding
//   transformer.h.i   Block: x + attn(ln_1(x)), then x + mlp(ln_2(x))
//       attn.c_attn   Linear(n_embd, 3 n_embd)  q, k, v of every head
//       attn.c_proj   Linear(n_embd, n_embd)
//       mlp.c_fc      Linear(n_embd, 4 n_embd), GELU (exact)
//       mlp.c_proj    Linear(4 n_embd, n_embd)
//   transformer.ln_f  LayerNorm(n_embd)
//   lm_head           Linear(n_embd, vocab_size, no bias); with tie_weights
//                     it is transformer.wte's matrix and has no entry of its own
//
// With GptSpec::split (tensor parallelism, Megatron's layout) c_attn and c_fc
// are column-parallel, both c_proj row-parallel, wte and lm_head split by
// vocabulary rows; names and parameter order stay as above.
//
// Initialisation as nanoGPT's: weights N(0, 0.02), each residual projection
// (c_proj) N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm 1 and 0. Dropout
// (when > 0) follows the embeddings and each residual branch; attention
// weights are not dropped. With recompute, blocks are checkpointed
// (autograd::checkpoint). Causal attention runs fused
// (autograd::causal_self_attention): the [T, T] scores never exist whole.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gradmesh/nn/layers.h"
#include "gradmesh/nn/tensor_split.h"

namespace gradmesh::nn {

// One pipeline stage of a GPT: blocks [block_begin, block_end) (-1: to the
// last), the embeddings on stage 0, ln_f and the head on the last stage (a
// tied head keeps its own copy of the token table there). count = 1: whole.
struct GptStage {
  int index = 0, count = 1;
  int64_t block_begin = 0, block_end = -1;
};

struct GptSpec {
  int64_t vocab_size = 256;
  int64_t block_size = 128;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  float dropout = 0.0f;
  bool tie_weights = true;
  // Activation checkpointing: while training, each block keeps only its
  // input and recomputes its activations during backward
  // (autograd/checkpoint.h): less memory, one more block forward per step.
  bool recompute = false;
  // Tensor parallelism (nn/tensor_split.h): attention heads, the MLP's hidden
  // features and the vocabulary divided among the group's ranks; the logits
  // stay split ([B * T, this rank's part of the vocabulary]) and loss() and
  // predict() work on them without gathering. Null: the whole model.
  std::shared_ptr<TensorSplit> split = nullptr;
  // Pipeline parallelism: which stage this model is. A stage holds only its
  // parameters, under the whole model's names; each starts as the whole
  // model's. Its forward takes token ids (first stage) or the previous
  // stage's activations [B, T, C], and returns activations or (last) logits.
  GptStage stage = {};
};

// Throws Error(kConfig) naming the key when a GptSpec cannot be built
// (n_embd not divisible by n_head, a size below 1).
void check_gpt_spec(const GptSpec& spec);

// Keys and values of every block for the positions generated so far, so each
// new token costs one position of attention, not the whole context.
struct KvCache {
  int64_t length = 0;                // positions cached
  std::vector<Tensor> keys, values;  // per block: [block_size, n_embd]
};

class GptBlock;

class Gpt : public Module {
 public:
  explicit Gpt(const GptSpec& spec);
  // ids [B, T] (token ids as floats, T <= block_size) -> logits [B * T, vocab_size].
  Variable forward(const Variable& ids) override;
  std::string describe() const override;
  const GptSpec& spec() const { return spec_; }
  // Units (ZeRO stage 3 gathers one at a time): the two embeddings, each
  // block, and the head (ln_f with lm_head, or with wte when tied).
  std::vector<std::vector<Parameter*>> parameter_units() override;
  // Split: the vocabulary-parallel cross-entropy and argmax.
  Variable loss(const Variable& output, const std::vector<int32_t>& labels, float denominator) override;
  void predict(const Variable& output, int32_t* classes) override;

  // Generation (no tape): an empty cache for this model (a stage: its blocks;
  // split: its heads' columns).
  KvCache new_cache() const;
  // Feeds `token` at position cache.length and returns the logits [vocab_size]
  // of the next token. REQUIRES: cache.length < block_size (kUsage otherwise).
  Tensor next_token_logits(int64_t token, KvCache& cache);
  // The same for n sequences at once, each with its own cache and position
  // (continuous batching): the layers' matrix products run once over all n
  // tokens, attention per sequence over its own cache. Returns [n, vocab_size].
  // REQUIRES: every cache.length < block_size (kUsage otherwise).
  Tensor next_token_logits_batch(const std::vector<int64_t>& tokens, const std::vector<KvCache*>& caches);
  // The same step on this model's part of a split GPT (sharded serving): the
  // first stage takes the n token ids (as floats, [n]), a later stage the
  // previous stage's activations [n, n_embd]; returns activations [n, n_embd],
  // or on the last stage the logits [n, this rank's vocabulary columns]
  // (nn/tensor_split.h). Caches come from this model's new_cache(): its own
  // blocks, its own heads. Collective over the tensor-parallel group.
  Tensor decode_stage(const Tensor& input, const std::vector<KvCache*>& caches);

 private:
  GptSpec spec_;
  TensorSplit* split_ = nullptr;
  Module* wte_;  // an Embedding, or split_'s vocab_embedding
  Embedding* wpe_;
  std::vector<GptBlock*> blocks_;
  LayerNorm* ln_f_;
  Module* lm_head_;  // null when tied; a Linear or split_'s column_linear
  std::vector<Dropout*> dropouts_;
};

std::unique_ptr<Gpt> build_gpt(const GptSpec& spec);

// Each row's last position of a forward pass's output: out [rows * T, width]
// (logits, or one shard's columns of them) -> [rows, width].
Tensor last_positions(const Tensor& out, int64_t rows, int64_t t);

// Parameters of a GPT of this spec (the tied head counted once); with
// `tensor_parallel` > 1, those of the rank holding the most (split layers
// divided, the rest whole); of spec.stage's blocks and ends only (a tied
// head on a last stage that does not embed counts its own table).
int64_t gpt_parameter_count(const GptSpec& spec, int tensor_parallel = 1);

}  // namespace gradmesh::nn
