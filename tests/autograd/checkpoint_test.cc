// Activation checkpointing: the recomputed piece gives the same gradients as
// running it normally, into the input and into the parameters, and leaves
// the enclosing tape's "gradient final" events intact.
#include <gtest/gtest.h>

#include "gradmesh/autograd/checkpoint.h"
#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/rng.h"

namespace gradmesh::autograd {
namespace {

Tensor normal_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  const CounterRng rng(seed, RngPurpose::kTest, 0);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = rng.normal(i);
  return t;
}

struct Gradients {
  std::vector<float> dx, dw, db;
  std::vector<int> final_params;
};

Gradients run(bool checkpointed) {
  current_tape().clear();
  Variable x(normal_tensor({4, 6}, 1), true);
  Variable w(normal_tensor({6, 6}, 2), true), b(normal_tensor({6}, 3), true);
  w.state()->param_index = 0;
  b.state()->param_index = 1;
  auto piece = [&](const Variable& in) { return activation(linear(in, w, b), Activation::kGelu); };
  Variable h = checkpointed ? checkpoint(piece, x, {w, b}) : piece(x);
  Variable out = linear(h, w, b);  // w and b are used outside the piece too
  Variable loss = mse_loss(out, Tensor::zeros({4, 6}));
  Gradients r;
  current_tape().backward(loss, [&](int p) { r.final_params.push_back(p); });
  r.dx = x.grad().to_vector();
  r.dw = w.grad().to_vector();
  r.db = b.grad().to_vector();
  return r;
}

TEST(Checkpoint, GradientsAreBitIdenticalAndEachParameterIsFinalOnce) {
  const Gradients plain = run(false), recomputed = run(true);
  EXPECT_EQ(plain.dx, recomputed.dx);
  EXPECT_EQ(plain.dw, recomputed.dw);
  EXPECT_EQ(plain.db, recomputed.db);
  ASSERT_EQ(recomputed.final_params.size(), 2u);
  EXPECT_EQ(plain.final_params.size(), 2u);
}

TEST(Checkpoint, WithoutGradientsNothingIsRecorded) {
  current_tape().clear();
  Variable x(normal_tensor({2, 3}, 4));
  Variable w(normal_tensor({3, 3}, 5));
  Variable y = checkpoint([&](const Variable& in) { return linear(in, w, Variable()); }, x, {w});
  EXPECT_EQ(current_tape().size(), 0u);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  NoGradGuard no_grad;
  Variable wg(normal_tensor({3, 3}, 6), true);
  checkpoint([&](const Variable& in) { return linear(in, wg, Variable()); }, x, {wg});
  EXPECT_EQ(current_tape().size(), 0u);
}

}  // namespace
}  // namespace gradmesh::autograd
