#include "gradmesh/kernels/conv_winograd.h"

// The helpers returning a 64-byte Vec are always inlined, so no Vec crosses a
// call boundary and GCC's note that such returns change the ABI without
// AVX-512 (emitted once per translation unit) does not apply.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gradmesh/kernels/gemm.h"
#include "gradmesh/kernels/winograd_planes.h"
#include "gradmesh/kernels/winograd_simd.h"

// The build targets baseline x86-64, so the batch loops (and the Vec code
// inlined into them) are compiled once per ISA level (kernels/isa.h); the
// baseline copy is the SSE2 fallback. Vec arithmetic is lane-wise and never
// fused into FMA (the transforms are additions and a few products, so
// fusing would gain little), so every copy produces bit-identical results
// in both numerics modes: training reruns match across machines with and
// without AVX-512.
#include "gradmesh/kernels/isa.h"

namespace gradmesh::kernels {
namespace {

using namespace winograd_detail;

int64_t output_plane(const ConvGeometry& g, bool channel_major_output, int64_t n, int64_t oc) {
  return channel_major_output ? oc * g.batch + n : n * g.out_channels + oc;
}

// v[e][c][n * per_image + j] for the images [n0, n0 + count).
template <int M>
[[gnu::always_inline]] inline void input_transform(const ConvGeometry& g, const Tiling& t, const float* x,
                                                   int64_t n0, int64_t count, float* v) {
  BlockWork w(t);
  const int64_t ld = w.ld, ldv = g.in_channels * t.total, plane = g.height * g.width;
  float* d = w.elems.data();
  for (int64_t c = 0; c < g.in_channels; ++c) {
    for (int64_t n = n0; n < n0 + count; ++n)
      gather_patches<M>(g, t, x + g.input_plane(n, c) * plane, w.padded, d + (n - n0) * t.per_image, ld);
    float* vc = v + c * t.total + n0 * t.per_image;
    for_lanes(count * t.per_image, [&]<class V>(int64_t j) { input_tiles<M, V>(d, ld, vc, ldv, j); });
  }
}

// y planes of images [n0, n0 + count) from m [elems][OC][block_tiles].
template <int M>
[[gnu::always_inline]] inline void output_transform(const ConvGeometry& g, const Tiling& t, const float* m,
                                                    const float* bias, Activation act, bool cm_out, int64_t n0,
                                                    int64_t count, float* y) {
  BlockWork w(t);
  const int64_t ld = w.ld, ldm = g.out_channels * t.block_tiles, plane = g.out_h() * g.out_w();
  const bool relu = act == Activation::kRelu;
  float* o = w.elems.data();  // o[a * M + c][tile]
  for (int64_t oc = 0; oc < g.out_channels; ++oc) {
    const float b = bias ? bias[oc] : 0.0f;
    const float* mo = m + oc * t.block_tiles;
    for_lanes(count * t.per_image, [&]<class V>(int64_t j) { output_tiles<M, V>(mo, ldm, o, ld, b, relu, j); });
    for (int64_t n = n0; n < n0 + count; ++n)
      scatter_outputs<M>(g, t, o + (n - n0) * t.per_image, ld, y + output_plane(g, cm_out, n, oc) * plane);
  }
}

// dm [elems][OC][block_tiles] from the (ReLU-masked) output gradient; db[oc] += its sums.
template <int M>
[[gnu::always_inline]] inline void output_grad_transform(const ConvGeometry& g, const Tiling& t, const float* dy,
                                                         const float* y, bool cm_out, int64_t n0, int64_t count,
                                                         float* dm, float* db) {
  BlockWork w(t);
  const int64_t ld = w.ld, ldm = g.out_channels * t.block_tiles, plane = g.out_h() * g.out_w();
  float* gt = w.elems.data();  // gt[a * M + c][tile]
  for (int64_t oc = 0; oc < g.out_channels; ++oc) {
    float sum = 0.0f;
    for (int64_t n = n0; n < n0 + count; ++n) {
      const int64_t offset = output_plane(g, cm_out, n, oc) * plane;
      sum += gather_output_grads<M>(g, t, dy + offset, y ? y + offset : nullptr, gt + (n - n0) * t.per_image, ld);
    }
    if (db != nullptr) db[oc] += sum;
    float* dmo = dm + oc * t.block_tiles;
    for_lanes(count * t.per_image, [&]<class V>(int64_t j) { output_grad_tiles<M, V>(gt, ld, dmo, ldm, j); });
  }
}

// dx planes of images [n0, n0 + count) (+)= the adjoint input transform of dv [elems][C][block_tiles].
template <int M>
[[gnu::always_inline]] inline void input_grad_transform(const ConvGeometry& g, const Tiling& t, const float* dv,
                                                        int64_t n0, int64_t count, float* dx, bool accumulate) {
  BlockWork w(t);
  const int64_t ld = w.ld, ldv = g.in_channels * t.block_tiles, plane = g.height * g.width;
  float* d = w.elems.data();
  for (int64_t c = 0; c < g.in_channels; ++c) {
    const float* dvc = dv + c * t.block_tiles;
    for_lanes(count * t.per_image, [&]<class V>(int64_t j) { input_grad_tiles<M, V>(dvc, ldv, d, ld, j); });
    for (int64_t n = n0; n < n0 + count; ++n)
      scatter_patches<M>(g, t, d + (n - n0) * t.per_image, ld, w.padded, dx + g.input_plane(n, c) * plane,
                         accumulate);
  }
}

// The ISA-dispatched entry points (kernels/isa.h).
[[gnu::always_inline]] inline void input_transform_block_body(const ConvGeometry& g, const Tiling& t, const float* x,
                                                              int64_t n0, int64_t count, float* v) {
  if (t.m == 4) return input_transform<4>(g, t, x, n0, count, v);
  input_transform<2>(g, t, x, n0, count, v);
}
GRADMESH_ISA_VARIANTS(input_transform_block,
                      (const ConvGeometry& g, const Tiling& t, const float* x, int64_t n0, int64_t count, float* v),
                      (g, t, x, n0, count, v))

[[gnu::always_inline]] inline void output_transform_block_body(const ConvGeometry& g, const Tiling& t, const float* m,
                                                               const float* bias, Activation act, bool cm_out,
                                                               int64_t n0, int64_t count, float* y) {
  if (t.m == 4) return output_transform<4>(g, t, m, bias, act, cm_out, n0, count, y);
  output_transform<2>(g, t, m, bias, act, cm_out, n0, count, y);
}
GRADMESH_ISA_VARIANTS(output_transform_block,
                      (const ConvGeometry& g, const Tiling& t, const float* m, const float* bias, Activation act,
                       bool cm_out, int64_t n0, int64_t count, float* y),
                      (g, t, m, bias, act, cm_out, n0, count, y))

[[gnu::always_inline]] inline void output_grad_transform_block_body(const ConvGeometry& g, const Tiling& t,
                                                                    const float* dy, const float* y, bool cm_out,
                                                                    int64_t n0, int64_t count, float* dm, float* db) {
  if (t.m == 4) return output_grad_transform<4>(g, t, dy, y, cm_out, n0, count, dm, db);
  output_grad_transform<2>(g, t, dy, y, cm_out, n0, count, dm, db);
}
GRADMESH_ISA_VARIANTS(output_grad_transform_block,
                      (const ConvGeometry& g, const Tiling& t, const float* dy, const float* y, bool cm_out,
                       int64_t n0, int64_t count, float* dm, float* db),
                      (g, t, dy, y, cm_out, n0, count, dm, db))

[[gnu::always_inline]] inline void input_grad_transform_block_body(const ConvGeometry& g, const Tiling& t,
                                                                   const float* dv, int64_t n0, int64_t count,
                                                                   float* dx, bool accumulate) {
  if (t.m == 4) return input_grad_transform<4>(g, t, dv, n0, count, dx, accumulate);
  input_grad_transform<2>(g, t, dv, n0, count, dx, accumulate);
}
GRADMESH_ISA_VARIANTS(input_grad_transform_block,
                      (const ConvGeometry& g, const Tiling& t, const float* dv, int64_t n0, int64_t count, float* dx,
                       bool accumulate),
                      (g, t, dv, n0, count, dx, accumulate))

template <int M>
void weights_for(const ConvGeometry& g, const float* w, float* u) {
  constexpr int kA = M + 2;
  const int64_t pairs = g.out_channels * g.in_channels;
  for (int64_t k = 0; k < pairs; ++k) {
    float h[kA][3], row[kA];
    for (int col = 0; col < 3; ++col) Transforms<M>::weight(w + k * 9 + col, 3, &h[0][col], 3);  // G f
    for (int r = 0; r < kA; ++r) {                                                                // (G f) G^T
      Transforms<M>::weight(h[r], 1, row, 1);
      for (int s = 0; s < kA; ++s) u[(r * kA + s) * pairs + k] = row[s];
    }
  }
}

template <int M>
void weight_grad_for(const ConvGeometry& g, const float* du, float* dw, bool accumulate) {
  constexpr int kA = M + 2;
  const int64_t pairs = g.out_channels * g.in_channels;
  for (int64_t k = 0; k < pairs; ++k) {
    float e[kA][kA], h[3][kA], res[3];
    for (int i = 0; i < kA * kA; ++i) e[i / kA][i % kA] = du[i * pairs + k];
    for (int col = 0; col < kA; ++col) Transforms<M>::weight_adjoint(&e[0][col], kA, &h[0][col], kA);  // G^T dU
    float* out = dw + k * 9;
    for (int p = 0; p < 3; ++p) {  // (G^T dU) G
      Transforms<M>::weight_adjoint(h[p], 1, res, 1);
      for (int q = 0; q < 3; ++q) out[p * 3 + q] = (accumulate ? out[p * 3 + q] : 0.0f) + res[q];
    }
  }
}

}  // namespace

bool winograd_applicable(const ConvGeometry& g) {
  return g.kernel_h == 3 && g.kernel_w == 3 && g.stride == 1 && g.out_h() >= 1 && g.out_w() >= 1;
}

int winograd_choose_tile(const ConvGeometry& g) {
  // Multiply-adds per image and channel pair: alpha^2 per tile. F(4x4) needs
  // 36 per 16 outputs against 16 per 4, but rounds the output up to a
  // multiple of 4; ties go to F(2x2), whose rounding error is smaller.
  const Tiling t2 = tiling(g, 2), t4 = tiling(g, 4);
  return t4.elems * t4.per_image < t2.elems * t2.per_image ? 4 : 2;
}

int64_t winograd_weight_floats(const ConvGeometry& g, int tile) {
  return tiling(g, tile).elems * g.out_channels * g.in_channels;
}

int64_t winograd_input_floats(const ConvGeometry& g, int tile) {
  const Tiling t = tiling(g, tile);
  return t.elems * g.in_channels * t.total;
}

int64_t winograd_scratch_floats(const ConvGeometry& g, int tile) {
  const Tiling t = tiling(g, tile);
  return t.elems * t.block_tiles * (g.out_channels + g.in_channels);
}

void winograd_weights(const ConvGeometry& g, int tile, const float* w, float* u) {
  if (tile == 4) return weights_for<4>(g, w, u);
  weights_for<2>(g, w, u);
}

void winograd_weight_grad(const ConvGeometry& g, int tile, const float* du, float* dw, bool accumulate) {
  if (tile == 4) return weight_grad_for<4>(g, du, dw, accumulate);
  weight_grad_for<2>(g, du, dw, accumulate);
}

void winograd_forward(const ConvGeometry& g, int tile, const float* x, const float* u, const float* bias,
                      Activation act, bool channel_major_output, float* v, float* scratch, float* y) {
  const Tiling t = tiling(g, tile);
  const int64_t oc = g.out_channels, c = g.in_channels;
  for (int64_t n0 = 0; n0 < g.batch; n0 += t.block_images) {
    const int64_t count = std::min(t.block_images, g.batch - n0), cols = count * t.per_image;
    input_transform_block(g, t, x, n0, count, v);
    const float* vb = v + n0 * t.per_image;
    for (int e = 0; e < t.elems; ++e)
      gemm(false, false, oc, cols, c, 1.0f, u + e * oc * c, c, vb + e * c * t.total, t.total, 0.0f,
           scratch + e * oc * t.block_tiles, t.block_tiles);
    output_transform_block(g, t, scratch, bias, act, channel_major_output, n0, count, y);
  }
}

void winograd_backward(const ConvGeometry& g, int tile, const float* dy, const float* y_for_mask,
                       bool channel_major_output, const float* u, const float* v, float* scratch,
                       const WinogradGrads& grads) {
  const Tiling t = tiling(g, tile);
  const int64_t oc = g.out_channels, c = g.in_channels;
  float* dm = scratch;                                // [elems][OC][block_tiles]
  float* dv = scratch + t.elems * oc * t.block_tiles;  // [elems][C][block_tiles]
  if (grads.db != nullptr) std::fill(grads.db, grads.db + oc, 0.0f);
  for (int64_t n0 = 0; n0 < g.batch; n0 += t.block_images) {
    const int64_t count = std::min(t.block_images, g.batch - n0), cols = count * t.per_image;
    output_grad_transform_block(g, t, dy, y_for_mask, channel_major_output, n0, count, dm, grads.db);
    if (grads.du != nullptr) {
      const float beta = n0 == 0 ? 0.0f : 1.0f;
      for (int e = 0; e < t.elems; ++e)
        gemm(false, true, oc, c, cols, 1.0f, dm + e * oc * t.block_tiles, t.block_tiles,
             v + e * c * t.total + n0 * t.per_image, t.total, beta, grads.du + e * oc * c, c);
    }
    if (grads.dx != nullptr) {
      for (int e = 0; e < t.elems; ++e)
        gemm(true, false, c, cols, oc, 1.0f, u + e * oc * c, c, dm + e * oc * t.block_tiles, t.block_tiles, 0.0f,
             dv + e * c * t.block_tiles, t.block_tiles);
      input_grad_transform_block(g, t, dv, n0, count, grads.dx, grads.dx_accumulate);
    }
  }
}

}  // namespace gradmesh::kernels
