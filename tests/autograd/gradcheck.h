// Gradient checking: analytic gradients from the tape against central finite differences.
//
// gradcheck(build, inputs) calls `build()` to compute some output Variable of
// any shape from `inputs` (the closure captures them). It turns the output into
// the scalar
//
//   L = sum_i (out_i - t_i)^2          (t: fixed random target)
//
// so that every output element reaches the loss with its own, distinct weight
// 2 (out_i - t_i); a wrong routing or a transposed index cannot cancel out.
// The analytic side records mse_loss(out, t, denominator = 1) and runs
// current_tape().backward; the numeric side evaluates L in double from the
// float32 outputs, without recording, at x +- h for every element x of every
// input that requires a gradient.
//
// Tolerance. The ops compute in float32 (relative rounding ~6e-8). With O(1)
// inputs and outputs, evaluating L in double leaves an error of about
// 1e-7 * |L| in each evaluation; divided by 2h = 2e-3 that is ~1e-4 in the
// numeric gradient, and the truncation error of the central difference is
// O(h^2 * f''') ~ 1e-6. A wrong gradient is wrong by O(1) (or by a factor),
// so |analytic - numeric| <= atol + rtol * max(|analytic|, |numeric|) with
// rtol = 1e-2 and atol = 1e-3 separates the two by two orders of magnitude.
// Callers keep kinks (ReLU at 0, max-pool ties) further than h from every
// input they perturb.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"

namespace gradmesh::autograd {

struct GradcheckOptions {
  double step = 1e-3;  // h
  double rtol = 1e-2;
  double atol = 1e-3;
  uint64_t target_seed = 77;  // the random target t of the scalar loss
};

// Compares d L / d input for every element of every input with requires_grad.
// Fails if no input requires a gradient or if every analytic gradient is zero
// (a check that cannot fail proves nothing). Leaves the inputs' values unchanged.
::testing::AssertionResult gradcheck(const std::function<Variable()>& build, const std::vector<Variable>& inputs,
                                     const GradcheckOptions& options = {});

// [shape] filled with U(lo, hi) from the counter-based RNG (purpose kTest, step `seed`).
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// A fresh leaf Variable with random values that requires a gradient.
Variable random_leaf(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

}  // namespace gradmesh::autograd
