// 2-D convolution as one large GEMM per batch (im2col over the whole batch).
//
// Layout: x [N, C, H, W], w [OC, C, KH, KW] (PyTorch's), y [N, OC, OH, OW].
// Forward:  col [C*KH*KW (+1), N*OH*OW] = im2col(x)  (+ a row of ones)
//           ycol [OC, N*OH*OW] = [w | b] * col          (one GEMM, long N side; the
//                                                         ones row adds the bias)
//           y[n, oc] = ycol[oc, n]                      (a permute, unless the consumer
//                                                         takes channel-major input)
// Backward: [dw | db] = dycol * col^T;  dcol = w^T * dycol;  dx (+)= col2im(dcol).
// One GEMM with N*OH*OW columns keeps BLAS in its efficient regime where
// per-image GEMMs (e.g. 64 x 288 x 121 for the reference CNN) would not.
// ycol is itself a valid "channel-major" activation [OC, N, OH, OW]: a conv
// feeding another conv (through pooling and activations, which do not care
// about plane order) skips both permutes.
#pragma once

#include <cstdint>

#include "gradmesh/kernels/activation.h"

namespace gradmesh::kernels {

struct ConvGeometry {
  int64_t batch, in_channels, height, width;
  int64_t out_channels, kernel_h, kernel_w;
  int64_t stride, padding;
  bool channel_major_input = false;  // x is [C, N, H, W] instead of [N, C, H, W]
  // Offset of input plane (n, c) in planes.
  int64_t input_plane(int64_t n, int64_t c) const { return channel_major_input ? c * batch + n : n * in_channels + c; }
  int64_t out_h() const { return (height + 2 * padding - kernel_h) / stride + 1; }
  int64_t out_w() const { return (width + 2 * padding - kernel_w) / stride + 1; }
  int64_t col_rows() const { return in_channels * kernel_h * kernel_w; }
  int64_t col_cols() const { return batch * out_h() * out_w(); }
};

// col [C*KH*KW, N*OH*OW] from x; padding reads as zero. With ones_row, row
// C*KH*KW (one more) is all ones, so a GEMM with [w | b] adds the bias.
void im2col(const ConvGeometry& g, const float* x, float* col, bool ones_row = false);
// dx (+)= the adjoint of im2col applied to dcol (its first C*KH*KW rows).
void col2im(const ConvGeometry& g, const float* dcol, float* dx, bool accumulate);

// y [N, OC, OH*OW] = act(ycol [OC, N*OH*OW] + bias[OC]); act is kNone or kRelu; bias may be null.
void conv_output_from_columns(const ConvGeometry& g, const float* ycol, const float* bias, Activation act, float* y);
// dycol [OC, N*OH*OW] = permute(dy), zeroed where the fused ReLU output y <= 0 (y null: no mask).
void conv_columns_from_output_grad(const ConvGeometry& g, const float* dy, const float* y, float* dycol);

// Reference: direct 7-loop convolution in double, for tests.
void conv2d_reference(const ConvGeometry& g, const float* x, const float* w, const float* bias, float* y);

}  // namespace gradmesh::kernels
