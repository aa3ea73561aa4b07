#include "gradmesh/kernels/pool.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <immintrin.h>

#include <algorithm>

#include "gradmesh/kernels/isa.h"

namespace gradmesh::kernels {

namespace {

// The common 2x2 / stride 2 / no padding window without bounds checks: every
// window lies inside the plane. Written as selects over a row pair so the
// compiler vectorises it: which element wins is data-dependent, and branches
// would mispredict about half the time. First element wins ties, as in the
// general path; any NaN in a window yields NaN.
void max_pool_2x2(const PoolGeometry& g, const float* x, float* y, int32_t* argmax) {
  const int64_t oh = g.out_h(), ow = g.out_w(), w = g.width, plane = g.height * g.width;
  for (int64_t p = 0; p < g.planes; ++p) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      const float* __restrict r0 = x + p * plane + 2 * oy * w;
      const float* __restrict r1 = r0 + w;
      float* __restrict out = y + (p * oh + oy) * ow;
      int32_t* __restrict arg = argmax + (p * oh + oy) * ow;
      const auto top = static_cast<int32_t>(2 * oy * w), row = static_cast<int32_t>(w);
      int64_t ox = 0;
#if defined(__SSE2__)
      // Four windows at a time: de-interleave even/odd columns, then the same
      // select chain with compare masks (SSE2 is part of every x86-64 CPU).
      const __m128i step = _mm_set_epi32(6, 4, 2, 0);
      for (; ox + 4 <= ow; ox += 4) {
        const __m128 t0 = _mm_loadu_ps(r0 + 2 * ox), t1 = _mm_loadu_ps(r0 + 2 * ox + 4);
        const __m128 b0 = _mm_loadu_ps(r1 + 2 * ox), b1 = _mm_loadu_ps(r1 + 2 * ox + 4);
        const __m128 a = _mm_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0));
        const __m128 b = _mm_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1));
        const __m128 c = _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0));
        const __m128 d = _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1));
        __m128 m = a;
        __m128i k = _mm_setzero_si128();
        auto take = [&](__m128 v, int32_t offset) {
          const __m128 gt = _mm_or_ps(_mm_cmpgt_ps(v, m), _mm_cmpunord_ps(v, v));
          const __m128i gti = _mm_castps_si128(gt);
          k = _mm_or_si128(_mm_and_si128(gti, _mm_set1_epi32(offset)), _mm_andnot_si128(gti, k));
          m = _mm_or_ps(_mm_and_ps(gt, v), _mm_andnot_ps(gt, m));
        };
        take(b, 1);
        take(c, row);
        take(d, row + 1);
        _mm_storeu_ps(out + ox, m);
        const __m128i base = _mm_add_epi32(_mm_set1_epi32(top + static_cast<int32_t>(2 * ox)), step);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(arg + ox), _mm_add_epi32(base, k));
      }
#endif
      for (; ox < ow; ++ox) {
        const float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
        float m = a;
        int32_t k = 0;
        // `v != v` is true only for NaN: a NaN always wins, as in the general path.
        k = (b > m || b != b) ? 1 : k;
        m = (b > m || b != b) ? b : m;
        k = (c > m || c != c) ? row : k;
        m = (c > m || c != c) ? c : m;
        k = (d > m || d != d) ? row + 1 : k;
        m = (d > m || d != d) ? d : m;
        out[ox] = m;
        arg[ox] = top + static_cast<int32_t>(2 * ox) + k;
      }
    }
  }
}

// AVX-512 copies of the 2x2 / stride-2 paths: up to 16 windows of a row per
// step, a row's last step masked (the reference CNN's rows hold 13 and 5
// windows, too few for whole 16-lane steps). The same selects as the SSE2
// and scalar code, so the same bits at every level; the SSE2 code measured
// a fifth of a bf16 CNN step on one core.
struct RowStep {
  __mmask16 windows, first_half, second_half;  // output lanes; the 2n input floats in two vectors
};

// The first `lanes` of 16 (none when lanes <= 0).
inline __mmask16 first_lanes(int64_t lanes) {
  return static_cast<__mmask16>(lanes >= 16 ? 0xFFFFu : (1u << std::max<int64_t>(lanes, 0)) - 1u);
}

inline RowStep row_step(int64_t n) { return {first_lanes(n), first_lanes(2 * n), first_lanes(2 * n - 16)}; }

[[gnu::target("arch=x86-64-v4"), gnu::always_inline]] inline void take_if_greater(__m512 v, __m512i offset, __m512& m,
                                                                                 __m512i& k) {
  const __mmask16 gt = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  k = _mm512_mask_mov_epi32(k, gt, offset);
  m = _mm512_mask_mov_ps(m, gt, v);
}

[[gnu::target("arch=x86-64-v4")]] void max_pool_2x2_avx512(const PoolGeometry& g, const float* x, float* y,
                                                           int32_t* argmax) {
  const int64_t oh = g.out_h(), ow = g.out_w(), w = g.width, plane = g.height * g.width;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i right = _mm512_set1_epi32(1), below = _mm512_set1_epi32(static_cast<int32_t>(w)),
                below_right = _mm512_set1_epi32(static_cast<int32_t>(w) + 1);
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t oy = 0; oy < oh; ++oy) {
      const float* r0 = x + p * plane + 2 * oy * w;
      const float* r1 = r0 + w;
      float* out = y + (p * oh + oy) * ow;
      int32_t* arg = argmax + (p * oh + oy) * ow;
      for (int64_t ox = 0; ox < ow; ox += 16) {
        const RowStep s = row_step(std::min<int64_t>(16, ow - ox));
        const __m512 t0 = _mm512_maskz_loadu_ps(s.first_half, r0 + 2 * ox);
        const __m512 t1 = _mm512_maskz_loadu_ps(s.second_half, r0 + 2 * ox + 16);
        const __m512 b0 = _mm512_maskz_loadu_ps(s.first_half, r1 + 2 * ox);
        const __m512 b1 = _mm512_maskz_loadu_ps(s.second_half, r1 + 2 * ox + 16);
        __m512 m = _mm512_permutex2var_ps(t0, even, t1);
        __m512i k = _mm512_setzero_si512();
        take_if_greater(_mm512_permutex2var_ps(t0, odd, t1), right, m, k);
        take_if_greater(_mm512_permutex2var_ps(b0, even, b1), below, m, k);
        take_if_greater(_mm512_permutex2var_ps(b0, odd, b1), below_right, m, k);
        _mm512_mask_storeu_ps(out + ox, s.windows, m);
        const __m512i base = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(2 * oy * w + 2 * ox)), even);
        _mm512_mask_storeu_epi32(arg + ox, s.windows, _mm512_add_epi32(base, k));
      }
    }
}

[[gnu::target("arch=x86-64-v4")]] void max_pool_2x2_backward_avx512(const PoolGeometry& g, const float* dy,
                                                                    const int32_t* argmax, float* dx) {
  const int64_t oh = g.out_h(), ow = g.out_w(), w = g.width, plane = g.height * g.width;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  // Interleaving two vectors of window values into a row's floats: lanes 0-7, then 8-15.
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));
  const __m512i one = _mm512_set1_epi32(1), row = _mm512_set1_epi32(static_cast<int32_t>(w));
  for (int64_t p = 0; p < g.planes; ++p) {
    float* d = dx + p * plane;
    for (int64_t oy = 0; oy < oh; ++oy) {
      const float* grad = dy + (p * oh + oy) * ow;
      const int32_t* arg = argmax + (p * oh + oy) * ow;
      float* r0 = d + 2 * oy * w;
      float* r1 = r0 + w;
      for (int64_t ox = 0; ox < ow; ox += 16) {
        const RowStep s = row_step(std::min<int64_t>(16, ow - ox));
        const __m512 v = _mm512_maskz_loadu_ps(s.windows, grad + ox);
        const __m512i a = _mm512_maskz_loadu_epi32(s.windows, arg + ox);
        const __m512i top_left = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(2 * oy * w + 2 * ox)), even);
        const __m512i bottom_left = _mm512_add_epi32(top_left, row);
        const __m512 e0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, top_left), v);
        const __m512 e1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_add_epi32(top_left, one)), v);
        const __m512 e2 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, bottom_left), v);
        const __m512 e3 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_add_epi32(bottom_left, one)), v);
        _mm512_mask_storeu_ps(r0 + 2 * ox, s.first_half, _mm512_permutex2var_ps(e0, first, e1));
        _mm512_mask_storeu_ps(r0 + 2 * ox + 16, s.second_half, _mm512_permutex2var_ps(e0, second, e1));
        _mm512_mask_storeu_ps(r1 + 2 * ox, s.first_half, _mm512_permutex2var_ps(e2, first, e3));
        _mm512_mask_storeu_ps(r1 + 2 * ox + 16, s.second_half, _mm512_permutex2var_ps(e2, second, e3));
      }
      if (w > 2 * ow) r0[w - 1] = r1[w - 1] = 0.0f;
    }
    if (g.height > 2 * oh) std::memset(d + (g.height - 1) * w, 0, static_cast<size_t>(w) * sizeof(float));
  }
}

}  // namespace

void max_pool_forward(const PoolGeometry& g, const float* x, float* y, int32_t* argmax) {
  if (g.kernel == 2 && g.stride == 2 && g.padding == 0)
    return active_isa() == IsaLevel::kAvx512 ? max_pool_2x2_avx512(g, x, y, argmax) : max_pool_2x2(g, x, y, argmax);
  const int64_t oh = g.out_h(), ow = g.out_w(), plane = g.height * g.width;
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* in = x + p * plane;
    float* out = y + p * oh * ow;
    int32_t* arg = argmax + p * oh * ow;
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        float best = -std::numeric_limits<float>::infinity();
        int32_t best_index = -1;
        for (int64_t ky = 0; ky < g.kernel; ++ky) {
          const int64_t iy = oy * g.stride - g.padding + ky;
          if (iy < 0 || iy >= g.height) continue;
          for (int64_t kx = 0; kx < g.kernel; ++kx) {
            const int64_t ix = ox * g.stride - g.padding + kx;
            if (ix < 0 || ix >= g.width) continue;
            const float v = in[iy * g.width + ix];
            // A NaN always wins and is then kept, so NaNs propagate as in PyTorch.
            if (best_index < 0 || v > best || std::isnan(v)) {
              best = v;
              best_index = static_cast<int32_t>(iy * g.width + ix);
            }
          }
        }
        out[oy * ow + ox] = best;
        arg[oy * ow + ox] = best_index;
      }
    }
  }
}

// 2x2 / stride 2 windows tile the plane without overlap, so each window's four
// input gradients can be written directly (no zero-fill pass first); rows and
// columns that no window covers (odd sizes) are zeroed separately.
static void max_pool_2x2_backward(const PoolGeometry& g, const float* dy, const int32_t* argmax, float* dx) {
  const int64_t oh = g.out_h(), ow = g.out_w(), w = g.width, plane = g.height * g.width;
  for (int64_t p = 0; p < g.planes; ++p) {
    float* d = dx + p * plane;
    for (int64_t oy = 0; oy < oh; ++oy) {
      const float* __restrict grad = dy + (p * oh + oy) * ow;
      const int32_t* __restrict arg = argmax + (p * oh + oy) * ow;
      float* __restrict r0 = d + 2 * oy * w;
      float* __restrict r1 = r0 + w;
      const int32_t top = static_cast<int32_t>(2 * oy * w);
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int32_t i = top + static_cast<int32_t>(2 * ox);
        const float v = grad[ox];
        r0[2 * ox] = arg[ox] == i ? v : 0.0f;
        r0[2 * ox + 1] = arg[ox] == i + 1 ? v : 0.0f;
        r1[2 * ox] = arg[ox] == i + static_cast<int32_t>(w) ? v : 0.0f;
        r1[2 * ox + 1] = arg[ox] == i + static_cast<int32_t>(w) + 1 ? v : 0.0f;
      }
      if (w > 2 * ow) r0[w - 1] = r1[w - 1] = 0.0f;
    }
    if (g.height > 2 * oh) std::memset(d + (g.height - 1) * w, 0, static_cast<size_t>(w) * sizeof(float));
  }
}

void max_pool_backward(const PoolGeometry& g, const float* dy, const int32_t* argmax, float* dx, bool accumulate) {
  if (!accumulate && g.kernel == 2 && g.stride == 2 && g.padding == 0)
    return active_isa() == IsaLevel::kAvx512 ? max_pool_2x2_backward_avx512(g, dy, argmax, dx)
                                             : max_pool_2x2_backward(g, dy, argmax, dx);
  const int64_t out_plane = g.out_h() * g.out_w(), plane = g.height * g.width;
  if (!accumulate) std::memset(dx, 0, static_cast<size_t>(g.planes * plane) * sizeof(float));
  for (int64_t p = 0; p < g.planes; ++p) {
    float* d = dx + p * plane;
    const float* grad = dy + p * out_plane;
    const int32_t* arg = argmax + p * out_plane;
    for (int64_t i = 0; i < out_plane; ++i) d[arg[i]] += grad[i];
  }
}

}  // namespace gradmesh::kernels
