#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gradmesh/core/rng.h"
#include "gradmesh/kernels/conv.h"
#include "kernels/conv_test_support.h"
#include "gradmesh/kernels/gemm.h"

namespace gradmesh::kernels {
namespace {

using testing::describe;
using testing::input_numel;
using testing::output_numel;
using testing::random_values;

// Strides 1 and 2, padding 0 and 1, square and non-square kernels and images, 1x1 kernels.
const std::vector<ConvGeometry> kGeometries = {
    {2, 3, 7, 6, 4, 3, 3, 1, 0}, {2, 3, 7, 6, 4, 3, 3, 2, 1}, {1, 1, 5, 5, 2, 3, 3, 1, 1},
    {3, 2, 8, 9, 5, 2, 2, 2, 0}, {1, 4, 6, 6, 3, 1, 1, 1, 0}, {2, 2, 6, 7, 3, 3, 2, 1, 1},
    {1, 3, 9, 9, 2, 3, 3, 2, 0}, {2, 1, 4, 4, 1, 4, 4, 1, 1},
};

// The forward pass exactly as autograd::conv2d runs it: im2col, one GEMM, permute + bias (+ ReLU).
std::vector<float> conv_via_gemm(const ConvGeometry& g, const std::vector<float>& x, const std::vector<float>& w,
                                 const float* bias, Activation act) {
  std::vector<float> col(static_cast<size_t>(g.col_rows() * g.col_cols()));
  im2col(g, x.data(), col.data());
  std::vector<float> ycol(static_cast<size_t>(g.out_channels * g.col_cols()));
  gemm(false, false, g.out_channels, g.col_cols(), g.col_rows(), 1.0f, w.data(), g.col_rows(), col.data(),
       g.col_cols(), 0.0f, ycol.data(), g.col_cols());
  std::vector<float> y(static_cast<size_t>(output_numel(g)));
  conv_output_from_columns(g, ycol.data(), bias, act, y.data());
  return y;
}

TEST(Conv, Im2colGemmMatchesDirectReference) {
  uint64_t step = 0;
  for (const ConvGeometry& g : kGeometries) {
    SCOPED_TRACE(describe(g));
    const std::vector<float> x = random_values(input_numel(g), ++step);
    const std::vector<float> w = random_values(g.out_channels * g.col_rows(), ++step);
    const std::vector<float> b = random_values(g.out_channels, ++step);
    for (const bool with_bias : {false, true}) {
      const float* bias = with_bias ? b.data() : nullptr;
      std::vector<float> want(static_cast<size_t>(output_numel(g)));
      conv2d_reference(g, x.data(), w.data(), bias, want.data());
      const std::vector<float> got = conv_via_gemm(g, x, w, bias, Activation::kNone);
      // |x|, |w| <= 1: each output sums col_rows() products; float32 error is far below 1e-5 per term.
      const float tol = 1e-5f * static_cast<float>(g.col_rows() + 1);
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "output " << i;
    }
  }
}

TEST(Conv, OutputFromColumnsAppliesFusedRelu) {
  uint64_t step = 100;
  for (const ConvGeometry& g : kGeometries) {
    SCOPED_TRACE(describe(g));
    const std::vector<float> x = random_values(input_numel(g), ++step);
    const std::vector<float> w = random_values(g.out_channels * g.col_rows(), ++step);
    const std::vector<float> b = random_values(g.out_channels, ++step);
    std::vector<float> want(static_cast<size_t>(output_numel(g)));
    conv2d_reference(g, x.data(), w.data(), b.data(), want.data());
    const std::vector<float> got = conv_via_gemm(g, x, w, b.data(), Activation::kRelu);
    const float tol = 1e-5f * static_cast<float>(g.col_rows() + 1);
    int negatives = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      negatives += want[i] < 0.0f;
      ASSERT_NEAR(got[i], std::max(want[i], 0.0f), tol) << "output " << i;
      ASSERT_GE(got[i], 0.0f);
    }
    EXPECT_GT(negatives, 0) << "the inputs should exercise the clamp";
  }
}

TEST(Conv, OutputFromColumnsHandValues) {
  // N=2, OC=2, 1x1 output: ycol [OC, N] = [[1, -2], [3, -4]]; y [N, OC] = ycol^T + bias.
  const ConvGeometry g{2, 1, 1, 1, 2, 1, 1, 1, 0};
  const std::vector<float> ycol = {1, -2, 3, -4};
  const std::vector<float> bias = {0.5f, 1.0f};
  std::vector<float> y(4);
  conv_output_from_columns(g, ycol.data(), bias.data(), Activation::kNone, y.data());
  EXPECT_EQ(y, (std::vector<float>{1.5f, 4.0f, -1.5f, -3.0f}));
  conv_output_from_columns(g, ycol.data(), bias.data(), Activation::kRelu, y.data());
  EXPECT_EQ(y, (std::vector<float>{1.5f, 4.0f, 0.0f, 0.0f}));
  conv_output_from_columns(g, ycol.data(), nullptr, Activation::kRelu, y.data());
  EXPECT_EQ(y, (std::vector<float>{1.0f, 3.0f, 0.0f, 0.0f}));
}

TEST(Conv, Col2imIsTheAdjointOfIm2col) {
  uint64_t step = 200;
  for (const ConvGeometry& g : kGeometries) {
    SCOPED_TRACE(describe(g));
    const std::vector<float> x = random_values(input_numel(g), ++step);
    const std::vector<float> y = random_values(g.col_rows() * g.col_cols(), ++step);
    std::vector<float> col(y.size());
    im2col(g, x.data(), col.data());
    std::vector<float> back(x.size(), 123.0f);  // accumulate=false must overwrite
    col2im(g, y.data(), back.data(), /*accumulate=*/false);
    double lhs = 0, rhs = 0, scale = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      lhs += static_cast<double>(col[i]) * y[i];
      scale += std::fabs(static_cast<double>(col[i]) * y[i]);
    }
    for (size_t i = 0; i < x.size(); ++i) rhs += static_cast<double>(x[i]) * back[i];
    // col2im sums in float32, so allow float rounding relative to the magnitude of the terms.
    EXPECT_NEAR(lhs, rhs, 1e-6 * scale + 1e-9);
    EXPECT_GT(scale, 0.0);
  }
}

TEST(Conv, Col2imAccumulateAddsToExisting) {
  const ConvGeometry g = kGeometries[1];
  const std::vector<float> dcol = random_values(g.col_rows() * g.col_cols(), 300);
  std::vector<float> fresh(static_cast<size_t>(input_numel(g)));
  col2im(g, dcol.data(), fresh.data(), false);
  std::vector<float> acc(fresh.size(), 2.0f);
  col2im(g, dcol.data(), acc.data(), true);
  // Adding 2 first changes the rounding of the later sums, hence a tolerance rather than equality.
  for (size_t i = 0; i < fresh.size(); ++i) EXPECT_NEAR(acc[i], fresh[i] + 2.0f, 1e-5f) << i;
}

TEST(Conv, Im2colHandValuesWithPadding) {
  // 1x1x2x2 input [[1, 2], [3, 4]], 2x2 kernel, padding 1, stride 1: 3x3 output positions.
  const ConvGeometry g{1, 1, 2, 2, 1, 2, 2, 1, 1};
  const std::vector<float> x = {1, 2, 3, 4};
  std::vector<float> col(static_cast<size_t>(g.col_rows() * g.col_cols()));
  im2col(g, x.data(), col.data());
  // Row (kh=0, kw=0) reads x[oy-1, ox-1]; row (1, 1) reads x[oy, ox].
  const std::vector<float> want = {0, 0, 0, 0, 1, 2, 0, 3, 4,   // kh=0 kw=0
                                   0, 0, 0, 1, 2, 0, 3, 4, 0,   // kh=0 kw=1
                                   0, 1, 2, 0, 3, 4, 0, 0, 0,   // kh=1 kw=0
                                   1, 2, 0, 3, 4, 0, 0, 0, 0};  // kh=1 kw=1
  EXPECT_EQ(col, want);
}

TEST(Conv, ColumnsFromOutputGradInvertsThePermuteAndMasks) {
  const ConvGeometry g = kGeometries[3];
  const std::vector<float> ycol = random_values(g.out_channels * g.col_cols(), 400);
  std::vector<float> y(static_cast<size_t>(output_numel(g)));
  conv_output_from_columns(g, ycol.data(), nullptr, Activation::kNone, y.data());
  std::vector<float> back(ycol.size());
  conv_columns_from_output_grad(g, y.data(), nullptr, back.data());
  EXPECT_EQ(back, ycol);

  // With the ReLU output as the mask, the gradient survives only where the output was positive.
  std::vector<float> relu_y(y.size());
  conv_output_from_columns(g, ycol.data(), nullptr, Activation::kRelu, relu_y.data());
  const std::vector<float> dy = random_values(output_numel(g), 401);
  std::vector<float> dycol(ycol.size());
  conv_columns_from_output_grad(g, dy.data(), relu_y.data(), dycol.data());
  std::vector<float> unmasked(ycol.size());
  conv_columns_from_output_grad(g, dy.data(), nullptr, unmasked.data());
  int zeroed = 0;
  for (size_t i = 0; i < ycol.size(); ++i) {
    if (ycol[i] > 0.0f) {
      EXPECT_EQ(dycol[i], unmasked[i]) << i;
    } else {
      EXPECT_EQ(dycol[i], 0.0f) << i;
      ++zeroed;
    }
  }
  EXPECT_GT(zeroed, 0);
}

TEST(Conv, GeometryOutputSizes) {
  const ConvGeometry g{4, 1, 28, 28, 32, 3, 3, 1, 0};
  EXPECT_EQ(g.out_h(), 26);
  EXPECT_EQ(g.col_rows(), 9);
  EXPECT_EQ(g.col_cols(), 4 * 26 * 26);
  const ConvGeometry s{1, 1, 7, 8, 1, 3, 3, 2, 1};
  EXPECT_EQ(s.out_h(), 4);
  EXPECT_EQ(s.out_w(), 4);
}

}  // namespace
}  // namespace gradmesh::kernels
