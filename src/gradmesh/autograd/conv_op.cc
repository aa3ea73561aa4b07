#include <cstring>

#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/kernels/activation.h"
#include "gradmesh/kernels/conv.h"
#include "gradmesh/kernels/conv_bf16.h"
#include "gradmesh/kernels/conv_winograd.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/kernels/gemm_bf16.h"

namespace gradmesh::autograd {
namespace {

kernels::ConvGeometry checked_geometry(const Variable& x, const Variable& weight, const Variable& bias,
                                       const Conv2dOptions& options) {
  const Shape& s = x.shape();
  const Shape& ws = weight.shape();
  const bool bad_bias = bias.defined() && (bias.value().ndim() != 1 || bias.shape()[0] != ws[0]);
  const int64_t channels = s.size() == 4 ? (options.channel_major_input ? s[0] : s[1]) : -1;
  if (s.size() != 4 || ws.size() != 4 || channels != ws[1] || bad_bias || options.stride < 1 || options.padding < 0)
    throw_error(ErrorKind::kShape, "conv2d",
                "input " + shape_str(s) + ", weight " + shape_str(ws) +
                    " (expected input [N, C, H, W], weight [OC, C, KH, KW], bias [OC], stride >= 1, padding >= 0)");
  const int64_t batch = options.channel_major_input ? s[1] : s[0];
  kernels::ConvGeometry g{batch, channels, s[2], s[3], ws[0], ws[2], ws[3], options.stride, options.padding,
                          options.channel_major_input};
  if (g.height + 2 * g.padding < g.kernel_h || g.width + 2 * g.padding < g.kernel_w)
    throw_error(ErrorKind::kShape, "conv2d",
                "kernel " + shape_str({ws[2], ws[3]}) + " larger than the padded input " + shape_str(s));
  return g;
}

// Winograd (F(4x4, 3x3) or F(2x2, 3x3), whichever issues fewer multiply-adds)
// for 3x3 stride-1 kernels with enough input channels. Measured on the
// reference CNN (single thread, batch 128): conv 32->64 on 13x13 runs its
// three passes in under half the im2col time (F(2x2): 0.6x). With C = 1 (the
// first layer) every Winograd GEMM has depth 1, far from BLAS's efficient
// regime, and the transforms cost more than the multiply-adds they save:
// im2col measured about 3x faster there, so it stays.
constexpr int64_t kWinogradMinChannels = 8;

bool use_winograd(const kernels::ConvGeometry& g, Activation act) {
  return kernels::winograd_applicable(g) && g.in_channels >= kWinogradMinChannels &&
         (act == Activation::kNone || act == Activation::kRelu);
}

Variable conv2d_winograd(const Variable& x, const Variable& weight, const Variable& bias,
                         const Conv2dOptions& options, const kernels::ConvGeometry& g) {
  const Activation act = options.act;
  const int64_t oc = g.out_channels;
  const int tile = kernels::winograd_choose_tile(g);
  Tensor u = Tensor::empty({kernels::winograd_weight_floats(g, tile)});
  kernels::winograd_weights(g, tile, weight.value().data(), u.data());
  Tensor v = Tensor::empty({kernels::winograd_input_floats(g, tile)});
  Tensor scratch = Tensor::empty({kernels::winograd_scratch_floats(g, tile)});
  const bool cm_out = options.channel_major_output;
  Tensor y = cm_out ? Tensor::empty({oc, g.batch, g.out_h(), g.out_w()})
                    : Tensor::empty({g.batch, oc, g.out_h(), g.out_w()});
  kernels::winograd_forward(g, tile, x.value().data(), u.data(), bias.defined() ? bias.value().data() : nullptr, act,
                            cm_out, v.data(), scratch.data(), y.data());
  Variable result(std::move(y));
  if (!should_record({&x, &weight, &bias})) return result;

  auto xst = x.state(), wst = weight.state(), bs = bias.state(), ys = result.state();
  std::vector<std::shared_ptr<VariableState>> inputs{xst, wst};
  if (bs) inputs.push_back(bs);
  current_tape().record(std::move(inputs), ys,
                        [=, u = std::move(u), v = std::move(v), scratch = std::move(scratch)]() mutable {
    const bool want_w = wst->requires_grad, want_b = bs && bs->requires_grad;
    Tensor du, db;
    kernels::WinogradGrads grads;
    if (want_w) {
      du = Tensor::empty(u.shape());
      grads.du = du.data();
    }
    if (want_b) {
      db = Tensor::empty({oc});
      grads.db = db.data();
    }
    if (xst->requires_grad) {
      GradTarget t = grad_target(*xst);
      grads.dx = t.data;
      grads.dx_accumulate = t.accumulate;
    }
    const float* y_for_mask = act == Activation::kRelu ? ys->value.data() : nullptr;
    kernels::winograd_backward(g, tile, ys->grad.data(), y_for_mask, cm_out, u.data(), v.data(), scratch.data(), grads);
    if (want_w) {
      GradTarget t = grad_target(*wst);
      kernels::winograd_weight_grad(g, tile, du.data(), t.data, t.accumulate);
    }
    if (want_b) {
      GradTarget t = grad_target(*bs);
      kernels::add_into(t.data, db.data(), oc, t.accumulate);
    }
  });
  return result;
}

// Under bf16 products on a CPU with bf16 dot products: oneDNN's convolutions
// (kernels/conv_bf16.h says why not the float32 path's GEMMs in bf16), for
// the same layers as Winograd. With few input channels the convolution is
// memory-bound: for the reference CNN's first layer (C = 1) oneDNN's
// passes and its reorders of the 26x26x32 output took longer than im2col
// and one bf16 GEMM of depth 10 (whole CNN, one core: 5,600-5,800 against
// 6,100-6,250 samples/s).
bool use_onednn_bf16(const kernels::ConvGeometry& g, Activation act) {
  return g.in_channels >= kWinogradMinChannels && kernels::matmul_precision() == kernels::MatmulPrecision::kBf16 &&
         kernels::onednn_has_bf16_matmul() && (act == Activation::kNone || act == Activation::kRelu);
}

Variable conv2d_bf16(const Variable& x, const Variable& weight, const Variable& bias, const Conv2dOptions& options,
                     const kernels::ConvGeometry& g) {
  const Activation act = options.act;
  const bool cm_out = options.channel_major_output;
  auto conv = std::make_shared<kernels::Bf16Conv>(g, bias.defined(), act, cm_out);
  Tensor y = cm_out ? Tensor::empty({g.out_channels, g.batch, g.out_h(), g.out_w()})
                    : Tensor::empty({g.batch, g.out_channels, g.out_h(), g.out_w()});
  conv->forward(x.value().data(), weight.value().data(), bias.defined() ? bias.value().data() : nullptr, y.data());
  Variable result(std::move(y));
  if (!should_record({&x, &weight, &bias})) return result;

  auto xst = x.state(), wst = weight.state(), bs = bias.state(), ys = result.state();
  std::vector<std::shared_ptr<VariableState>> inputs{xst, wst};
  if (bs) inputs.push_back(bs);
  current_tape().record(std::move(inputs), ys, [=] {
    // The output's gradient is dead after this op: the ReLU's mask goes on in place.
    if (act == Activation::kRelu) kernels::relu_mask_inplace(ys->grad.data(), ys->value.data(), ys->value.numel());
    kernels::Bf16Conv::Grads grads;
    if (wst->requires_grad) {
      GradTarget t = grad_target(*wst);
      grads.dw = t.data;
      grads.dw_accumulate = t.accumulate;
    }
    if (bs && bs->requires_grad) {
      GradTarget t = grad_target(*bs);
      grads.db = t.data;
      grads.db_accumulate = t.accumulate;
    }
    if (xst->requires_grad) {
      GradTarget t = grad_target(*xst);
      grads.dx = t.data;
      grads.dx_accumulate = t.accumulate;
    }
    conv->backward(ys->grad.data(), grads);
  });
  return result;
}

}  // namespace

Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias, const Conv2dOptions& options) {
  const kernels::ConvGeometry g = checked_geometry(x, weight, bias, options);
  if (use_onednn_bf16(g, options.act)) return conv2d_bf16(x, weight, bias, options, g);
  if (use_winograd(g, options.act)) return conv2d_winograd(x, weight, bias, options, g);
  const Activation act = options.act;
  const bool has_bias = bias.defined();
  const int64_t rows = g.col_rows(), cols = g.col_cols(), oc = g.out_channels;
  const int64_t k = rows + (has_bias ? 1 : 0);  // GEMM depth: the bias rides along as a column of [w | b]

  Tensor col = Tensor::empty({k, cols});
  kernels::im2col(g, x.value().data(), col.data(), has_bias);
  Tensor wmat = weight.value();
  if (has_bias) {
    wmat = Tensor::empty({oc, k});
    for (int64_t o = 0; o < oc; ++o) {
      std::memcpy(wmat.data() + o * k, weight.value().data() + o * rows, static_cast<size_t>(rows) * sizeof(float));
      wmat.data()[o * k + rows] = bias.value().data()[o];
    }
  }
  const Shape cm_shape{oc, g.batch, g.out_h(), g.out_w()};
  Tensor ycol = Tensor::empty({oc, cols});
  kernels::gemm(false, false, oc, cols, k, 1.0f, wmat.data(), k, col.data(), cols, 0.0f, ycol.data(), cols);
  Tensor y;
  if (options.channel_major_output) {
    y = ycol.view(cm_shape);
    if (act == Activation::kRelu) kernels::activation_forward(act, y.data(), y.data(), y.numel());
  } else {
    y = Tensor::empty({g.batch, oc, g.out_h(), g.out_w()});
    kernels::conv_output_from_columns(g, ycol.data(), nullptr, act, y.data());
  }
  Variable result(std::move(y));
  if (!should_record({&x, &weight, &bias})) return result;

  auto xst = x.state(), wst = weight.state(), bs = bias.state(), ys = result.state();
  std::vector<std::shared_ptr<VariableState>> inputs{xst, wst};
  if (bs) inputs.push_back(bs);
  const bool cm_out = options.channel_major_output;
  current_tape().record(std::move(inputs), ys, [=, col = std::move(col), wmat = std::move(wmat)]() mutable {
    const float* y_for_mask = act == Activation::kRelu ? ys->value.data() : nullptr;
    Tensor dycol_storage;
    float* dycol;
    if (cm_out) {  // the gradient is already [OC, N*OH*OW]; it is dead after this op, so mask in place
      dycol = ys->grad.data();
      if (y_for_mask) kernels::relu_mask_inplace(dycol, y_for_mask, oc * cols);
    } else {
      dycol_storage = Tensor::empty({oc, cols});
      dycol = dycol_storage.data();
      kernels::conv_columns_from_output_grad(g, ys->grad.data(), y_for_mask, dycol);
    }
    const bool want_w = wst->requires_grad, want_b = bs && bs->requires_grad;
    if (want_w || want_b) {  // [dw | db] [OC, k] = dYcol * col^T
      Tensor dwb = Tensor::empty({oc, k});
      kernels::gemm(false, true, oc, k, cols, 1.0f, dycol, cols, col.data(), cols, 0.0f, dwb.data(), k);
      if (want_w) {
        GradTarget t = grad_target(*wst);
        for (int64_t o = 0; o < oc; ++o) kernels::add_into(t.data + o * rows, dwb.data() + o * k, rows, t.accumulate);
      }
      if (want_b) {
        GradTarget t = grad_target(*bs);
        for (int64_t o = 0; o < oc; ++o) t.data[o] = (t.accumulate ? t.data[o] : 0.0f) + dwb.data()[o * k + rows];
      }
    }
    if (xst->requires_grad) {  // dcol = w^T dYcol into col's first `rows` rows (col is dead), then scatter back
      kernels::gemm(true, false, rows, cols, oc, 1.0f, wmat.data(), k, dycol, cols, 0.0f, col.data(), cols);
      GradTarget t = grad_target(*xst);
      kernels::col2im(g, col.data(), t.data, t.accumulate);
    }
  });
  return result;
}

Variable flatten_channel_major(const Variable& x) {
  if (x.value().ndim() != 4)
    throw_error(ErrorKind::kShape, "flatten_channel_major", "input " + shape_str(x.shape()) + " (expected [C, N, H, W])");
  const int64_t c = x.shape()[0], n = x.shape()[1], hw = x.shape()[2] * x.shape()[3];
  Tensor y = Tensor::empty({n, c * hw});
  const float* src = x.value().data();
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t ni = 0; ni < n; ++ni)
      std::memcpy(y.data() + (ni * c + ci) * hw, src + (ci * n + ni) * hw, static_cast<size_t>(hw) * sizeof(float));
  Variable result(std::move(y));
  if (!should_record({&x})) return result;
  auto xs = x.state(), ys = result.state();
  current_tape().record({xs}, ys, [=] {
    GradTarget t = grad_target(*xs);
    const float* dy = ys->grad.data();
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t ni = 0; ni < n; ++ni)
        kernels::add_into(t.data + (ci * n + ni) * hw, dy + (ni * c + ci) * hw, hw, t.accumulate);
  });
  return result;
}

}  // namespace gradmesh::autograd
