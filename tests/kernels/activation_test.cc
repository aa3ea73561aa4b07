#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gradmesh/kernels/activation.h"

namespace gradmesh::kernels {
namespace {

std::vector<float> forward(Activation act, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  activation_forward(act, x.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

double reference(Activation act, double x) {
  switch (act) {
    case Activation::kNone: return x;
    case Activation::kRelu: return x > 0 ? x : 0;
    case Activation::kGelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::kTanh: return std::tanh(x);
  }
  return 0;
}

const std::vector<float> kInputs = {-3.0f, -1.0f, -0.25f, 0.5f, 1.0f, 2.5f};

TEST(Activation, ForwardMatchesDoubleReference) {
  for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kGelu, Activation::kTanh}) {
    SCOPED_TRACE(activation_name(act));
    const std::vector<float> y = forward(act, kInputs);
    for (size_t i = 0; i < kInputs.size(); ++i) EXPECT_NEAR(y[i], reference(act, kInputs[i]), 1e-6) << i;
  }
  // Hand values: GELU(1) = Phi(1) = 0.8413447, GELU(-1) = -(1 - Phi(1)).
  const std::vector<float> g = forward(Activation::kGelu, {1.0f, -1.0f, 0.0f});
  EXPECT_NEAR(g[0], 0.8413447f, 1e-6);
  EXPECT_NEAR(g[1], -0.1586553f, 1e-6);
  EXPECT_EQ(g[2], 0.0f);
}

// GELU runs in lanes of four with its own exp and erf: every input from -12
// to 12 (lengths that leave a partial last group), the extremes and NaN.
TEST(Activation, GeluOverItsWholeRangeAndAtTheEdges) {
  std::vector<float> x;
  for (int i = -1200; i <= 1200; ++i) x.push_back(static_cast<float>(i) / 100.0f);
  x.push_back(-1000.0f);
  x.push_back(1000.0f);
  const std::vector<float> y = forward(Activation::kGelu, x);
  std::vector<float> dx(x.size());
  const std::vector<float> ones(x.size(), 1.0f);
  activation_backward(Activation::kGelu, x.data(), y.data(), ones.data(), dx.data(), static_cast<int64_t>(x.size()),
                      false);
  for (size_t i = 0; i < x.size(); ++i) {
    const double xd = x[i];
    EXPECT_NEAR(y[i], reference(Activation::kGelu, xd), 4e-7 * std::max(1.0, std::abs(xd))) << x[i];
    const double cdf = 0.5 * (1 + std::erf(xd / std::sqrt(2.0)));
    const double slope = cdf + xd * std::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI);
    EXPECT_NEAR(dx[i], slope, 1e-6) << x[i];
  }
  EXPECT_TRUE(std::isnan(forward(Activation::kGelu, {NAN})[0]));
}

TEST(Activation, ForwardInPlace) {
  std::vector<float> x = {-1.0f, 2.0f};
  activation_forward(Activation::kRelu, x.data(), x.data(), 2);
  EXPECT_EQ(x, (std::vector<float>{0.0f, 2.0f}));
}

TEST(Activation, BackwardMatchesCentralDifferences) {
  const std::vector<float> dy = {0.5f, -1.0f, 2.0f, 1.5f, -0.75f, 1.0f};
  for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kGelu, Activation::kTanh}) {
    SCOPED_TRACE(activation_name(act));
    const std::vector<float> y = forward(act, kInputs);
    std::vector<float> dx(kInputs.size(), 5.0f);
    activation_backward(act, kInputs.data(), y.data(), dy.data(), dx.data(), 6, false);
    for (size_t i = 0; i < kInputs.size(); ++i) {
      const double h = 1e-5;  // in double: the reference is smooth away from the ReLU kink at 0
      const double slope = (reference(act, kInputs[i] + h) - reference(act, kInputs[i] - h)) / (2 * h);
      EXPECT_NEAR(dx[i], dy[i] * slope, 1e-5) << i;
    }
    std::vector<float> acc = dx;
    activation_backward(act, kInputs.data(), y.data(), dy.data(), acc.data(), 6, true);
    for (size_t i = 0; i < kInputs.size(); ++i) EXPECT_FLOAT_EQ(acc[i], 2 * dx[i]) << i;
  }
}

TEST(Activation, Names) {
  EXPECT_EQ(std::string(activation_name(Activation::kRelu)), "relu");
  EXPECT_EQ(std::string(activation_name(Activation::kGelu)), "gelu");
  EXPECT_EQ(std::string(activation_name(Activation::kTanh)), "tanh");
  EXPECT_EQ(std::string(activation_name(Activation::kNone)), "none");
}

TEST(Epilogue, BiasRowsWithAndWithoutRelu) {
  std::vector<float> y = {1, -2, 3, -4, 5, -6};  // [2, 3]
  const std::vector<float> bias = {0.5f, 1.0f, -4.0f};
  std::vector<float> plain = y;
  bias_rows_forward(plain.data(), bias.data(), 2, 3, Activation::kNone);
  EXPECT_EQ(plain, (std::vector<float>{1.5f, -1, -1, -3.5f, 6, -10}));
  bias_rows_forward(y.data(), bias.data(), 2, 3, Activation::kRelu);
  EXPECT_EQ(y, (std::vector<float>{1.5f, 0, 0, 0, 6, 0}));
}

TEST(Epilogue, ReluMaskColumnSumsAddScale) {
  std::vector<float> dy = {1, 2, 3, 4};
  const std::vector<float> y = {0.5f, 0.0f, -1.0f, 2.0f};
  relu_mask_inplace(dy.data(), y.data(), 4);
  EXPECT_EQ(dy, (std::vector<float>{1, 0, 0, 4}));

  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // [2, 3]
  std::vector<float> sums(3, 100.0f);
  column_sums(x.data(), 2, 3, sums.data(), false);
  EXPECT_EQ(sums, (std::vector<float>{5, 7, 9}));
  column_sums(x.data(), 2, 3, sums.data(), true);
  EXPECT_EQ(sums, (std::vector<float>{10, 14, 18}));

  std::vector<float> acc = {1, 1, 1};
  add_into(acc.data(), sums.data(), 3, true);
  EXPECT_EQ(acc, (std::vector<float>{11, 15, 19}));
  add_into(acc.data(), sums.data(), 3, false);
  EXPECT_EQ(acc, sums);
  scale_inplace(acc.data(), 0.5f, 3);
  EXPECT_EQ(acc, (std::vector<float>{5, 7, 9}));
}

TEST(Epilogue, RowSumsMatchDoubleForAnyWidth) {
  // Widths below, at and around the 16-lane blocking, plus a long row.
  for (const int64_t cols : {1, 15, 16, 17, 33, 1000}) {
    SCOPED_TRACE(cols);
    const int64_t rows = 3;
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * static_cast<float>(i)) + 0.25f;
    std::vector<float> out(rows, 100.0f);
    row_sums(x.data(), rows, cols, out.data(), false);
    for (int64_t r = 0; r < rows; ++r) {
      double want = 0, magnitude = 0;
      for (int64_t c = 0; c < cols; ++c) {
        want += x[r * cols + c];
        magnitude += std::fabs(x[r * cols + c]);
      }
      EXPECT_NEAR(out[r], want, 1e-6 * magnitude + 1e-6) << r;
    }
    std::vector<float> acc = out;
    row_sums(x.data(), rows, cols, acc.data(), true);
    for (int64_t r = 0; r < rows; ++r) EXPECT_FLOAT_EQ(acc[r], 2 * out[r]) << r;
  }
}

}  // namespace
}  // namespace gradmesh::kernels
