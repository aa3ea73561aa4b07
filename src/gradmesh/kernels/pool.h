// Max pooling over [N, C, H, W] with the argmax kept for the backward pass.
#pragma once

#include <cstdint>

namespace gradmesh::kernels {

struct PoolGeometry {
  int64_t planes;  // N * C
  int64_t height, width, kernel, stride, padding;
  int64_t out_h() const { return (height + 2 * padding - kernel) / stride + 1; }
  int64_t out_w() const { return (width + 2 * padding - kernel) / stride + 1; }
};

// y[p, oy, ox] = max of the window; argmax[...] = flat index of the max within the input plane
// (first on ties, as PyTorch). Padding never wins (it reads as -inf).
void max_pool_forward(const PoolGeometry& g, const float* x, float* y, int32_t* argmax);
// dx (+)= dy routed to each window's argmax.
void max_pool_backward(const PoolGeometry& g, const float* dy, const int32_t* argmax, float* dx, bool accumulate);

}  // namespace gradmesh::kernels
