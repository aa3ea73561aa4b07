#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/kernels/embedding.h"
#include "gradmesh/kernels/layer_norm.h"

namespace gradmesh::autograd {

Variable layer_norm(const Variable& x, const Variable& gamma, const Variable& beta, float eps) {
  const int64_t cols = x.value().ndim() > 0 ? x.shape().back() : 0;
  for (const Variable* p : {&gamma, &beta})
    if (p->defined() && (p->value().ndim() != 1 || p->shape()[0] != cols))
      throw_error(ErrorKind::kShape, "layer_norm",
                  "input " + shape_str(x.shape()) + " with affine parameter " + shape_str(p->shape()));
  if (cols == 0) throw_error(ErrorKind::kShape, "layer_norm", "input " + shape_str(x.shape()) + " has no features");
  const int64_t rows = x.value().numel() / cols;
  Tensor y = Tensor::empty(x.shape());
  Tensor stats = Tensor::empty({2, rows});  // mean, rstd
  const float* g = gamma.defined() ? gamma.value().data() : nullptr;
  kernels::layer_norm_forward(x.value().data(), g, beta.defined() ? beta.value().data() : nullptr, rows, cols, eps,
                              y.data(), stats.data(), stats.data() + rows);
  Variable result(std::move(y));
  if (!should_record({&x, &gamma, &beta})) return result;
  auto xs = x.state(), gs = gamma.state(), bs = beta.state(), ys = result.state();
  std::vector<std::shared_ptr<VariableState>> inputs{xs};
  if (gs) inputs.push_back(gs);
  if (bs) inputs.push_back(bs);
  current_tape().record(std::move(inputs), ys, [=] {
    // One pass computes every gradient asked for (each the same bits as alone);
    // gamma and beta share the call's accumulate decision, so they go
    // together only when their gradients agree on it (they do in a plain
    // step: both first written, or both accumulated).
    const float* gamma_data = gs ? gs->value.data() : nullptr;
    const float* mean = stats.data();
    const float* rstd = stats.data() + rows;
    const float* x_data = xs->value.data();
    const float* dy = ys->grad.data();
    GradTarget tg{}, tb{}, tx{};
    const bool want_g = gs && gs->requires_grad, want_b = bs && bs->requires_grad;
    if (want_g) tg = grad_target(*gs);
    if (want_b) tb = grad_target(*bs);
    if (xs->requires_grad) tx = grad_target(*xs);
    const bool together = want_g && want_b && tg.accumulate == tb.accumulate;
    if (together) {
      kernels::layer_norm_backward(x_data, gamma_data, mean, rstd, dy, rows, cols, tx.data, tx.accumulate, tg.data,
                                   tb.data, tg.accumulate);
      return;
    }
    if (want_g)
      kernels::layer_norm_backward(x_data, gamma_data, mean, rstd, dy, rows, cols, nullptr, false, tg.data, nullptr,
                                   tg.accumulate);
    if (want_b)
      kernels::layer_norm_backward(x_data, gamma_data, mean, rstd, dy, rows, cols, nullptr, false, nullptr, tb.data,
                                   tb.accumulate);
    if (tx.data)
      kernels::layer_norm_backward(x_data, gamma_data, mean, rstd, dy, rows, cols, tx.data, tx.accumulate, nullptr,
                                   nullptr, true);
  });
  return result;
}

Variable embedding(const std::vector<int64_t>& ids, const Variable& table) {
  if (table.value().ndim() != 2)
    throw_error(ErrorKind::kShape, "embedding", "table " + shape_str(table.shape()) + " (expected [rows, dim])");
  const int64_t rows = table.shape()[0], dim = table.shape()[1], count = static_cast<int64_t>(ids.size());
  for (int64_t id : ids)
    if (id < 0 || id >= rows)
      throw_error(ErrorKind::kShape, "embedding",
                  "index " + std::to_string(id) + " outside a table of " + std::to_string(rows) + " rows");
  Tensor y = Tensor::empty({count, dim});
  kernels::embedding_gather(table.value().data(), dim, ids.data(), count, y.data());
  Variable result(std::move(y));
  if (!should_record({&table})) return result;
  auto ts = table.state(), ys = result.state();
  current_tape().record({ts}, ys, [=] {
    GradTarget t = grad_target(*ts);
    if (!t.accumulate) ts->grad.zero();
    kernels::embedding_scatter_add(ys->grad.data(), dim, ids.data(), count, t.data);
  });
  return result;
}

}  // namespace gradmesh::autograd
