#include "gradmesh/kernels/pool.h"

#include <cstring>
#include <limits>

namespace gradmesh::kernels {

void max_pool_forward(const PoolGeometry& g, const float* x, float* y, int32_t* argmax) {
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
            // `!(v <= best)` also lets a NaN win, so NaNs propagate as in PyTorch.
            if (best_index < 0 || !(v <= best)) {
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

void max_pool_backward(const PoolGeometry& g, const float* dy, const int32_t* argmax, float* dx, bool accumulate) {
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
