// Every op in autograd/ops.h against central finite differences (see gradcheck.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include "autograd/gradcheck.h"
#include "gradmesh/core/rng.h"

namespace gradmesh::autograd {
namespace {

class GradcheckTest : public ::testing::Test {
 protected:
  void SetUp() override { current_tape().clear(); }
  void TearDown() override { current_tape().clear(); }
};

// Pre-activations further than this from 0 cannot cross the ReLU kink when an
// input moves by h = 1e-3 (every weight and input is at most 1 in magnitude,
// so one perturbed element moves a pre-activation by at most 1e-3).
constexpr float kKinkMargin = 0.02f;

// True when every element of `z` is at least kKinkMargin from 0 and both signs occur
// (so the ReLU both passes and blocks some gradients).
bool clear_of_kink(const Tensor& z) {
  bool pos = false, neg = false;
  for (float v : z.to_vector()) {
    if (std::fabs(v) < kKinkMargin) return false;
    pos |= v > 0;
    neg |= v < 0;
  }
  return pos && neg;
}

// The first seed in [0, 500) whose data `ok` accepts; the data are deterministic,
// so this picks the same seed on every run and only guards against changing it by hand.
uint64_t find_seed(const std::function<bool(uint64_t)>& ok) {
  for (uint64_t s = 0; s < 500; ++s)
    if (ok(s)) return s;
  ADD_FAILURE() << "no seed in [0, 500) gives data clear of the ReLU kink";
  return 0;
}

// Values (perm(i) - n/2 - shift + 0.5) * 0.013: pairwise distinct with gaps far above 2h,
// and at least 0.0065 from 0, so no max-pool window changes its argmax, and no fused
// ReLU crosses its kink, when one element moves by h. A positive shift makes more values negative.
Variable distinct_leaf(const Shape& shape, uint64_t seed, int64_t shift = 0) {
  const int64_t n = shape_numel(shape);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const CounterRng rng(99, RngPurpose::kTest, seed);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)], order[rng.below(static_cast<uint64_t>(i), static_cast<uint64_t>(i + 1))]);
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    values[static_cast<size_t>(i)] = (static_cast<float>(order[i] - n / 2 - shift) + 0.5f) * 0.013f;
  return Variable(Tensor::from_vector(shape, values), true);
}

// y = x * x elementwise, recorded with a backward that writes `factor` * x * dy
// (factor 2 is the true derivative): lets the checker itself be tested.
Variable square(const Variable& x, float factor) {
  Tensor y = Tensor::empty(x.shape());
  const float* xv = x.value().data();
  for (int64_t i = 0; i < y.numel(); ++i) y.data()[i] = xv[i] * xv[i];
  Variable result(y);
  if (!should_record({&x})) return result;
  auto xs = x.state(), ys = result.state();
  current_tape().record({xs}, ys, [=] {
    GradTarget t = grad_target(*xs);
    for (int64_t i = 0; i < xs->value.numel(); ++i) {
      const float g = factor * xs->value.data()[i] * ys->grad.data()[i];
      t.data[i] = t.accumulate ? t.data[i] + g : g;
    }
  });
  return result;
}

TEST_F(GradcheckTest, CheckerAcceptsCorrectAndRejectsWrongGradients) {
  Variable x = random_leaf({3, 3}, 200);
  EXPECT_TRUE(gradcheck([&] { return square(x, 2.0f); }, {x}));
  EXPECT_FALSE(gradcheck([&] { return square(x, 2.1f); }, {x}));  // 5% off
  EXPECT_FALSE(gradcheck([&] { return square(x, 0.0f); }, {x}));  // nothing flows
  const std::vector<float> before = x.value().to_vector();
  EXPECT_FALSE(gradcheck([&] { return square(x, -2.0f); }, {x}));
  EXPECT_EQ(x.value().to_vector(), before) << "gradcheck must restore perturbed inputs";
  Variable constant(random_tensor({2}, 201));
  EXPECT_FALSE(gradcheck([&] { return activation(constant, Activation::kTanh); }, {constant}));
}

TEST_F(GradcheckTest, LinearWithoutBias) {
  Variable x = random_leaf({4, 5}, 1), w = random_leaf({3, 5}, 2);
  EXPECT_TRUE(gradcheck([&] { return linear(x, w, Variable()); }, {x, w}));
}

TEST_F(GradcheckTest, LinearWithBias) {
  Variable x = random_leaf({4, 5}, 3), w = random_leaf({3, 5}, 4), b = random_leaf({3}, 5);
  EXPECT_TRUE(gradcheck([&] { return linear(x, w, b); }, {x, w, b}));
}

TEST_F(GradcheckTest, LinearWithFusedRelu) {
  const uint64_t s = find_seed([](uint64_t seed) {
    NoGradGuard no_grad;
    return clear_of_kink(linear(random_leaf({4, 5}, 10 + seed), random_leaf({3, 5}, 1000 + seed),
                                random_leaf({3}, 2000 + seed))
                             .value());
  });
  Variable x = random_leaf({4, 5}, 10 + s), w = random_leaf({3, 5}, 1000 + s), b = random_leaf({3}, 2000 + s);
  EXPECT_TRUE(gradcheck([&] { return linear(x, w, b, Activation::kRelu); }, {x, w, b}));
}

TEST_F(GradcheckTest, LinearInputOnlyOrWeightOnly) {
  // Only some inputs require a gradient: the others must not be written.
  Variable x = random_leaf({2, 3}, 6), w(random_tensor({4, 3}, 7)), b = random_leaf({4}, 8);
  EXPECT_TRUE(gradcheck([&] { return linear(x, w, b); }, {x, w, b}));
  EXPECT_FALSE(w.has_grad());
}

struct ConvCase {
  int64_t stride, padding;
  Activation act;
  bool bias;
  // 3x3 stride-1 convolutions with >= 8 input channels take the Winograd path
  // (autograd/conv_op.cc); fewer take im2col + GEMM.
  int64_t in_channels = 2;
  int64_t size = 5;
};

class ConvGradcheck : public GradcheckTest, public ::testing::WithParamInterface<ConvCase> {};

TEST_P(ConvGradcheck, MatchesFiniteDifferences) {
  const ConvCase c = GetParam();
  const Conv2dOptions options{c.stride, c.padding, c.act};
  auto make = [&](uint64_t seed, Variable& x, Variable& w, Variable& b) {
    x = random_leaf({2, c.in_channels, c.size, c.size + 1}, 100 + seed);
    w = random_leaf({3, c.in_channels, 3, 3}, 1100 + seed);
    b = c.bias ? random_leaf({3}, 2100 + seed) : Variable();
  };
  uint64_t s = 0;
  if (c.act == Activation::kRelu)
    s = find_seed([&](uint64_t seed) {
      Variable x, w, b;
      make(seed, x, w, b);
      NoGradGuard no_grad;
      return clear_of_kink(conv2d(x, w, b, {c.stride, c.padding, Activation::kNone}).value());
    });
  Variable x, w, b;
  make(s, x, w, b);
  std::vector<Variable> inputs{x, w};
  if (c.bias) inputs.push_back(b);
  GradcheckOptions check;
  // L is quadratic in every input (away from ReLU kinks), so the central
  // difference has no truncation error and a larger h only shrinks the
  // rounding noise. Winograd's float32 forward rounds ~10-100x more than a
  // direct sum (its transforms add and subtract terms of similar size): at
  // h = 1e-3 the numeric side's noise reaches 0.1, at h = 2e-2 about 4e-3,
  // hence atol 1e-2 there; a wrong gradient is still off by O(1).
  if (c.in_channels >= 8) {
    check.step = 2e-2;
    check.atol = 1e-2;
  }
  EXPECT_TRUE(gradcheck([&] { return conv2d(x, w, b, options); }, inputs, check));
}

INSTANTIATE_TEST_SUITE_P(StridesPaddingsRelu, ConvGradcheck,
                         ::testing::Values(ConvCase{1, 0, Activation::kNone, true},
                                           ConvCase{2, 0, Activation::kNone, true},
                                           ConvCase{1, 1, Activation::kNone, false},
                                           ConvCase{2, 1, Activation::kNone, true},
                                           ConvCase{1, 1, Activation::kRelu, true},
                                           ConvCase{2, 1, Activation::kRelu, true},
                                           ConvCase{1, 0, Activation::kNone, true, 8, 5},    // Winograd F(2x2)
                                           ConvCase{1, 1, Activation::kRelu, true, 8, 9},    // Winograd, ReLU fused
                                           ConvCase{1, 0, Activation::kNone, false, 9, 10}));  // F(4x4) tiles

TEST_F(GradcheckTest, MaxPool2x2Stride2) {
  Variable x = distinct_leaf({2, 2, 6, 5}, 1);
  EXPECT_TRUE(gradcheck([&] { return max_pool2d(x, 2, 2, 0); }, {x}));
}

TEST_F(GradcheckTest, MaxPoolOverlappingWithPadding) {
  Variable x = distinct_leaf({1, 2, 6, 6}, 2);
  EXPECT_TRUE(gradcheck([&] { return max_pool2d(x, 3, 2, 1); }, {x}));
  Variable y = distinct_leaf({2, 1, 5, 5}, 3);
  EXPECT_TRUE(gradcheck([&] { return max_pool2d(y, 3, 1, 1); }, {y}));
}

TEST_F(GradcheckTest, MaxPoolWithFusedRelu) {
  // Mostly negative values, so that some windows' maxima are negative and the ReLU blocks their gradient.
  Variable x = distinct_leaf({2, 2, 6, 6}, 4, 40);
  for (const int64_t kernel : {2, 3}) {
    const int64_t padding = kernel == 3 ? 1 : 0;
    int negative = 0, positive = 0;
    {
      NoGradGuard no_grad;
      for (float v : max_pool2d(x, kernel, 2, padding).value().to_vector()) (v < 0 ? negative : positive)++;
    }
    ASSERT_GT(negative, 0) << "kernel " << kernel << ": no window exercises the ReLU";
    ASSERT_GT(positive, 0) << "kernel " << kernel;
    EXPECT_TRUE(gradcheck([&] { return max_pool2d(x, kernel, 2, padding, Activation::kRelu); }, {x}));
  }
}

TEST_F(GradcheckTest, ActivationRelu) {
  // |x| in [0.1, 1]: far from the kink.
  Tensor t = random_tensor({3, 7}, 20, 0.1f, 1.0f);
  const Tensor sign = random_tensor({3, 7}, 21);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (sign.data()[i] < 0) t.data()[i] = -t.data()[i];
  Variable x(t, true);
  EXPECT_TRUE(gradcheck([&] { return activation(x, Activation::kRelu); }, {x}));
}

TEST_F(GradcheckTest, ActivationGeluAndTanh) {
  Variable x = random_leaf({3, 7}, 22, -2.5f, 2.5f);
  EXPECT_TRUE(gradcheck([&] { return activation(x, Activation::kGelu); }, {x}));
  EXPECT_TRUE(gradcheck([&] { return activation(x, Activation::kTanh); }, {x}));
  EXPECT_TRUE(gradcheck([&] { return activation(x, Activation::kNone); }, {x}));
}

TEST_F(GradcheckTest, DropoutWithFixedMask) {
  // The mask is a function of (seed, step_key, sample), so every evaluation sees the same one.
  Variable x = random_leaf({6, 10}, 30, 0.1f, 1.0f);
  EXPECT_TRUE(gradcheck([&] { return dropout(x, 0.3f, 5, 2, 3); }, {x}));
}

TEST_F(GradcheckTest, LayerNormWithAffine) {
  Variable x = random_leaf({3, 5}, 40), gamma = random_leaf({5}, 41, 0.5f, 1.5f), beta = random_leaf({5}, 42);
  EXPECT_TRUE(gradcheck([&] { return layer_norm(x, gamma, beta, 1e-5f); }, {x, gamma, beta}));
}

TEST_F(GradcheckTest, LayerNormWithoutAffineOn3dInput) {
  Variable x = random_leaf({2, 3, 4}, 43);
  EXPECT_TRUE(gradcheck([&] { return layer_norm(x, Variable(), Variable(), 1e-5f); }, {x}));
}

TEST_F(GradcheckTest, EmbeddingWithRepeatedIds) {
  Variable table = random_leaf({5, 3}, 50);
  const std::vector<int64_t> ids = {1, 3, 1, 1, 0};  // rows 2 and 4 unused: zero gradient
  EXPECT_TRUE(gradcheck([&] { return embedding(ids, table); }, {table}));
}

TEST_F(GradcheckTest, ReshapeThenTanh) {
  Variable x = random_leaf({2, 3, 4}, 60);
  EXPECT_TRUE(gradcheck([&] { return activation(reshape(x, {6, 4}), Activation::kTanh); }, {x}));
  EXPECT_TRUE(gradcheck([&] { return reshape(x, {4, 6}); }, {x}));
}

TEST_F(GradcheckTest, ScaleByAFactor) {
  Variable x = random_leaf({3, 4}, 72);
  EXPECT_TRUE(gradcheck([&] { return scale(x, 0.375f); }, {x}));
  // Used twice: the gradients of both uses add up.
  EXPECT_TRUE(gradcheck([&] { return add(scale(x, -2.0f), scale(x, 0.5f)); }, {x}));
}

TEST_F(GradcheckTest, AddDistinctAndSameVariable) {
  Variable a = random_leaf({3, 4}, 70), b = random_leaf({3, 4}, 71);
  EXPECT_TRUE(gradcheck([&] { return add(a, b); }, {a, b}));
  // The same Variable on both sides: its gradient is the sum of both contributions.
  EXPECT_TRUE(gradcheck([&] { return add(a, a); }, {a}));
}

TEST_F(GradcheckTest, VariableReadByTwoOps) {
  Variable x = random_leaf({3, 4}, 72);
  EXPECT_TRUE(gradcheck(
      [&] { return add(activation(x, Activation::kTanh), activation(x, Activation::kGelu)); }, {x}));
}

TEST_F(GradcheckTest, CrossEntropyMeanAndDenominator) {
  Variable logits = random_leaf({4, 5}, 80, -2.0f, 2.0f);
  const std::vector<int32_t> labels = {0, 3, 4, 3};
  EXPECT_TRUE(gradcheck([&] { return cross_entropy(logits, labels); }, {logits}));
  EXPECT_TRUE(gradcheck([&] { return cross_entropy(logits, labels, 10.0f); }, {logits}));
}

TEST_F(GradcheckTest, MseLossMeanAndDenominator) {
  Variable pred = random_leaf({3, 4}, 90);
  const Tensor target = random_tensor({3, 4}, 91);
  EXPECT_TRUE(gradcheck([&] { return mse_loss(pred, target); }, {pred}));
  EXPECT_TRUE(gradcheck([&] { return mse_loss(pred, target, 5.0f); }, {pred}));
}

TEST_F(GradcheckTest, SmallNetworkEndToEnd) {
  // conv (fused ReLU) -> pool -> reshape -> linear -> layer_norm -> GELU -> linear -> cross-entropy.
  // Kinks: the seed keeps the conv's pre-activations clear of 0 and each pool window's maximum
  // clear of the runner-up (a window of ReLU zeros would be a tie).
  auto make = [](uint64_t seed) {
    return std::vector<Variable>{random_leaf({2, 1, 6, 6}, 300 + seed), random_leaf({2, 1, 3, 3}, 400 + seed),
                                 random_leaf({2}, 500 + seed),        random_leaf({4, 8}, 600 + seed),
                                 random_leaf({4}, 700 + seed),        random_leaf({3, 4}, 800 + seed)};
  };
  auto forward = [](const std::vector<Variable>& v) {
    const Variable h = max_pool2d(conv2d(v[0], v[1], v[2], {1, 0, Activation::kRelu}), 2, 2, 0);
    const Variable z = linear(reshape(h, {2, 8}), v[3], v[4]);
    return cross_entropy(linear(activation(layer_norm(z, Variable(), Variable(), 1e-5f), Activation::kGelu), v[5],
                                Variable()),
                         {2, 0});
  };
  const uint64_t s = find_seed([&](uint64_t seed) {
    const std::vector<Variable> v = make(seed);
    NoGradGuard no_grad;
    const Tensor pre = conv2d(v[0], v[1], v[2], {1, 0, Activation::kNone}).value();
    if (!clear_of_kink(pre)) return false;
    // Each 2x2 window of the ReLU output needs a maximum clear of the runner-up (ties: zeros).
    const std::vector<float> y = pre.to_vector();
    for (int64_t p = 0; p < 4; ++p)
      for (int64_t wy = 0; wy < 2; ++wy)
        for (int64_t wx = 0; wx < 2; ++wx) {
          std::vector<float> window;
          for (int64_t i = 0; i < 4; ++i)
            window.push_back(std::max(0.0f, y[p * 16 + (2 * wy + i / 2) * 4 + 2 * wx + i % 2]));
          std::sort(window.rbegin(), window.rend());
          if (window[0] - window[1] < kKinkMargin) return false;
        }
    return true;
  });
  const std::vector<Variable> v = make(s);
  EXPECT_TRUE(gradcheck([&] { return forward(v); }, v));
}

}  // namespace
}  // namespace gradmesh::autograd
