// Causal multi-head self-attention as one differentiable op (GPT's attention
// block between c_attn and c_proj); see kernels/attention.h for the math.
#pragma once

#include <cstdint>

#include "gradmesh/autograd/variable.h"

namespace gradmesh::autograd {

// qkv [B, T, 3C] (nanoGPT's c_attn output: q, k, v side by side; head h uses
// columns h*D .. (h+1)*D of each, D = C / n_head) -> y [B, T, C].
// Records a backward that saves only qkv, y and the per-row log-sum-exp.
// A qkv that is not 3-D, or whose last dim is not a positive multiple of
// 3 * n_head, or n_head < 1, is Error(kShape) naming the shape.
Variable causal_self_attention(const Variable& qkv, int64_t n_head);

}  // namespace gradmesh::autograd
