// Internal to conv_winograd.cc: the tiling of a Winograd F(MxM, 3x3)
// convolution (M = 2 or 4) and the per-tile and per-plane kernels its batch
// loops inline. Everything here is always inlined into functions compiled
// once per ISA level, so a Vec never crosses a call boundary.
// REQUIRES of includers: GCC's -Wpsabi off (conv_winograd.cc says why).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gradmesh/kernels/conv.h"
#include "gradmesh/kernels/simd.h"

namespace gradmesh::kernels::winograd_detail {

// Images per block: each block's transformed tiles (alpha^2 x (OC + C) x
// tiles floats) are produced, multiplied and consumed while still in cache.
// Measured on the reference CNN's conv 32->64 (F(4x4), 9 tiles per image):
// 256 tiles beat 128 and 512 by ~5-10%, and 1024-2048 by 20-30%.
constexpr int64_t kBlockTiles = 256;
// Rows of a block's element workspace are this many floats longer than the
// block: the narrow plane kernels store whole Vecs whose tail lanes spill past
// a plane's tiles (into tiles written afterwards, or into this slack).
constexpr int64_t kSlack = 16;

struct Tiling {
  int m, alpha, elems;        // output tile M x M, input patch alpha = M + 2, alpha^2 elements
  int64_t th, tw, per_image;  // tiles per column, per row, per image
  int64_t hp, wp;             // padded plane covering every tile's patch
  int64_t block_images, block_tiles, total;
};

inline Tiling tiling(const ConvGeometry& g, int m) {
  Tiling t{};
  t.m = m;
  t.alpha = m + 2;
  t.elems = t.alpha * t.alpha;
  t.th = (g.out_h() + m - 1) / m;
  t.tw = (g.out_w() + m - 1) / m;
  t.per_image = t.th * t.tw;
  t.hp = m * t.th + 2;
  t.wp = m * t.tw + 2;
  t.block_images = std::clamp<int64_t>(kBlockTiles / std::max<int64_t>(t.per_image, 1), 1, g.batch);
  t.block_tiles = t.block_images * t.per_image;
  t.total = g.batch * t.per_image;
  return t;
}

// Explicit SIMD through GCC vector extensions: each clone lowers Vec to its
// own registers (one zmm, two ymm or four xmm), and a plain float runs the
// tail. Every lane does the same operations in the same order, so the result
// does not depend on the width.
using Vec = float __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

using simd::load;
using simd::store;
template <class V>
[[gnu::always_inline]] inline V relu_of(const V& r) {
  if constexpr (std::is_same_v<V, float>) {
    return r > 0.0f ? r : 0.0f;
  } else {
    const V zero = {};
    return r > zero ? r : zero;
  }
}

// Runs body.template operator()<V>(j) over [0, n): Vec steps, then floats.
template <class Body>
[[gnu::always_inline]] inline void for_lanes(int64_t n, Body&& body) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) body.template operator()<Vec>(j);
  for (; j < n; ++j) body.template operator()<float>(j);
}

// The 1-D transforms (Lavin & Gray's matrices). `in` and `out` step by
// is / os elements. input: B^T d; input_adjoint: B v; output: A^T m;
// output_adjoint: A g; weight: G f; weight_adjoint: G^T e. Zero coefficients
// are skipped rather than multiplied, so an Inf or NaN stays where it was.
template <int M>
struct Transforms;

template <>
struct Transforms<2> {
  template <class V>
  [[gnu::always_inline]] static void input(const V* d, int is, V* o, int os) {
    const V d0 = d[0], d1 = d[is], d2 = d[2 * is], d3 = d[3 * is];
    o[0] = d0 - d2;
    o[os] = d1 + d2;
    o[2 * os] = d2 - d1;
    o[3 * os] = d1 - d3;
  }
  template <class V>
  [[gnu::always_inline]] static void input_adjoint(const V* v, int is, V* o, int os) {
    const V v0 = v[0], v1 = v[is], v2 = v[2 * is], v3 = v[3 * is];
    o[0] = v0;
    o[os] = v1 - v2 + v3;
    o[2 * os] = v1 + v2 - v0;
    o[3 * os] = -v3;
  }
  template <class V>
  [[gnu::always_inline]] static void output(const V* m, int is, V* o, int os) {
    const V m0 = m[0], m1 = m[is], m2 = m[2 * is], m3 = m[3 * is];
    o[0] = m0 + m1 + m2;
    o[os] = m1 - m2 - m3;
  }
  template <class V>
  [[gnu::always_inline]] static void output_adjoint(const V* g, int is, V* o, int os) {
    const V g0 = g[0], g1 = g[is];
    o[0] = g0;
    o[os] = g0 + g1;
    o[2 * os] = g0 - g1;
    o[3 * os] = -g1;
  }
  static void weight(const float* f, int is, float* o, int os) {
    const float a = f[0], b = f[is], c = f[2 * is];
    o[0] = a;
    o[os] = 0.5f * (a + b + c);
    o[2 * os] = 0.5f * (a - b + c);
    o[3 * os] = c;
  }
  static void weight_adjoint(const float* e, int is, float* o, int os) {
    const float e0 = e[0], e1 = e[is], e2 = e[2 * is], e3 = e[3 * is];
    o[0] = e0 + 0.5f * (e1 + e2);
    o[os] = 0.5f * (e1 - e2);
    o[2 * os] = e3 + 0.5f * (e1 + e2);
  }
};

template <>
struct Transforms<4> {
  template <class V>
  [[gnu::always_inline]] static void input(const V* d, int is, V* o, int os) {
    const V d0 = d[0], d1 = d[is], d2 = d[2 * is], d3 = d[3 * is], d4 = d[4 * is], d5 = d[5 * is];
    o[0] = 4.0f * d0 - 5.0f * d2 + d4;
    o[os] = d3 + d4 - 4.0f * (d1 + d2);
    o[2 * os] = d4 - d3 + 4.0f * (d1 - d2);
    o[3 * os] = d4 - d2 + 2.0f * (d3 - d1);
    o[4 * os] = d4 - d2 + 2.0f * (d1 - d3);
    o[5 * os] = 4.0f * d1 - 5.0f * d3 + d5;
  }
  template <class V>
  [[gnu::always_inline]] static void input_adjoint(const V* v, int is, V* o, int os) {
    const V v0 = v[0], v1 = v[is], v2 = v[2 * is], v3 = v[3 * is], v4 = v[4 * is], v5 = v[5 * is];
    o[0] = 4.0f * v0;
    o[os] = 4.0f * (v2 - v1 + v5) + 2.0f * (v4 - v3);
    o[2 * os] = -5.0f * v0 - 4.0f * (v1 + v2) - v3 - v4;
    o[3 * os] = v1 - v2 + 2.0f * (v3 - v4) - 5.0f * v5;
    o[4 * os] = v0 + v1 + v2 + v3 + v4;
    o[5 * os] = v5;
  }
  template <class V>
  [[gnu::always_inline]] static void output(const V* m, int is, V* o, int os) {
    const V m0 = m[0], m1 = m[is], m2 = m[2 * is], m3 = m[3 * is], m4 = m[4 * is], m5 = m[5 * is];
    const V p12 = m1 + m2, n12 = m1 - m2, p34 = m3 + m4, n34 = m3 - m4;
    o[0] = m0 + p12 + p34;
    o[os] = n12 + 2.0f * n34;
    o[2 * os] = p12 + 4.0f * p34;
    o[3 * os] = n12 + 8.0f * n34 + m5;
  }
  template <class V>
  [[gnu::always_inline]] static void output_adjoint(const V* g, int is, V* o, int os) {
    const V g0 = g[0], g1 = g[is], g2 = g[2 * is], g3 = g[3 * is];
    const V even = g0 + g2, odd = g1 + g3, even4 = g0 + 4.0f * g2, odd4 = 2.0f * g1 + 8.0f * g3;
    o[0] = g0;
    o[os] = even + odd;
    o[2 * os] = even - odd;
    o[3 * os] = even4 + odd4;
    o[4 * os] = even4 - odd4;
    o[5 * os] = g3;
  }
  static void weight(const float* f, int is, float* o, int os) {
    const float a = f[0], b = f[is], c = f[2 * is];
    o[0] = a / 4.0f;
    o[os] = -(a + b + c) / 6.0f;
    o[2 * os] = -(a - b + c) / 6.0f;
    o[3 * os] = a / 24.0f + b / 12.0f + c / 6.0f;
    o[4 * os] = a / 24.0f - b / 12.0f + c / 6.0f;
    o[5 * os] = c;
  }
  static void weight_adjoint(const float* e, int is, float* o, int os) {
    const float e0 = e[0], e1 = e[is], e2 = e[2 * is], e3 = e[3 * is], e4 = e[4 * is], e5 = e[5 * is];
    o[0] = e0 / 4.0f - (e1 + e2) / 6.0f + (e3 + e4) / 24.0f;
    o[os] = (e2 - e1) / 6.0f + (e3 - e4) / 12.0f;
    o[2 * os] = (e3 + e4 - e1 - e2) / 6.0f + e5;
  }
};

// Tile kernels for the tiles at j; element e of a tile lives in row e of its
// array (rows ld apart). input_tiles: v = B^T d B.
template <int M, class V>
[[gnu::always_inline]] inline void input_tiles(const float* d, int64_t ld_d, float* v, int64_t ldv, int64_t j) {
  constexpr int kA = M + 2;
  V x[kA][kA], q[kA][kA];
  for (int e = 0; e < kA * kA; ++e) x[e / kA][e % kA] = load<V>(d + e * ld_d + j);
  for (int s = 0; s < kA; ++s) Transforms<M>::input(&x[0][s], kA, &q[0][s], kA);
  for (int i = 0; i < kA; ++i) {
    V row[kA];
    Transforms<M>::input(q[i], 1, row, 1);
    for (int k = 0; k < kA; ++k) store<V>(v + (i * kA + k) * ldv + j, row[k]);
  }
}

// o[a * M + c] = act(A^T m A + b)[a][c].
template <int M, class V>
[[gnu::always_inline]] inline void output_tiles(const float* m, int64_t ldm, float* o, int64_t ldo, float b,
                                                bool relu, int64_t j) {
  constexpr int kA = M + 2;
  V x[kA][kA], q[M][kA];
  for (int e = 0; e < kA * kA; ++e) x[e / kA][e % kA] = load<V>(m + e * ldm + j);
  for (int k = 0; k < kA; ++k) Transforms<M>::output(&x[0][k], kA, &q[0][k], kA);
  for (int a = 0; a < M; ++a) {
    V row[M];
    Transforms<M>::output(q[a], 1, row, 1);
    for (int c = 0; c < M; ++c) {
      const V r = row[c] + b;
      store<V>(o + (a * M + c) * ldo + j, relu ? relu_of<V>(r) : r);
    }
  }
}

// dm = A g A^T (g[a * M + c]: the tile's output gradient).
template <int M, class V>
[[gnu::always_inline]] inline void output_grad_tiles(const float* g, int64_t ldg, float* dm, int64_t ldm,
                                                     int64_t j) {
  constexpr int kA = M + 2;
  V x[M][M], q[kA][M];
  for (int e = 0; e < M * M; ++e) x[e / M][e % M] = load<V>(g + e * ldg + j);
  for (int c = 0; c < M; ++c) Transforms<M>::output_adjoint(&x[0][c], M, &q[0][c], M);
  for (int r = 0; r < kA; ++r) {
    V row[kA];
    Transforms<M>::output_adjoint(q[r], 1, row, 1);
    for (int s = 0; s < kA; ++s) store<V>(dm + (r * kA + s) * ldm + j, row[s]);
  }
}

// d = B dv B^T: the adjoint of input_tiles.
template <int M, class V>
[[gnu::always_inline]] inline void input_grad_tiles(const float* dv, int64_t ldv, float* d, int64_t ldd, int64_t j) {
  constexpr int kA = M + 2;
  V x[kA][kA], q[kA][kA];
  for (int e = 0; e < kA * kA; ++e) x[e / kA][e % kA] = load<V>(dv + e * ldv + j);
  for (int k = 0; k < kA; ++k) Transforms<M>::input_adjoint(&x[0][k], kA, &q[0][k], kA);
  for (int r = 0; r < kA; ++r) {
    V row[kA];
    Transforms<M>::input_adjoint(q[r], 1, row, 1);
    for (int s = 0; s < kA; ++s) store<V>(d + (r * kA + s) * ldd + j, row[s]);
  }
}

// Per-call workspace: one zero-padded input plane and alpha^2 rows of a
// block's tile elements (row e, ld floats long, holds element e of every tile).
struct BlockWork {
  int64_t ld;
  std::vector<float> padded, elems;
  explicit BlockWork(const Tiling& t)
      : ld(t.block_tiles + kSlack),
        padded(static_cast<size_t>(t.hp * t.wp + kSlack), 0.0f),
        elems(static_cast<size_t>(t.elems * ld)) {}
};

}  // namespace gradmesh::kernels::winograd_detail
