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
    // Gamma and beta share one accumulate decision per call, so each is handled on its own pass.
    const float* gamma_data = gs ? gs->value.data() : nullptr;
    const float* mean = stats.data();
    const float* rstd = stats.data() + rows;
    if (gs && gs->requires_grad) {
      GradTarget t = grad_target(*gs);
      kernels::layer_norm_backward(xs->value.data(), gamma_data, mean, rstd, ys->grad.data(), rows, cols, nullptr,
                                   false, t.data, nullptr, t.accumulate);
    }
    if (bs && bs->requires_grad) {
      GradTarget t = grad_target(*bs);
      kernels::layer_norm_backward(xs->value.data(), gamma_data, mean, rstd, ys->grad.data(), rows, cols, nullptr,
                                   false, nullptr, t.data, t.accumulate);
    }
    if (xs->requires_grad) {
      GradTarget t = grad_target(*xs);
      kernels::layer_norm_backward(xs->value.data(), gamma_data, mean, rstd, ys->grad.data(), rows, cols, t.data,
                                   t.accumulate, nullptr, nullptr, true);
    }
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
