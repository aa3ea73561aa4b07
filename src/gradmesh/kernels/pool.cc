#include "gradmesh/kernels/pool.h"

#include <cmath>
#include <cstring>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

}  // namespace

void max_pool_forward(const PoolGeometry& g, const float* x, float* y, int32_t* argmax) {
  if (g.kernel == 2 && g.stride == 2 && g.padding == 0) return max_pool_2x2(g, x, y, argmax);
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
  if (!accumulate && g.kernel == 2 && g.stride == 2 && g.padding == 0) return max_pool_2x2_backward(g, dy, argmax, dx);
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
