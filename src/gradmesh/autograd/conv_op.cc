#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/kernels/activation.h"
#include "gradmesh/kernels/conv.h"
#include "gradmesh/kernels/gemm.h"

namespace gradmesh::autograd {

Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias, const Conv2dOptions& options) {
  const Shape& xs_shape = x.shape();
  const Shape& ws = weight.shape();
  const bool bad_bias = bias.defined() && (bias.value().ndim() != 1 || bias.shape()[0] != ws[0]);
  if (xs_shape.size() != 4 || ws.size() != 4 || xs_shape[1] != ws[1] || bad_bias || options.stride < 1 ||
      options.padding < 0)
    throw_error(ErrorKind::kShape, "conv2d",
                "input " + shape_str(xs_shape) + ", weight " + shape_str(ws) +
                    " (expected input [N, C, H, W], weight [OC, C, KH, KW], bias [OC], stride >= 1, padding >= 0)");
  kernels::ConvGeometry g{xs_shape[0], xs_shape[1], xs_shape[2], xs_shape[3], ws[0], ws[2], ws[3],
                          options.stride, options.padding};
  if (g.height + 2 * g.padding < g.kernel_h || g.width + 2 * g.padding < g.kernel_w)
    throw_error(ErrorKind::kShape, "conv2d",
                "kernel " + shape_str({ws[2], ws[3]}) + " larger than the padded input " + shape_str(xs_shape));
  const Activation act = options.act;
  const int64_t rows = g.col_rows(), cols = g.col_cols();

  Tensor col = Tensor::empty({rows, cols});
  kernels::im2col(g, x.value().data(), col.data());
  Tensor ycol = Tensor::empty({g.out_channels, cols});
  kernels::gemm(false, false, g.out_channels, cols, rows, 1.0f, weight.value().data(), rows, col.data(), cols, 0.0f,
                ycol.data(), cols);
  Tensor y = Tensor::empty({g.batch, g.out_channels, g.out_h(), g.out_w()});
  kernels::conv_output_from_columns(g, ycol.data(), bias.defined() ? bias.value().data() : nullptr, act, y.data());
  Variable result(std::move(y));
  if (!should_record({&x, &weight, &bias})) return result;

  auto xst = x.state(), wst = weight.state(), bs = bias.state(), ys = result.state();
  std::vector<std::shared_ptr<VariableState>> inputs{xst, wst};
  if (bs) inputs.push_back(bs);
  // `ycol` is reused as the [OC, N*OH*OW] gradient buffer: same shape, and its forward contents are dead.
  current_tape().record(std::move(inputs), ys, [=, col = std::move(col), ycol = std::move(ycol)]() mutable {
    float* dycol = ycol.data();
    kernels::conv_columns_from_output_grad(g, ys->grad.data(), act == Activation::kRelu ? ys->value.data() : nullptr,
                                           dycol);
    if (bs && bs->requires_grad) {
      GradTarget t = grad_target(*bs);
      kernels::row_sums(dycol, g.out_channels, cols, t.data, t.accumulate);
    }
    if (wst->requires_grad) {  // dW [OC, C*KH*KW] = dYcol * col^T
      GradTarget t = grad_target(*wst);
      kernels::gemm(false, true, g.out_channels, rows, cols, 1.0f, dycol, cols, col.data(), cols,
                    t.accumulate ? 1.0f : 0.0f, t.data, rows);
    }
    if (xst->requires_grad) {  // dcol = W^T dYcol, then scatter back (col is dead: reuse it)
      kernels::gemm(true, false, rows, cols, g.out_channels, 1.0f, wst->value.data(), rows, dycol, cols, 0.0f,
                    col.data(), cols);
      GradTarget t = grad_target(*xst);
      kernels::col2im(g, col.data(), t.data, t.accumulate);
    }
  });
  return result;
}

}  // namespace gradmesh::autograd
