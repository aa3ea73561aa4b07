// kernels::Bf16Conv (oneDNN's bf16 convolutions) against a float64 direct
// convolution of the same bf16-rounded operands, forward and all three
// gradients, in both of gradmesh's layouts, with and without bias and ReLU,
// overwriting and accumulating. Runs where the CPU has bf16 dot products
// (elsewhere Conv2d never takes this path).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gradmesh/core/bf16.h"
#include "gradmesh/kernels/conv_bf16.h"
#include "gradmesh/kernels/gemm_bf16.h"
#include "kernels/conv_test_support.h"

namespace gradmesh::kernels {
namespace {

using testing::describe;
using testing::input_numel;
using testing::output_numel;

float rounded(float v) { return bf16_to_float(float_to_bf16(v)); }

std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> out;
  for (const float x : v) out.push_back(rounded(x));
  return out;
}

// Index of x[n, c, h, w] and y[n, o, h, w] in gradmesh's layouts.
int64_t x_index(const ConvGeometry& g, int64_t n, int64_t c, int64_t h, int64_t w) {
  return (g.input_plane(n, c) * g.height + h) * g.width + w;
}
int64_t y_index(const ConvGeometry& g, bool cm, int64_t n, int64_t o, int64_t h, int64_t w) {
  const int64_t plane = cm ? o * g.batch + n : n * g.out_channels + o;
  return (plane * g.out_h() + h) * g.out_w() + w;
}

// Calls f(n, o, c, oy, ox, iy, ix, kh, kw) for every product of the convolution.
template <typename F>
void for_each_product(const ConvGeometry& g, F f) {
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t oy = 0; oy < g.out_h(); ++oy)
        for (int64_t ox = 0; ox < g.out_w(); ++ox)
          for (int64_t c = 0; c < g.in_channels; ++c)
            for (int64_t kh = 0; kh < g.kernel_h; ++kh)
              for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
                const int64_t iy = oy * g.stride - g.padding + kh, ix = ox * g.stride - g.padding + kw;
                if (iy >= 0 && iy < g.height && ix >= 0 && ix < g.width) f(n, o, c, oy, ox, iy, ix, kh, kw);
              }
}

// A float64 value and the sum of its terms' magnitudes (the scale of float32's rounding error).
struct Sum {
  double value = 0, magnitude = 0;
  void add(double term) {
    value += term;
    magnitude += std::abs(term);
  }
};

// float32 sums of bf16 products: within 2e-5 of the terms' magnitudes (the
// worst case for 300 terms is 1.8e-5; seen: under 2e-6). Products of the
// unrounded operands would differ by about 1e-4 of it.
void expect_near(const std::vector<float>& got, const std::vector<Sum>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double error = std::abs(got[i] - want[i].value) / (want[i].magnitude + 1e-6);
    worst = std::max(worst, error);
  }
  EXPECT_LE(worst, 2e-5) << what;
}

struct Case {
  ConvGeometry g;
  bool bias, relu, channel_major_output;
};

class Bf16ConvTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!onednn_has_bf16_matmul()) GTEST_SKIP() << bf16_support().describe() << ": Conv2d does not use Bf16Conv here";
  }
};

TEST_P(Bf16ConvTest, MatchesADoubleReferenceOfTheRoundedOperands) {
  const auto [g, has_bias, relu, cm] = GetParam();
  SCOPED_TRACE(describe(g));
  const int64_t weights = g.out_channels * g.in_channels * g.kernel_h * g.kernel_w;
  const std::vector<float> x = testing::random_values(input_numel(g), 1), w = testing::random_values(weights, 2);
  const std::vector<float> bias = testing::random_values(g.out_channels, 3);
  const std::vector<float> dy = testing::random_values(output_numel(g), 4);
  const std::vector<float> x16 = rounded(x), w16 = rounded(w);
  const auto w_index = [&](int64_t o, int64_t c, int64_t kh, int64_t kw) {
    return ((o * g.in_channels + c) * g.kernel_h + kh) * g.kernel_w + kw;
  };

  std::vector<Sum> y_want(static_cast<size_t>(output_numel(g)));
  for_each_product(g, [&](int64_t n, int64_t o, int64_t c, int64_t oy, int64_t ox, int64_t iy, int64_t ix,
                          int64_t kh, int64_t kw) {
    y_want[y_index(g, cm, n, o, oy, ox)].add(double(x16[x_index(g, n, c, iy, ix)]) * w16[w_index(o, c, kh, kw)]);
  });
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t p = 0; p < g.out_h() * g.out_w(); ++p) {
        Sum& s = y_want[y_index(g, cm, n, o, 0, 0) + p];
        if (has_bias) s.add(bias[o]);
        if (relu && s.value < 0) s.value = 0;
      }

  Bf16Conv conv(g, has_bias, relu ? Activation::kRelu : Activation::kNone, cm);
  std::vector<float> y(static_cast<size_t>(output_numel(g)));
  conv.forward(x.data(), w.data(), has_bias ? bias.data() : nullptr, y.data());
  expect_near(y, y_want, "y");

  // Gradients of the masked dy (the caller applies the ReLU's mask).
  std::vector<float> dy_masked = dy;
  for (size_t i = 0; i < y.size(); ++i)
    if (relu && y[i] <= 0) dy_masked[i] = 0;
  const std::vector<float> dy16 = rounded(dy_masked);
  std::vector<Sum> dx_want(x.size()), dw_want(w.size()), db_want(static_cast<size_t>(g.out_channels));
  for_each_product(g, [&](int64_t n, int64_t o, int64_t c, int64_t oy, int64_t ox, int64_t iy, int64_t ix,
                          int64_t kh, int64_t kw) {
    const double d = dy16[y_index(g, cm, n, o, oy, ox)];
    dx_want[x_index(g, n, c, iy, ix)].add(d * w16[w_index(o, c, kh, kw)]);
    dw_want[w_index(o, c, kh, kw)].add(d * x16[x_index(g, n, c, iy, ix)]);
  });
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t p = 0; p < g.out_h() * g.out_w(); ++p) db_want[o].add(dy16[y_index(g, cm, n, o, 0, 0) + p]);

  std::vector<float> dx(x.size(), testing::random_values(1, 5)[0]), dw(w.size()), db(db_want.size());
  Bf16Conv::Grads grads{dw.data(), has_bias ? db.data() : nullptr, dx.data()};
  conv.backward(dy_masked.data(), grads);
  expect_near(dx, dx_want, "dx");
  expect_near(dw, dw_want, "dw");
  if (has_bias) expect_near(db, db_want, "db");

  // Accumulating adds to what the gradients hold: the same again.
  grads.dx_accumulate = grads.dw_accumulate = grads.db_accumulate = true;
  conv.backward(dy_masked.data(), grads);
  for (auto* want : {&dx_want, &dw_want, &db_want})
    for (Sum& s : *want) {
      s.value *= 2;
      s.magnitude *= 2;
    }
  expect_near(dx, dx_want, "dx accumulated");
  expect_near(dw, dw_want, "dw accumulated");
  if (has_bias) expect_near(db, db_want, "db accumulated");
}

ConvGeometry channel_major(ConvGeometry g) {
  g.channel_major_input = true;
  return g;
}

// The reference CNN's second layer (both layouts of gradmesh's CNN), odd
// sizes with padding, stride 2, a 1x1 kernel, channel counts off oneDNN's blocks of 16.
INSTANTIATE_TEST_SUITE_P(Geometries, Bf16ConvTest,
                         ::testing::Values(Case{channel_major({8, 32, 13, 13, 64, 3, 3, 1, 0}), true, true, false},
                                           Case{{3, 5, 9, 7, 6, 3, 3, 1, 1}, true, false, true},
                                           Case{channel_major({2, 17, 8, 11, 20, 3, 3, 2, 1}), false, true, true},
                                           Case{{2, 24, 6, 6, 9, 1, 1, 1, 0}, false, false, false}),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           const Case& c = param.param;
                           return "C" + std::to_string(c.g.in_channels) + "to" + std::to_string(c.g.out_channels) +
                                  "K" + std::to_string(c.g.kernel_h) + "S" + std::to_string(c.g.stride) + "P" +
                                  std::to_string(c.g.padding) + (c.g.channel_major_input ? "ChannelMajorIn" : "") +
                                  (c.channel_major_output ? "ChannelMajorOut" : "") + (c.bias ? "Bias" : "") +
                                  (c.relu ? "Relu" : "");
                         });

}  // namespace
}  // namespace gradmesh::kernels
