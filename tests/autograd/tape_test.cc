// Tape mechanics and op contracts checked directly (not through finite differences).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "gradmesh/core/error.h"
#include "gradmesh/kernels/gemm.h"

namespace gradmesh::autograd {
namespace {

class TapeTest : public ::testing::Test {
 protected:
  void SetUp() override { current_tape().clear(); }
  void TearDown() override { current_tape().clear(); }
};

struct WeightedGrad {
  std::vector<float> dy;  // the gradient that reached the output
  std::vector<float> dx;  // the gradient of x
};

// d/dx of (approximately) sum(out * w) for out = build(x): backward through mse_loss against
// target out - w/2 (denominator 1). dy is the exact float gradient mse_loss passed to the output,
// 2 * (out - target), so callers can compare dx with it bit for bit.
WeightedGrad grad_of_weighted_sum(const std::function<Variable()>& build, const Variable& x, const Tensor& weights) {
  x.state()->grad_written = false;
  const Variable out = build();
  Tensor target = out.value().clone();
  for (int64_t i = 0; i < target.numel(); ++i) target.data()[i] -= 0.5f * weights.data()[i];
  WeightedGrad r;
  for (int64_t i = 0; i < target.numel(); ++i) r.dy.push_back(2.0f * (out.value().data()[i] - target.data()[i]));
  current_tape().backward(mse_loss(out, target, 1.0f));
  r.dx = x.has_grad() ? x.grad().to_vector() : std::vector<float>(static_cast<size_t>(x.value().numel()), 0.0f);
  return r;
}

TEST_F(TapeTest, TwoUsesOfAVariableSumTheirGradients) {
  Variable x = random_leaf({3, 4}, 1);
  const Tensor w = random_tensor({3, 4}, 2);
  auto tanh_branch = [&] { return activation(x, Activation::kTanh); };
  auto gelu_branch = [&] { return activation(x, Activation::kGelu); };
  const std::vector<float> g_tanh = grad_of_weighted_sum(tanh_branch, x, w).dx;
  const std::vector<float> g_gelu = grad_of_weighted_sum(gelu_branch, x, w).dx;
  const std::vector<float> g_both =
      grad_of_weighted_sum([&] { return add(tanh_branch(), gelu_branch()); }, x, w).dx;
  for (size_t i = 0; i < g_both.size(); ++i) {
    EXPECT_NEAR(g_both[i], g_tanh[i] + g_gelu[i], 1e-6) << i;
    EXPECT_NE(g_tanh[i], 0.0f);
  }
}

// Under bf16 products a Linear rounds its input and weight once and keeps
// them for backward: the same bits as gemm() rounding per product.
TEST_F(TapeTest, Bf16LinearKeepsItsRoundedOperandsAndGivesGemmsBits) {
  const int64_t batch = 5, in = 19, out = 7;
  Variable x = random_leaf({batch, in}, 5), w = random_leaf({out, in}, 6), b = random_leaf({out}, 7);
  const Tensor weights = random_tensor({batch, out}, 8);
  kernels::set_matmul_precision(kernels::MatmulPrecision::kBf16);
  w.state()->grad_written = false;
  const WeightedGrad g = grad_of_weighted_sum([&] { return linear(x, w, b); }, x, weights);
  std::vector<float> y(static_cast<size_t>(batch * out)), dw(static_cast<size_t>(out * in)),
      dx(static_cast<size_t>(batch * in));
  kernels::gemm(false, true, batch, out, in, 1.0f, x.value().data(), in, w.value().data(), in, 0.0f, y.data(), out);
  kernels::gemm(true, false, out, in, batch, 1.0f, g.dy.data(), out, x.value().data(), in, 0.0f, dw.data(), in);
  kernels::gemm(false, false, batch, in, out, 1.0f, g.dy.data(), out, w.value().data(), in, 0.0f, dx.data(), in);
  const std::vector<float> forward = linear(x, w, b).value().to_vector();
  kernels::set_matmul_precision(kernels::MatmulPrecision::kFp32);
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t c = 0; c < out; ++c) y[static_cast<size_t>(r * out + c)] += b.value().data()[c];
  EXPECT_EQ(forward, y);
  EXPECT_EQ(g.dx, dx);
  EXPECT_EQ(w.grad().to_vector(), dw);
  std::vector<float> f32_dx(dx.size());
  kernels::gemm(false, false, batch, in, out, 1.0f, g.dy.data(), out, w.value().data(), in, 0.0f, f32_dx.data(), in);
  EXPECT_NE(f32_dx, dx) << "bf16 rounded nothing";
}

TEST_F(TapeTest, AddOfSameVariableDoublesTheGradient) {
  Variable x = random_leaf({2, 5}, 3);
  const Tensor w = random_tensor({2, 5}, 4);
  const WeightedGrad g = grad_of_weighted_sum([&] { return add(x, x); }, x, w);
  for (size_t i = 0; i < g.dx.size(); ++i) EXPECT_EQ(g.dx[i], 2 * g.dy[i]) << i;
}

TEST_F(TapeTest, DeadBranchContributesNothing) {
  Variable x = random_leaf({2, 3}, 5);
  const Tensor w = random_tensor({2, 3}, 6);
  const std::vector<float> used_only =
      grad_of_weighted_sum([&] { return activation(x, Activation::kTanh); }, x, w).dx;
  const std::vector<float> with_dead = grad_of_weighted_sum(
      [&] {
        const Variable dead = activation(x, Activation::kGelu);  // recorded, never reaches the loss
        (void)dead;
        return activation(x, Activation::kTanh);
      },
      x, w).dx;
  EXPECT_EQ(with_dead, used_only);
}

TEST_F(TapeTest, ReshapePassesGradientThroughUnchanged) {
  Variable x = random_leaf({2, 3, 2}, 7);
  const Tensor w = random_tensor({3, 4}, 8);
  const WeightedGrad g = grad_of_weighted_sum([&] { return reshape(x, {3, 4}); }, x, w);
  EXPECT_EQ(g.dx, g.dy);
  EXPECT_EQ(reshape(x, {12}).shape(), (Shape{12}));
}

TEST_F(TapeTest, DropoutGradientIsMaskOverKeepProbability) {
  const float p = 0.4f;
  Variable x = random_leaf({8, 16}, 9, 0.1f, 1.0f);  // nonzero: a zero output means a dropped element
  const Tensor w = random_tensor({8, 16}, 10);
  const Variable y = [&] {
    NoGradGuard no_grad;
    return dropout(x, p, 3, 7, 11);
  }();
  const WeightedGrad g = grad_of_weighted_sum([&] { return dropout(x, p, 3, 7, 11); }, x, w);
  int dropped = 0;
  for (size_t i = 0; i < g.dx.size(); ++i) {
    const bool kept = y.value().data()[i] != 0.0f;
    dropped += !kept;
    EXPECT_EQ(g.dx[i], kept ? g.dy[i] * (1.0f / (1.0f - p)) : 0.0f) << i;
  }
  EXPECT_GT(dropped, 20);
  EXPECT_LT(dropped, 90);
}

TEST_F(TapeTest, DropoutWithZeroProbabilityIsIdentity) {
  Variable x = random_leaf({2, 3}, 11);
  const Variable y = dropout(x, 0.0f, 1, 1, 0);
  EXPECT_EQ(y.value().to_vector(), x.value().to_vector());
  EXPECT_THROW(dropout(x, 1.0f, 1, 1, 0), Error);
  EXPECT_THROW(dropout(x, -0.1f, 1, 1, 0), Error);
}

TEST_F(TapeTest, EmbeddingOverwriteClearsRowsNotLookedUp) {
  Variable table = random_leaf({5, 2}, 40);
  const Tensor w = random_tensor({2, 2}, 41);
  grad_of_weighted_sum([&] { return embedding({2, 4}, table); }, table, w);
  // A new pass (grad_written reset) that reads only row 1: rows 2 and 4 must not keep the old gradient.
  const WeightedGrad g = grad_of_weighted_sum([&] { return embedding({1, 1}, table); }, table, w);
  EXPECT_EQ(g.dx, (std::vector<float>{0, 0, g.dy[0] + g.dy[2], g.dy[1] + g.dy[3], 0, 0, 0, 0, 0, 0}));
}

TEST_F(TapeTest, CrossEntropyValueAndGradientByHand) {
  const std::vector<float> z = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, -0.5f};  // [2, 3]
  const std::vector<int32_t> labels = {2, 0};
  Variable logits(Tensor::from_vector({2, 3}, z), true);
  for (const float denominator : {0.0f, 8.0f}) {
    SCOPED_TRACE(denominator);
    const double d = denominator > 0 ? denominator : 2.0;
    double want_loss = 0;
    std::vector<double> want_grad(6);
    for (int r = 0; r < 2; ++r) {
      double sum = 0;
      for (int c = 0; c < 3; ++c) sum += std::exp(static_cast<double>(z[r * 3 + c]));
      want_loss += std::log(sum) - z[r * 3 + labels[r]];
      for (int c = 0; c < 3; ++c)
        want_grad[r * 3 + c] = (std::exp(static_cast<double>(z[r * 3 + c])) / sum - (c == labels[r])) / d;
    }
    logits.state()->grad_written = false;
    const Variable loss = cross_entropy(logits, labels, denominator);
    EXPECT_NEAR(loss.value().item(), want_loss / d, 1e-6);
    current_tape().backward(loss);
    const std::vector<float> g = logits.grad().to_vector();
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(g[i], want_grad[i], 1e-6) << i;
  }
}

TEST_F(TapeTest, MseLossValueAndGradientByHand) {
  Variable pred(Tensor::from_vector({2, 2}, {1, 2, 3, 4}), true);
  const Tensor target = Tensor::from_vector({2, 2}, {0, 2, 5, 4.5f});
  const Variable mean = mse_loss(pred, target);
  EXPECT_FLOAT_EQ(mean.value().item(), (1 + 0 + 4 + 0.25f) / 4);
  current_tape().backward(mean);
  EXPECT_EQ(pred.grad().to_vector(), (std::vector<float>{0.5f, 0.0f, -1.0f, -0.25f}));
  pred.state()->grad_written = false;
  const Variable summed = mse_loss(pred, target, 0.5f);
  EXPECT_FLOAT_EQ(summed.value().item(), 2 * 5.25f);
  current_tape().backward(summed);
  EXPECT_EQ(pred.grad().to_vector(), (std::vector<float>{4.0f, 0.0f, -8.0f, -2.0f}));
}

TEST_F(TapeTest, SecondBackwardAccumulatesUnlessReset) {
  Variable x = random_leaf({2, 2}, 12);
  const Tensor target = random_tensor({2, 2}, 13);
  current_tape().backward(mse_loss(x, target, 1.0f));
  const std::vector<float> once = x.grad().to_vector();
  current_tape().backward(mse_loss(x, target, 1.0f));
  const std::vector<float> twice = x.grad().to_vector();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]) << i;
  x.state()->grad_written = false;
  current_tape().backward(mse_loss(x, target, 1.0f));
  EXPECT_EQ(x.grad().to_vector(), once);
}

TEST_F(TapeTest, NoGradGuardRecordsNothing) {
  Variable x = random_leaf({2, 1, 4, 4}, 14), w = random_leaf({2, 1, 3, 3}, 15), b = random_leaf({2}, 16);
  Variable lw = random_leaf({3, 8}, 17), table = random_leaf({4, 8}, 18);
  auto run_all_ops = [&] {
    const Variable c = conv2d(x, w, b, {1, 0, Activation::kRelu});
    const Variable p = max_pool2d(c, 2, 2, 0);
    const Variable f = reshape(p, {2, 2});
    const Variable e = embedding({0, 3, 3}, table);
    const Variable n = layer_norm(e, Variable(), Variable(), 1e-5f);
    const Variable a = activation(dropout(n, 0.5f, 1, 1, 0), Activation::kGelu);
    const Variable l = linear(add(a, a), lw, Variable());
    return cross_entropy(l, {0, 1, 2});
  };
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(grad_enabled());
    const Variable loss = run_all_ops();
    EXPECT_EQ(current_tape().size(), 0u);
    EXPECT_FALSE(loss.requires_grad());
    EXPECT_THROW(current_tape().backward(loss), Error);  // nothing recorded: not differentiable
  }
  EXPECT_TRUE(grad_enabled());
  const Variable loss = run_all_ops();  // the same ops with grad mode on do record
  EXPECT_EQ(current_tape().size(), 10u);
  EXPECT_TRUE(loss.requires_grad());
}

TEST_F(TapeTest, NothingRecordedWithoutRequiresGrad) {
  Variable x(random_tensor({2, 3}, 19)), w(random_tensor({4, 3}, 20));
  const Variable y = linear(x, w, Variable());
  EXPECT_EQ(current_tape().size(), 0u);
  EXPECT_FALSE(y.requires_grad());
}

TEST_F(TapeTest, BackwardOnNonScalarThrows) {
  Variable x = random_leaf({2, 3}, 21), w = random_leaf({4, 3}, 22);
  const Variable y = linear(x, w, Variable());
  try {
    current_tape().backward(y);
    FAIL() << "backward on a [2, 4] output did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 4]"), std::string::npos) << e.what();
  }
}

// Each op rejects shapes that do not fit with an Error(kShape) naming the op.
void expect_shape_error(const std::function<void()>& call, const std::string& op) {
  try {
    call();
    ADD_FAILURE() << op << " accepted mismatched shapes";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kShape) << e.what();
    EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
  }
}

TEST_F(TapeTest, ShapeMismatchesThrowNamingTheOp) {
  Variable x = random_leaf({2, 3}, 23);
  expect_shape_error([&] { linear(x, random_leaf({4, 5}, 24), Variable()); }, "linear");
  expect_shape_error([&] { linear(x, random_leaf({4, 3}, 24), random_leaf({5}, 25)); }, "linear");
  expect_shape_error([&] { conv2d(x, random_leaf({1, 1, 2, 2}, 26), Variable(), {}); }, "conv2d");
  expect_shape_error(
      [&] { conv2d(random_leaf({1, 2, 4, 4}, 27), random_leaf({1, 3, 2, 2}, 28), Variable(), {}); }, "conv2d");
  expect_shape_error(
      [&] { conv2d(random_leaf({1, 1, 2, 2}, 27), random_leaf({1, 1, 3, 3}, 28), Variable(), {}); }, "conv2d");
  expect_shape_error([&] { max_pool2d(x, 2, 2, 0); }, "max_pool2d");
  expect_shape_error([&] { add(x, random_leaf({3, 2}, 29)); }, "add");
  expect_shape_error([&] { cross_entropy(x, {0}); }, "cross_entropy");
  expect_shape_error([&] { cross_entropy(x, {0, 3}); }, "cross_entropy");
  expect_shape_error([&] { mse_loss(x, random_tensor({6}, 30)); }, "mse_loss");
  expect_shape_error([&] { embedding({0, 4}, random_leaf({4, 2}, 31)); }, "embedding");
  expect_shape_error([&] { layer_norm(x, random_leaf({2}, 32), Variable(), 1e-5f); }, "layer_norm");
}

}  // namespace
}  // namespace gradmesh::autograd
