#include "gradmesh/kernels/conv.h"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gradmesh::kernels {
namespace {

// Copies a short run (an output row: 11 floats for the reference CNN's second
// conv). Hundreds of thousands of these per step made memcpy's call and size
// dispatch a measurable cost; this stays inline.
inline void copy_row(float* __restrict dst, const float* __restrict src, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(dst + i, _mm_loadu_ps(src + i));
#endif
  for (; i < n; ++i) dst[i] = src[i];
}

}  // namespace

void im2col(const ConvGeometry& g, const float* x, float* col, bool ones_row) {
  const int64_t oh = g.out_h(), ow = g.out_w(), cols = g.col_cols();
  for (int64_t c = 0; c < g.in_channels; ++c) {
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        float* row = col + ((c * g.kernel_h + kh) * g.kernel_w + kw) * cols;
        for (int64_t n = 0; n < g.batch; ++n) {
          const float* plane = x + g.input_plane(n, c) * g.height * g.width;
          float* out = row + n * oh * ow;
          for (int64_t oy = 0; oy < oh; ++oy) {
            const int64_t iy = oy * g.stride - g.padding + kh;
            float* dst = out + oy * ow;
            if (iy < 0 || iy >= g.height) {
              std::memset(dst, 0, static_cast<size_t>(ow) * sizeof(float));
              continue;
            }
            const float* src = plane + iy * g.width;
            if (g.stride == 1 && g.padding == 0) {
              copy_row(dst, src + kw, ow);
              continue;
            }
            for (int64_t ox = 0; ox < ow; ++ox) {
              const int64_t ix = ox * g.stride - g.padding + kw;
              dst[ox] = (ix >= 0 && ix < g.width) ? src[ix] : 0.0f;
            }
          }
        }
      }
    }
  }
  if (ones_row) {
    float* ones = col + g.col_rows() * cols;
    for (int64_t i = 0; i < cols; ++i) ones[i] = 1.0f;
  }
}

void col2im(const ConvGeometry& g, const float* dcol, float* dx, bool accumulate) {
  if (!accumulate)
    std::memset(dx, 0, static_cast<size_t>(g.batch * g.in_channels * g.height * g.width) * sizeof(float));
  const int64_t oh = g.out_h(), ow = g.out_w(), cols = g.col_cols();
  for (int64_t c = 0; c < g.in_channels; ++c) {
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const float* row = dcol + ((c * g.kernel_h + kh) * g.kernel_w + kw) * cols;
        for (int64_t n = 0; n < g.batch; ++n) {
          float* plane = dx + g.input_plane(n, c) * g.height * g.width;
          const float* in = row + n * oh * ow;
          for (int64_t oy = 0; oy < oh; ++oy) {
            const int64_t iy = oy * g.stride - g.padding + kh;
            if (iy < 0 || iy >= g.height) continue;
            float* __restrict dst = plane + iy * g.width;
            const float* __restrict src = in + oy * ow;
            if (g.stride == 1 && g.padding == 0) {
              for (int64_t ox = 0; ox < ow; ++ox) dst[ox + kw] += src[ox];
              continue;
            }
            for (int64_t ox = 0; ox < ow; ++ox) {
              const int64_t ix = ox * g.stride - g.padding + kw;
              if (ix >= 0 && ix < g.width) dst[ix] += src[ox];
            }
          }
        }
      }
    }
  }
}

void conv_output_from_columns(const ConvGeometry& g, const float* ycol, const float* bias, Activation act,
                              float* y) {
  const int64_t hw = g.out_h() * g.out_w(), cols = g.col_cols();
  for (int64_t oc = 0; oc < g.out_channels; ++oc) {
    const float b = bias ? bias[oc] : 0.0f;
    for (int64_t n = 0; n < g.batch; ++n) {
      const float* __restrict src = ycol + oc * cols + n * hw;
      float* __restrict dst = y + (n * g.out_channels + oc) * hw;
      if (act == Activation::kRelu) {
        for (int64_t i = 0; i < hw; ++i) {
          const float v = src[i] + b;
          dst[i] = v > 0.0f ? v : 0.0f;
        }
      } else {
        for (int64_t i = 0; i < hw; ++i) dst[i] = src[i] + b;
      }
    }
  }
}

void conv_columns_from_output_grad(const ConvGeometry& g, const float* dy, const float* y, float* dycol) {
  const int64_t hw = g.out_h() * g.out_w(), cols = g.col_cols();
  for (int64_t oc = 0; oc < g.out_channels; ++oc) {
    for (int64_t n = 0; n < g.batch; ++n) {
      const int64_t offset = (n * g.out_channels + oc) * hw;
      float* __restrict dst = dycol + oc * cols + n * hw;
      if (y != nullptr) {
        for (int64_t i = 0; i < hw; ++i) dst[i] = y[offset + i] > 0.0f ? dy[offset + i] : 0.0f;
      } else {
        copy_row(dst, dy + offset, hw);
      }
    }
  }
}

void conv2d_reference(const ConvGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  const int64_t oh = g.out_h(), ow = g.out_w();
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t oc = 0; oc < g.out_channels; ++oc)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double sum = bias ? bias[oc] : 0.0;
          for (int64_t c = 0; c < g.in_channels; ++c)
            for (int64_t kh = 0; kh < g.kernel_h; ++kh)
              for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
                const int64_t iy = oy * g.stride - g.padding + kh, ix = ox * g.stride - g.padding + kw;
                if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) continue;
                sum += static_cast<double>(x[((n * g.in_channels + c) * g.height + iy) * g.width + ix]) *
                       w[((oc * g.in_channels + c) * g.kernel_h + kh) * g.kernel_w + kw];
              }
          y[((n * g.out_channels + oc) * oh + oy) * ow + ox] = static_cast<float>(sum);
        }
}

}  // namespace gradmesh::kernels
