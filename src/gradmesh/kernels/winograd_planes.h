// Internal to conv_winograd.cc: moving one plane
// between its image layout and the tile-element rows of a block.
//
// A plane whose padded rows fit one Vec ("narrow": up to 16 columns, the
// reference CNN's 13x13 and 11x11 included) moves whole rows with two-source
// shuffles; wider planes, and compilers without GCC's __builtin_shuffle, take
// the scalar loops. Narrow stores write a whole Vec: lanes past a row's tiles
// land on tiles written afterwards or in BlockWork's slack.
#pragma once

#include "gradmesh/kernels/winograd_simd.h"

namespace gradmesh::kernels::winograd_detail {

#if defined(__GNUC__) && !defined(__clang__)
#define GRADMESH_WINOGRAD_SHUFFLE 1
using IVec = int32_t __attribute__((vector_size(64)));

// Lane i of the result: idx[i] < 16 ? a[idx[i]] : b[idx[i] - 16].
[[gnu::always_inline]] inline Vec shuffle2(const Vec& a, const Vec& b, const IVec& idx) {
  return __builtin_shuffle(a, b, idx);
}
template <class F>
[[gnu::always_inline]] inline IVec lanes_of(F&& f) {
  IVec m;
  for (int i = 0; i < 16; ++i) m[i] = f(i);
  return m;
}
// The first `avail` floats at p (all 16 if avail >= 16), zeros after.
[[gnu::always_inline]] inline Vec load_row(const float* p, int64_t avail) {
  if (avail >= kLanes) return load<Vec>(p);
  Vec v = {};
  std::memcpy(&v, p, static_cast<size_t>(avail) * sizeof(float));
  return v;
}
// All 16 lanes when `avail` floats may be written at p, else the first n.
[[gnu::always_inline]] inline void store_row(float* p, const Vec& v, int64_t avail, int64_t n) {
  if (avail >= kLanes) return store<Vec>(p, v);
  float lanes[kLanes];
  std::memcpy(lanes, &v, sizeof(lanes));
  for (int64_t i = 0; i < n; ++i) p[i] = lanes[i];
}
#endif

inline bool narrow(const Tiling& t) {
#ifdef GRADMESH_WINOGRAD_SHUFFLE
  return t.wp <= kLanes && t.hp <= kLanes;
#else
  (void)t;
  return false;
#endif
}

// d[r * alpha + s][j] = padded input plane at tile j's patch (r, s).
// REQUIRES: padded's border is zero (only the interior is written here).
template <int M>
[[gnu::always_inline]] inline void gather_patches(const ConvGeometry& g, const Tiling& t, const float* plane,
                                                  std::vector<float>& padded, float* __restrict d, int64_t ld) {
  constexpr int kA = M + 2;
  float* pp = padded.data();
  for (int64_t y = 0; y < g.height; ++y)
    std::memcpy(pp + (y + g.padding) * t.wp + g.padding, plane + y * g.width,
                static_cast<size_t>(g.width) * sizeof(float));
#ifdef GRADMESH_WINOGRAD_SHUFFLE
  if (narrow(t)) {
    const Vec zero = {};
    IVec idx[kA];
    for (int s = 0; s < kA; ++s) idx[s] = lanes_of([s](int i) { return (M * i + s) & 31; });
    for (int64_t ty = 0; ty < t.th; ++ty)
      for (int r = 0; r < kA; ++r) {
        const Vec row = load<Vec>(pp + (M * ty + r) * t.wp);
        for (int s = 0; s < kA; ++s) store<Vec>(d + (r * kA + s) * ld + ty * t.tw, shuffle2(row, zero, idx[s]));
      }
    return;
  }
#endif
  for (int r = 0; r < kA; ++r)
    for (int s = 0; s < kA; ++s)
      for (int64_t ty = 0; ty < t.th; ++ty) {
        const float* src = pp + (M * ty + r) * t.wp + s;
        float* dst = d + (r * kA + s) * ld + ty * t.tw;
        for (int64_t tx = 0; tx < t.tw; ++tx) dst[tx] = src[M * tx];
      }
}

// The adjoint of gather_patches: dx plane (+)= the patches summed where they overlap.
template <int M>
[[gnu::always_inline]] inline void scatter_patches(const ConvGeometry& g, const Tiling& t, const float* __restrict d,
                                                   int64_t ld, std::vector<float>& padded, float* dx,
                                                   bool accumulate) {
  constexpr int kA = M + 2;
  const int64_t h = g.height, w = g.width;
#ifdef GRADMESH_WINOGRAD_SHUFFLE
  if (narrow(t)) {
    const Vec zero = {};
    const int tw = static_cast<int>(t.tw), pad = static_cast<int>(g.padding), width = static_cast<int>(w);
    IVec idx[kA];  // lane i <- tile (i - s) / M when that is one of the row's tiles
    for (int s = 0; s < kA; ++s)
      idx[s] = lanes_of([=](int i) { return i >= s && (i - s) % M == 0 && (i - s) / M < tw ? (i - s) / M : 16; });
    const IVec crop = lanes_of([=](int i) { return i < width ? pad + i : 16; });
    Vec acc[kLanes] = {};
    for (int64_t ty = 0; ty < t.th; ++ty)
      for (int r = 0; r < kA; ++r)
        for (int s = 0; s < kA; ++s)
          acc[M * ty + r] += shuffle2(load<Vec>(d + (r * kA + s) * ld + ty * t.tw), zero, idx[s]);
    for (int64_t yy = 0; yy < h; ++yy) {  // lanes past the row are zero: adding them changes nothing
      const Vec val = shuffle2(acc[yy + g.padding], zero, crop);
      float* out = dx + yy * w;
      const int64_t avail = (h - yy) * w;
      store_row(out, accumulate ? load_row(out, avail) + val : val, avail, w);
    }
    return;
  }
#endif
  std::fill(padded.begin(), padded.end(), 0.0f);
  float* pp = padded.data();
  for (int r = 0; r < kA; ++r)
    for (int s = 0; s < kA; ++s)
      for (int64_t ty = 0; ty < t.th; ++ty) {
        float* dst = pp + (M * ty + r) * t.wp + s;
        const float* src = d + (r * kA + s) * ld + ty * t.tw;
        for (int64_t tx = 0; tx < t.tw; ++tx) dst[M * tx] += src[tx];
      }
  for (int64_t yy = 0; yy < h; ++yy) {
    const float* src = pp + (yy + g.padding) * t.wp + g.padding;
    float* out = dx + yy * w;
    if (accumulate) {
      for (int64_t x = 0; x < w; ++x) out[x] += src[x];
    } else {
      std::memcpy(out, src, static_cast<size_t>(w) * sizeof(float));
    }
  }
}

// Output plane y from o[a * M + c][tile], dropping outputs past OH/OW.
template <int M>
[[gnu::always_inline]] inline void scatter_outputs(const ConvGeometry& g, const Tiling& t, const float* o,
                                                   int64_t ld, float* y) {
  const int64_t oh = g.out_h(), ow = g.out_w();
#ifdef GRADMESH_WINOGRAD_SHUFFLE
  if (narrow(t)) {
    IVec merge[M];  // lane i takes tile i / M of source c = i % M
    for (int c = 0; c < M; ++c) merge[c] = lanes_of([c](int i) { return i % M == c ? 16 + i / M : i; });
    for (int64_t oy = 0; oy < oh; ++oy) {
      const float* src = o + (oy % M) * M * ld + (oy / M) * t.tw;
      Vec row = {};
      for (int c = 0; c < M; ++c) row = shuffle2(row, load<Vec>(src + c * ld), merge[c]);
      store_row(y + oy * ow, row, (oh - oy) * ow, ow);
    }
    return;
  }
#endif
  for (int64_t oy = 0; oy < oh; ++oy) {
    const float* src = o + (oy % M) * M * ld + (oy / M) * t.tw;
    float* row = y + oy * ow;
    for (int64_t ox = 0; ox < ow; ++ox) row[ox] = src[(ox % M) * ld + ox / M];
  }
}

// gt[a * M + c][tile] = the tile's output gradient, masked where the fused
// ReLU's output y <= 0 (y null: no mask), zero past OH/OW. Returns the sum
// of the masked gradient (the plane's share of the bias gradient).
template <int M>
[[gnu::always_inline]] inline float gather_output_grads(const ConvGeometry& g, const Tiling& t, const float* dy,
                                                        const float* y, float* gt, int64_t ld) {
  const int64_t oh = g.out_h(), ow = g.out_w();
  float sum = 0.0f;
#ifdef GRADMESH_WINOGRAD_SHUFFLE
  if (narrow(t)) {
    const Vec zero = {};
    const IVec lane = lanes_of([](int i) { return i; });
    IVec split[M];  // lane i <- column M * i + c
    for (int c = 0; c < M; ++c) split[c] = lanes_of([c](int i) { return M * i + c < 16 ? M * i + c : 16; });
    const int width = static_cast<int>(ow);
    Vec total = {};
    for (int64_t oy = 0; oy < t.th * M; ++oy) {
      Vec val = zero;  // rows past OH: zero
      if (oy < oh) {
        const int64_t avail = (oh - oy) * ow;
        val = load_row(dy + oy * ow, avail);
        if (y != nullptr) val = load_row(y + oy * ow, avail) > zero ? val : zero;
        val = lane < width ? val : zero;
        total += val;
      }
      float* dst = gt + (oy % M) * M * ld + (oy / M) * t.tw;
      for (int c = 0; c < M; ++c) store<Vec>(dst + c * ld, shuffle2(val, zero, split[c]));
    }
    for (int i = 0; i < kLanes; ++i) sum += total[i];
    return sum;
  }
#endif
  for (int64_t ty = 0; ty < t.th; ++ty)
    for (int a = 0; a < M; ++a)
      for (int64_t tx = 0; tx < t.tw; ++tx)
        for (int c = 0; c < M; ++c) {
          const int64_t oy = M * ty + a, ox = M * tx + c;
          float val = 0.0f;
          if (oy < oh && ox < ow) {
            const int64_t i = oy * ow + ox;
            val = (y == nullptr || y[i] > 0.0f) ? dy[i] : 0.0f;
            sum += val;
          }
          gt[(a * M + c) * ld + ty * t.tw + tx] = val;
        }
  return sum;
}

}  // namespace gradmesh::kernels::winograd_detail
