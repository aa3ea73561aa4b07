#include "gradmesh/autograd/checkpoint.h"

#include "gradmesh/autograd/tape.h"

namespace gradmesh::autograd {

Variable checkpoint(const std::function<Variable(const Variable&)>& f, const Variable& x,
                    const std::vector<Variable>& params) {
  Variable result;
  {
    NoGradGuard no_grad;
    result = Variable(f(x).value());
  }
  bool record = grad_enabled() && x.requires_grad();
  for (const Variable& p : params) record = record || (grad_enabled() && p.requires_grad());
  if (!record) return result;

  std::vector<std::shared_ptr<VariableState>> inputs{x.state()};
  for (const Variable& p : params) inputs.push_back(p.state());
  auto xs = x.state(), ys = result.state();
  current_tape().record(std::move(inputs), ys, [f, xs, ys] {
    Tape local;
    Variable input(xs->value, xs->requires_grad);
    Variable output;
    {
      TapeScope scope(local);
      output = f(input);
    }
    local.backward_from(output, ys->grad);
    if (xs->requires_grad && input.has_grad()) {
      const GradTarget t = grad_target(*xs);
      const float* g = input.grad().data();
      const int64_t n = input.grad().numel();
      for (int64_t i = 0; i < n; ++i) t.data[i] = t.accumulate ? t.data[i] + g[i] : g[i];
    }
  });
  return result;
}

}  // namespace gradmesh::autograd
