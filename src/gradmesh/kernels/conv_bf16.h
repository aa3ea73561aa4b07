// Convolution in bf16 with float32 accumulation through oneDNN's
// convolution primitives, the path of Conv2d under train.precision = "bf16"
// on CPUs with bf16 dot products (onednn_has_bf16_matmul()).
//
// Why not the float32 path's GEMMs in bf16: the Winograd GEMMs of the
// reference CNN are small (64 x 72 x 32 per transform element), so
// rounding their operands per call and oneDNN's per-call cost ate what the
// bf16 products saved (measured: 0.94x of float32 for the whole CNN), and
// bf16 operands would lose Winograd's transforms' extra precision anyway.
// oneDNN's direct convolutions run on AMX or AVX512_BF16 over its blocked
// layouts (docs/engine.md has the measurement).
//
// Layouts at the interface are gradmesh's float32 ones (ConvGeometry: x
// [N, C, H, W] or channel-major [C, N, H, W]; y and dy [N, OC, OH, OW] or
// channel-major); each call reorders into oneDNN's blocked bf16 layouts and
// back, and the reorder is what rounds to bf16 (nearest even). The bf16
// input and weights of a forward stay in the Bf16Conv for its backward.
// Results are a pure function of the operands, the shapes and the thread count.
#pragma once

#include <memory>

namespace dnnl {
struct memory;
}

#include "gradmesh/kernels/activation.h"
#include "gradmesh/kernels/conv.h"

namespace gradmesh::kernels {

class Bf16Conv {
 public:
  // The convolution g with its bias (has_bias) and act (kNone or kRelu,
  // applied to the float32 sums) into y of the given layout.
  // REQUIRES: onednn_has_bf16_matmul().
  Bf16Conv(const ConvGeometry& g, bool has_bias, Activation act, bool channel_major_output);
  ~Bf16Conv();
  Bf16Conv(const Bf16Conv&) = delete;
  Bf16Conv& operator=(const Bf16Conv&) = delete;

  // y = act(conv(x, w) + bias); bias null when constructed without one.
  void forward(const float* x, const float* w, const float* bias, float* y);

  struct Grads {
    float* dw = nullptr;  // [OC, C, KH, KW]; null: skip
    float* db = nullptr;  // [OC]; null: skip
    float* dx = nullptr;  // input layout of g; null: skip
    bool dw_accumulate = false, db_accumulate = false, dx_accumulate = false;
  };
  // Gradients of the last forward given dy (already masked by the
  // activation's derivative: the caller knows y).
  void backward(const float* dy, const Grads& grads);

 private:
  void weight_grads(const dnnl::memory& dy16, const Grads& grads);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradmesh::kernels
