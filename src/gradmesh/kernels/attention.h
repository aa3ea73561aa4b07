// Fused causal multi-head self-attention (GPT's attention block after c_attn).
//
// The forward pass is flash-attention style: queries and keys are taken in
// blocks, each query row keeps a running maximum, sum and output, and key
// blocks entirely above the diagonal are never visited, so no [T, T] matrix
// exists. The backward pass recomputes the probabilities of each block from
// the saved log-sum-exp instead of storing them.
//
// Determinism: each (batch, head) pair is computed by one thread with a fixed
// order of operations, and the work is spread over the compute pool by pairs
// only, so results are bit-identical for any thread count. The code is
// compiled once per ISA level with lane-wise arithmetic, its multiply-adds
// fused explicitly or (train.portable_numerics) not at all, never by the
// compiler, so results are also identical at every level (kernels/isa.h).
// Under train.precision = "bf16" the products take bf16 values.
#pragma once

#include <cstdint>

namespace gradmesh::kernels {

struct AttentionShape {
  int64_t batch, seq, heads, head_dim;  // C = heads * head_dim
};

// qkv [B, T, 3C] packed as nanoGPT's c_attn output: q = columns [0, C), k = [C, 2C), v = [2C, 3C);
// head h uses columns h*D .. (h+1)*D of each. Scores are q.k / sqrt(D), causal (query t sees keys 0..t).
// y [B, T, C]: heads concatenated (nanoGPT's y.transpose(1, 2).view(B, T, C)).
// lse [B, heads, T]: per query row the log-sum-exp of its scaled, masked scores (saved for backward).
void causal_attention_forward(const float* qkv, const AttentionShape& s, float* y, float* lse);

// dqkv [B, T, 3C] (+)= the gradient through q, k and v given dy [B, T, C]; written when
// accumulate is false, added when true. Recomputes the probabilities from qkv and lse.
void causal_attention_backward(const float* qkv, const float* y, const float* lse, const float* dy,
                               const AttentionShape& s, float* dqkv, bool accumulate);

// One new position per sequence during generation with a key/value cache:
// q [heads*D] of the new position; k_cache, v_cache [length, C] (rows 0..length-1, the new
// position's k/v already appended as row length-1); y [C]. Bit-identical to row length-1 of
// causal_attention_forward over the same keys and values.
void attention_decode(const float* q, const float* k_cache, const float* v_cache, int64_t length, int64_t heads,
                      int64_t head_dim, float* y);

// The plain oracle for tests: explicit scores, mask and softmax in double, one row at a time.
// y [B, T, C]; lse [B, heads, T] may be null.
void causal_attention_reference(const float* qkv, const AttentionShape& s, float* y, float* lse);

}  // namespace gradmesh::kernels
