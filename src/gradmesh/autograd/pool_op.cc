#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/kernels/pool.h"

namespace gradmesh::autograd {

Variable max_pool2d(const Variable& x, int64_t kernel, int64_t stride, int64_t padding, Activation act) {
  if (act != Activation::kNone && act != Activation::kRelu)
    throw_error(ErrorKind::kInternal, "max_pool2d", "only ReLU is fused");
  const Shape& s = x.shape();
  if (s.size() != 4 || kernel < 1 || stride < 1 || padding < 0 || padding > kernel / 2 ||
      s[2] + 2 * padding < kernel || s[3] + 2 * padding < kernel)
    throw_error(ErrorKind::kShape, "max_pool2d",
                "input " + shape_str(s) + " with kernel " + std::to_string(kernel) + ", stride " +
                    std::to_string(stride) + ", padding " + std::to_string(padding) +
                    " (expected [N, C, H, W] no smaller than the window, padding <= kernel/2)");
  const kernels::PoolGeometry g{s[0] * s[1], s[2], s[3], kernel, stride, padding};
  Tensor y = Tensor::empty({s[0], s[1], g.out_h(), g.out_w()});
  // int32 argmax indices live in float-sized storage so they come from the same allocator cache.
  Tensor argmax = Tensor::empty({y.numel()});
  kernels::max_pool_forward(g, x.value().data(), y.data(), static_cast<int32_t*>(argmax.raw()));
  if (act == Activation::kRelu) kernels::activation_forward(act, y.data(), y.data(), y.numel());
  Variable result(std::move(y));
  if (!should_record({&x})) return result;
  auto xs = x.state(), ys = result.state();
  current_tape().record({xs}, ys, [=] {
    if (act == Activation::kRelu) kernels::relu_mask_inplace(ys->grad.data(), ys->value.data(), ys->value.numel());
    GradTarget t = grad_target(*xs);
    kernels::max_pool_backward(g, ys->grad.data(), static_cast<const int32_t*>(argmax.raw()), t.data, t.accumulate);
  });
  return result;
}

}  // namespace gradmesh::autograd
