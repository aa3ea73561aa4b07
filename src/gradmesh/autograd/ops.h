// Differentiable ops: each computes its forward result now and, when any
// input requires a gradient and grad mode is on, records its backward on the
// current tape. Optional inputs (bias, gamma, beta) are undefined Variables.
// Shapes are written as [dims]; a mismatch is an Error(kShape) naming the op.
#pragma once

#include <cstdint>
#include <vector>

#include "gradmesh/autograd/variable.h"
#include "gradmesh/kernels/activation.h"

namespace gradmesh::autograd {

using kernels::Activation;

// y [B, out] = act(x [B, in] * weight[out, in]^T + bias[out]); act: kNone or kRelu (fused epilogue).
Variable linear(const Variable& x, const Variable& weight, const Variable& bias, Activation act = Activation::kNone);

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  Activation act = Activation::kNone;  // kNone or kRelu (fused epilogue)
  // Channel-major activations are [C, N, H, W]: the GEMM's natural output.
  // A conv feeding a conv or a flatten (through pools and activations) uses
  // them to skip two permutes; nn::Sequential plans this.
  bool channel_major_input = false;
  bool channel_major_output = false;
};
// y [N, OC, OH, OW] from x [N, C, H, W], weight [OC, C, KH, KW], bias [OC]
// (x and y [C, N, H, W] and [OC, N, OH, OW] with the channel-major flags).
Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias, const Conv2dOptions& options);

// Max pooling with a square window; PyTorch's default stride = kernel.
// act = kRelu applies ReLU to the pooled output: relu(maxpool(x)) equals
// maxpool(relu(x)) exactly (ReLU is monotonic), values and gradients, and
// costs a quarter of the memory traffic when fused here instead of into the
// convolution before it.
Variable max_pool2d(const Variable& x, int64_t kernel, int64_t stride, int64_t padding,
                    Activation act = Activation::kNone);

Variable activation(const Variable& x, Activation act);

// Inverted dropout; the mask is keyed by (seed, step_key, global sample index).
// Identity when p == 0. x is [rows, ...]; first_sample is the global index of row 0.
Variable dropout(const Variable& x, float p, uint64_t seed, uint64_t step_key, int64_t first_sample);

// Normalises over the last dimension.
Variable layer_norm(const Variable& x, const Variable& gamma, const Variable& beta, float eps);

// out [ids.size(), dim] = table[ids]; table [rows, dim].
Variable embedding(const std::vector<int64_t>& ids, const Variable& table);

// [C, N, H, W] (channel-major) -> [N, C*H*W], the order Flatten gives for [N, C, H, W].
Variable flatten_channel_major(const Variable& x);

// A view with a new shape (same element count); the gradient flows back unchanged.
Variable reshape(const Variable& x, const Shape& shape);

Variable add(const Variable& a, const Variable& b);

// factor * x, elementwise.
Variable scale(const Variable& x, float factor);

// sum over rows of -log softmax(logits)[label], divided by `denominator`
// (0 = number of rows, i.e. the mean). A data-parallel worker passes the
// global batch size so the sum of all ranks' gradients is the exact mean.
Variable cross_entropy(const Variable& logits, const std::vector<int32_t>& labels, float denominator = 0);

// sum of squared errors / denominator (0 = element count, i.e. the mean).
Variable mse_loss(const Variable& pred, const Tensor& target, float denominator = 0);

}  // namespace gradmesh::autograd
