// Winograd convolution F(MxM, 3x3), M = 2 or 4: 3x3 kernels, stride 1, any
// padding.
//
// Every MxM block of outputs ("tile") is computed from an alpha x alpha input
// patch (alpha = M + 2) as
//   Y = A^T [ sum_c (G g G^T) ⊙ (B^T d B) ] A,
// so the alpha^2 elements of the transformed domain are independent GEMMs
//   M[e] [OC, T] = U[e] [OC, C] * V[e] [C, T]          (T = tiles)
// with alpha^2 * OC * C * T multiply-adds instead of 9 * M^2 * OC * C * T:
// 2.25x fewer for F(2x2), 4x fewer for F(4x4). The reference CNN's 11x11
// output is covered by 3x3 tiles of 4x4 (12x12), 3.4x fewer than im2col.
//
// Backward passes are the exact adjoints of the forward computation, on the
// same tiles (no full-padded correlation with its larger tile count):
//   dM[e] = A dY A^T                      (per tile, zero beyond the output)
//   dU[e] = dM[e] * V[e]^T,   dg = G^T dU G   (weights)
//   dV[e] = U[e]^T * dM[e],   dx += B dV B^T   (input; patches overlap by 2)
// The GEMMs go through gemm(), so gemm_flops() counts the multiply-adds
// actually issued (the Winograd-domain ones), not the direct-convolution
// equivalent: achieved GFLOP/s stays a measure of hardware efficiency, and a
// step's FLOP count drops with the algorithm.
//
// Rounding: the transforms combine several inputs with coefficients up to 8
// (F(4x4)) before and after the products, so the error grows with those
// magnitudes rather than with the result alone: a few times im2col's for
// F(2x2), tens of times for F(4x4), still ~1e-5 relative on unit-scale
// data; see tests/kernels/conv_winograd_test.cc for the bounds. Results are
// deterministic: every sum runs in a fixed order on one thread, and the
// per-ISA builds of the transforms give bit-identical results.
//
// Layouts: ConvGeometry as for im2col (x [N, C, H, W] or channel-major
// [C, N, H, W]); y and dy [N, OC, OH, OW] or, with channel_major_output,
// [OC, N, OH, OW]. Tile t = (n * tiles_h + ty) * tiles_w + tx.
#pragma once

#include <cstdint>

#include "gradmesh/kernels/activation.h"
#include "gradmesh/kernels/conv.h"

namespace gradmesh::kernels {

// True when the Winograd path computes g: 3x3 kernel, stride 1.
bool winograd_applicable(const ConvGeometry& g);
// The output tile size M (2 or 4) that issues fewer multiply-adds for g.
int winograd_choose_tile(const ConvGeometry& g);

// Buffer sizes in floats for tile size `tile` (2 or 4); alpha = tile + 2.
int64_t winograd_weight_floats(const ConvGeometry& g, int tile);   // u: alpha^2 * OC * C
int64_t winograd_input_floats(const ConvGeometry& g, int tile);    // v: alpha^2 * C * tiles
int64_t winograd_scratch_floats(const ConvGeometry& g, int tile);  // forward / backward scratch

// u [alpha^2, OC, C] = G w G^T for w [OC, C, 3, 3].
void winograd_weights(const ConvGeometry& g, int tile, const float* w, float* u);

// y = act(conv(x, w) + bias) with u = winograd_weights(w); bias may be null,
// act is kNone or kRelu. v [alpha^2, C, tiles] receives the transformed
// input, which winograd_backward needs for the weight gradient.
// REQUIRES: winograd_applicable(g); tile 2 or 4; buffers of the sizes above.
void winograd_forward(const ConvGeometry& g, int tile, const float* x, const float* u, const float* bias,
                      Activation act, bool channel_major_output, float* v, float* scratch, float* y);

struct WinogradGrads {
  float* du = nullptr;    // [alpha^2, OC, C], overwritten (then winograd_weight_grad); null: skip
  float* db = nullptr;    // [OC], overwritten with the bias gradient; null: skip
  float* dx = nullptr;    // input layout of g; null: skip
  bool dx_accumulate = false;
};

// Gradients of winograd_forward given dy. y_for_mask (the forward output)
// applies the fused ReLU's mask (y <= 0 blocks the gradient); null: no mask.
// REQUIRES: u and v from the forward call; scratch as for winograd_forward.
void winograd_backward(const ConvGeometry& g, int tile, const float* dy, const float* y_for_mask,
                       bool channel_major_output, const float* u, const float* v, float* scratch,
                       const WinogradGrads& grads);

// dw [OC, C, 3, 3] (+)= G^T du G: the weight gradient from winograd_backward's du.
void winograd_weight_grad(const ConvGeometry& g, int tile, const float* du, float* dw, bool accumulate);

}  // namespace gradmesh::kernels
