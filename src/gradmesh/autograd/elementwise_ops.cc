#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/kernels/dropout.h"

namespace gradmesh::autograd {

Variable activation(const Variable& x, Activation act) {
  const int64_t n = x.value().numel();
  Tensor y = Tensor::empty(x.shape());
  kernels::activation_forward(act, x.value().data(), y.data(), n);
  Variable result(std::move(y));
  if (!should_record({&x})) return result;
  auto xs = x.state(), ys = result.state();
  current_tape().record({xs}, ys, [=] {
    GradTarget t = grad_target(*xs);
    kernels::activation_backward(act, xs->value.data(), ys->value.data(), ys->grad.data(), t.data, n, t.accumulate);
  });
  return result;
}

Variable dropout(const Variable& x, float p, uint64_t seed, uint64_t step_key, int64_t first_sample) {
  if (!(p >= 0.0f && p < 1.0f)) throw_error(ErrorKind::kShape, "dropout", "p must be in [0, 1), got " + std::to_string(p));
  if (p == 0.0f) return x;
  const int64_t n = x.value().numel();
  const int64_t rows = x.value().ndim() > 0 ? x.shape()[0] : 1;
  Tensor y = Tensor::empty(x.shape());
  // One byte per element, carved from float-sized storage so it is cached like any tensor.
  Tensor mask = Tensor::empty({(n + 3) / 4});
  auto* mask_bytes = static_cast<uint8_t*>(mask.raw());
  kernels::dropout_forward(x.value().data(), y.data(), mask_bytes, rows, rows ? n / rows : 0, p, seed, step_key,
                           first_sample);
  Variable result(std::move(y));
  if (!should_record({&x})) return result;
  auto xs = x.state(), ys = result.state();
  current_tape().record({xs}, ys, [=] {
    GradTarget t = grad_target(*xs);
    kernels::dropout_backward(ys->grad.data(), static_cast<const uint8_t*>(mask.raw()), n, p, t.data, t.accumulate);
  });
  return result;
}

Variable reshape(const Variable& x, const Shape& shape) {
  Variable result(x.value().view(shape));
  if (!should_record({&x})) return result;
  auto xs = x.state(), ys = result.state();
  current_tape().record({xs}, ys, [=] { pass_gradient(*xs, ys->grad); });
  return result;
}

Variable scale(const Variable& x, float factor) {
  const int64_t n = x.value().numel();
  Tensor y = x.value().clone();
  float* v = y.data();
  for (int64_t i = 0; i < n; ++i) v[i] *= factor;
  Variable result(std::move(y));
  if (!should_record({&x})) return result;
  auto xs = x.state(), ys = result.state();
  current_tape().record({xs}, ys, [=] {
    GradTarget t = grad_target(*xs);
    const float* g = ys->grad.data();
    for (int64_t i = 0; i < n; ++i) t.data[i] = (t.accumulate ? t.data[i] : 0.0f) + factor * g[i];
  });
  return result;
}

Variable add(const Variable& a, const Variable& b) {
  if (a.shape() != b.shape())
    throw_error(ErrorKind::kShape, "add", shape_str(a.shape()) + " + " + shape_str(b.shape()));
  const int64_t n = a.value().numel();
  Tensor y = Tensor::empty(a.shape());
  kernels::add_sum(a.value().data(), b.value().data(), y.data(), n);
  Variable result(std::move(y));
  if (!should_record({&a, &b})) return result;
  auto as = a.state(), bs = b.state(), ys = result.state();
  current_tape().record({as, bs}, ys, [=] {
    // x + x needs the sum; otherwise the first input to need a gradient may
    // take the output's storage (pass_gradient) once the other has read it.
    if (as == bs) {
      GradTarget t = grad_target(*as);
      kernels::add_into(t.data, ys->grad.data(), n, t.accumulate);
      kernels::add_into(t.data, ys->grad.data(), n, true);
      return;
    }
    if (bs->requires_grad) {
      GradTarget t = grad_target(*bs);
      kernels::add_into(t.data, ys->grad.data(), n, t.accumulate);
    }
    if (as->requires_grad) pass_gradient(*as, ys->grad);
  });
  return result;
}

}  // namespace gradmesh::autograd
