#include "autograd/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "gradmesh/core/rng.h"

namespace gradmesh::autograd {
namespace {

double loss_in_double(const Tensor& out, const Tensor& target) {
  const float* o = out.data();
  const float* t = target.data();
  double sum = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double d = static_cast<double>(o[i]) - t[i];
    sum += d * d;
  }
  return sum;
}

double evaluate(const std::function<Variable()>& build, const Tensor& target) {
  NoGradGuard no_grad;
  return loss_in_double(build().value(), target);
}

}  // namespace

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo, float hi) {
  Tensor t = Tensor::empty(shape);
  const CounterRng rng(1234, RngPurpose::kTest, seed);
  float* d = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = lo + (hi - lo) * rng.uniform(static_cast<uint64_t>(i));
  return t;
}

Variable random_leaf(const Shape& shape, uint64_t seed, float lo, float hi) {
  return Variable(random_tensor(shape, seed, lo, hi), /*requires_grad=*/true);
}

::testing::AssertionResult gradcheck(const std::function<Variable()>& build, const std::vector<Variable>& inputs,
                                     const GradcheckOptions& options) {
  current_tape().clear();
  for (const Variable& v : inputs) v.state()->grad_written = false;

  // Analytic gradients.
  const Variable out = build();
  if (!out.requires_grad()) {
    current_tape().clear();
    return ::testing::AssertionFailure() << "the output was not recorded: no input requires a gradient";
  }
  const Tensor target = random_tensor(out.shape(), options.target_seed);
  current_tape().backward(mse_loss(out, target, /*denominator=*/1.0f));
  std::vector<std::vector<float>> analytic;
  for (const Variable& v : inputs) {
    if (!v.requires_grad()) {
      analytic.emplace_back();
    } else if (v.has_grad()) {
      analytic.push_back(v.grad().to_vector());
    } else {  // nothing flowed into it: the gradient is zero
      analytic.emplace_back(static_cast<size_t>(v.value().numel()), 0.0f);
    }
  }

  std::ostringstream failures;
  int checked = 0, failed = 0;
  double largest = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].requires_grad()) continue;
    Tensor storage = inputs[k].value();  // shares the input's storage: writes perturb the input
    float* x = storage.data();
    for (int64_t i = 0; i < inputs[k].value().numel(); ++i) {
      const float saved = x[i];
      // The step actually taken in float32, so the difference quotient divides by the true 2h.
      const float plus = static_cast<float>(saved + options.step), minus = static_cast<float>(saved - options.step);
      x[i] = plus;
      const double up = evaluate(build, target);
      x[i] = minus;
      const double down = evaluate(build, target);
      x[i] = saved;
      const double numeric = (up - down) / (static_cast<double>(plus) - static_cast<double>(minus));
      const double a = analytic[k][static_cast<size_t>(i)];
      largest = std::max(largest, std::fabs(a));
      ++checked;
      if (std::fabs(a - numeric) > options.atol + options.rtol * std::max(std::fabs(a), std::fabs(numeric))) {
        if (++failed <= 8)
          failures << "\n  input " << k << " " << shape_str(inputs[k].shape()) << " element " << i
                   << ": analytic " << a << ", numeric " << numeric;
      }
    }
  }
  if (checked == 0) return ::testing::AssertionFailure() << "no input requires a gradient";
  if (failed > 0)
    return ::testing::AssertionFailure() << failed << " of " << checked << " gradient elements differ"
                                         << failures.str();
  if (largest == 0) return ::testing::AssertionFailure() << "every analytic gradient is zero";
  return ::testing::AssertionSuccess() << checked << " gradient elements match";
}

}  // namespace gradmesh::autograd
