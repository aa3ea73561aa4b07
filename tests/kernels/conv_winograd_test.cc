#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gradmesh/core/rng.h"
#include "gradmesh/kernels/conv.h"
#include "kernels/conv_test_support.h"
#include "gradmesh/kernels/conv_winograd.h"

namespace gradmesh::kernels {
namespace {

using testing::describe;
using testing::input_numel;
using testing::output_numel;
std::vector<float> winograd_random_values(int64_t n, uint64_t step) { return testing::random_values(n, step, 41); }

// 3x3 stride 1: odd and even H and W, padding 0 and 1, batch 1 and 3, a 1x1
// output, the reference CNN's 13x13 layer, a batch of 40 13x13 images (it
// spans several of the kernel's blocks of images), planes at the widest the
// one-vector row kernels take (16 padded columns) and wider ones, which take
// the scalar loops.
const std::vector<ConvGeometry> kWinogradGeometries = {
    {1, 3, 7, 6, 4, 3, 3, 1, 0},   {3, 5, 8, 9, 2, 3, 3, 1, 1},  {1, 2, 5, 5, 3, 3, 3, 1, 0},
    {3, 4, 6, 7, 5, 3, 3, 1, 1},   {3, 8, 13, 13, 6, 3, 3, 1, 0}, {1, 1, 3, 3, 1, 3, 3, 1, 0},
    {1, 2, 4, 3, 2, 3, 3, 1, 1},   {40, 2, 13, 13, 3, 3, 3, 1, 0}, {3, 16, 10, 11, 7, 3, 3, 1, 1},
};

// Tolerances. |x|, |w|, |dy| <= 1. The worst case grows with the
// transforms' coefficients: F(2x2)'s Winograd domain holds sums of up to 4
// inputs (|V| <= 4) times weights scaled up to 9/4, and its output transform
// adds 9 products per output, about 4x im2col's worst case; F(4x4)'s input
// rows weigh up to 10 inputs in absolute sum (|V| <= 100 in 2-D), its
// weights shrink (|U| <= 0.25 max|w|) and its output rows reach 19 (2-D:
// 361), about 40x. Rounding errors are random, so the observed errors on
// these cases are far below those bounds (max 3e-6 for F(2x2), 9e-5 for
// F(4x4) on the largest sums, and still below the bounds at a tenth of
// these per-term allowances). We allow 1e-6 (F(2x2)) and 1e-5 (F(4x4)) per
// summed term, against 1e-5 in the im2col test, so a transform error of even
// one part in 10^4 fails. Backward passes are the same transforms in
// adjoint form (weights: sums over N * OH * OW terms instead of C * 9).
float per_term(int tile) { return tile == 4 ? 1e-5f : 1e-6f; }
float forward_tolerance(const ConvGeometry& g, int tile) {
  return per_term(tile) * static_cast<float>(g.col_rows() + 1);
}
float weight_tolerance(const ConvGeometry& g, int tile) {
  return per_term(tile) * static_cast<float>(g.batch * g.out_h() * g.out_w() + 1);
}

// Direct backward in double: dx, dw, db from dy masked by (y > 0) when relu.
struct Reference {
  std::vector<float> dx, dw, db;
};

Reference reference_backward(const ConvGeometry& g, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& dy_masked) {
  const int64_t oh = g.out_h(), ow = g.out_w();
  std::vector<double> dx(static_cast<size_t>(input_numel(g)), 0.0), dw(w.size(), 0.0),
      db(static_cast<size_t>(g.out_channels), 0.0);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t oc = 0; oc < g.out_channels; ++oc)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          const double d = dy_masked[static_cast<size_t>(((n * g.out_channels + oc) * oh + oy) * ow + ox)];
          db[static_cast<size_t>(oc)] += d;
          for (int64_t c = 0; c < g.in_channels; ++c)
            for (int64_t kh = 0; kh < 3; ++kh)
              for (int64_t kw = 0; kw < 3; ++kw) {
                const int64_t iy = oy - g.padding + kh, ix = ox - g.padding + kw;
                if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) continue;
                const auto xi = static_cast<size_t>(((n * g.in_channels + c) * g.height + iy) * g.width + ix);
                const auto wi = static_cast<size_t>(((oc * g.in_channels + c) * 3 + kh) * 3 + kw);
                dx[xi] += d * w[wi];
                dw[wi] += d * x[xi];
              }
        }
  Reference r;
  r.dx.assign(dx.begin(), dx.end());
  r.dw.assign(dw.begin(), dw.end());
  r.db.assign(db.begin(), db.end());
  return r;
}

// [A, B, P] -> [B, A, P]: NCHW <-> channel-major.
std::vector<float> swap_outer(const std::vector<float>& src, int64_t a, int64_t b, int64_t plane) {
  std::vector<float> dst(src.size());
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t p = 0; p < plane; ++p)
        dst[static_cast<size_t>((j * a + i) * plane + p)] = src[static_cast<size_t>((i * b + j) * plane + p)];
  return dst;
}

struct WinogradRun {
  std::vector<float> y, dx, dw, db;
};

// Forward + backward through the Winograd kernels with NCHW tensors in and
// out; channel_major converts to and from [C, N, H, W] around the kernels.
WinogradRun run_winograd(ConvGeometry g, int tile, const std::vector<float>& x, const std::vector<float>& w,
                         const std::vector<float>& b, Activation act, const std::vector<float>& dy,
                         bool channel_major) {
  const int64_t in_plane = g.height * g.width, out_plane = g.out_h() * g.out_w();
  g.channel_major_input = channel_major;
  const std::vector<float> xin = channel_major ? swap_outer(x, g.batch, g.in_channels, in_plane) : x;
  const std::vector<float> dyin = channel_major ? swap_outer(dy, g.batch, g.out_channels, out_plane) : dy;
  std::vector<float> u(static_cast<size_t>(winograd_weight_floats(g, tile)));
  std::vector<float> v(static_cast<size_t>(winograd_input_floats(g, tile)));
  std::vector<float> scratch(static_cast<size_t>(winograd_scratch_floats(g, tile)));
  std::vector<float> y(static_cast<size_t>(output_numel(g)));
  winograd_weights(g, tile, w.data(), u.data());
  winograd_forward(g, tile, xin.data(), u.data(), b.data(), act, channel_major, v.data(), scratch.data(), y.data());
  WinogradRun r;
  std::vector<float> du(u.size());
  r.db.assign(static_cast<size_t>(g.out_channels), 0.0f);
  // Accumulate onto ones: checks the accumulate flag adds rather than overwrites.
  std::vector<float> dx(xin.size(), 1.0f);
  WinogradGrads grads{du.data(), r.db.data(), dx.data(), true};
  winograd_backward(g, tile, dyin.data(), act == Activation::kRelu ? y.data() : nullptr, channel_major, u.data(),
                    v.data(), scratch.data(), grads);
  r.dw.assign(w.size(), 0.0f);
  winograd_weight_grad(g, tile, du.data(), r.dw.data(), false);
  for (float& d : dx) d -= 1.0f;
  r.dx = channel_major ? swap_outer(dx, g.in_channels, g.batch, in_plane) : dx;
  r.y = channel_major ? swap_outer(y, g.out_channels, g.batch, out_plane) : y;
  return r;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << what << " " << i;
}

TEST(ConvWinograd, Applicability) {
  EXPECT_TRUE(winograd_applicable({1, 1, 5, 5, 1, 3, 3, 1, 0}));
  EXPECT_TRUE(winograd_applicable({1, 1, 5, 5, 1, 3, 3, 1, 1}));
  EXPECT_FALSE(winograd_applicable({1, 1, 5, 5, 1, 3, 3, 2, 0}));  // stride 2
  EXPECT_FALSE(winograd_applicable({1, 1, 5, 5, 1, 5, 5, 1, 0}));  // 5x5 kernel
  const ConvGeometry cnn{3, 2, 13, 13, 4, 3, 3, 1, 0};  // 11x11 outputs
  EXPECT_EQ(winograd_choose_tile(cnn), 4);             // 3x3 tiles of 36 elements beat 6x6 tiles of 16
  EXPECT_EQ(winograd_input_floats(cnn, 4), 36 * 2 * 3 * 9);
  EXPECT_EQ(winograd_input_floats(cnn, 2), 16 * 2 * 3 * 36);
  EXPECT_EQ(winograd_weight_floats(cnn, 4), 36 * 4 * 2);
  EXPECT_EQ(winograd_choose_tile({1, 1, 4, 4, 1, 3, 3, 1, 0}), 2);  // 2x2 outputs: one F(2x2) tile fits
}

TEST(ConvWinograd, MatchesDirectForwardAndBackward) {
  uint64_t step = 0;
  for (const ConvGeometry& g : kWinogradGeometries) {
    const std::vector<float> x = winograd_random_values(input_numel(g), ++step);
    const std::vector<float> w = winograd_random_values(g.out_channels * g.col_rows(), ++step);
    const std::vector<float> b = winograd_random_values(g.out_channels, ++step);
    const std::vector<float> dy = winograd_random_values(output_numel(g), ++step);
    for (const int tile : {2, 4})
      for (const Activation act : {Activation::kNone, Activation::kRelu})
      for (const bool channel_major : {false, true}) {
        SCOPED_TRACE(describe(g) + " F" + std::to_string(tile) + (act == Activation::kRelu ? " relu" : "") +
                     (channel_major ? " cm" : ""));
        std::vector<float> want(static_cast<size_t>(output_numel(g)));
        conv2d_reference(g, x.data(), w.data(), b.data(), want.data());
        // The fused ReLU's mask comes from Winograd's own output, which may
        // differ in sign from the reference within rounding of zero: no
        // gradient flows from those few outputs in either run.
        std::vector<float> dy_run = dy, masked = dy;
        for (size_t i = 0; i < want.size() && act == Activation::kRelu; ++i) {
          if (std::fabs(want[i]) <= forward_tolerance(g, tile)) dy_run[i] = 0.0f;
          masked[i] = want[i] > 0.0f ? dy_run[i] : 0.0f;
          want[i] = std::max(want[i], 0.0f);
        }
        const WinogradRun got = run_winograd(g, tile, x, w, b, act, dy_run, channel_major);
        const Reference ref = reference_backward(g, x, w, masked);
        expect_near(got.y, want, forward_tolerance(g, tile), "y");
        // dx sums over OC * 9 terms: the forward bound with OC in place of C.
        expect_near(got.dx, ref.dx, per_term(tile) * static_cast<float>(g.out_channels * 9 + 1), "dx");
        expect_near(got.dw, ref.dw, weight_tolerance(g, tile), "dw");
        expect_near(got.db, ref.db, 1e-5f * static_cast<float>(g.batch * g.out_h() * g.out_w()), "db");
      }
  }
}

TEST(ConvWinograd, DetectsAWrongWeight) {
  // The comparison above must be able to fail: perturb one weight tap.
  const ConvGeometry g{1, 2, 6, 6, 2, 3, 3, 1, 1};
  for (const int tile : {2, 4}) {
  const std::vector<float> x = winograd_random_values(input_numel(g), 900);
  const std::vector<float> w = winograd_random_values(g.out_channels * g.col_rows(), 901);
  const std::vector<float> b(2, 0.0f), dy(static_cast<size_t>(output_numel(g)), 0.0f);
  std::vector<float> want(static_cast<size_t>(output_numel(g)));
  conv2d_reference(g, x.data(), w.data(), nullptr, want.data());
  std::vector<float> wrong = w;
  wrong[4] += 0.05f;
  const WinogradRun got = run_winograd(g, tile, x, wrong, b, Activation::kNone, dy, false);
  float worst = 0.0f;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got.y[i] - want[i]));
  EXPECT_GT(worst, forward_tolerance(g, tile)) << "F" << tile;
  }
}

TEST(ConvWinograd, RerunsAreBitIdentical) {
  const ConvGeometry g{5, 8, 13, 13, 6, 3, 3, 1, 0};
  const std::vector<float> x = winograd_random_values(input_numel(g), 950), w = winograd_random_values(6 * 72, 951),
                           b = winograd_random_values(6, 952), dy = winograd_random_values(output_numel(g), 953);
  for (const int tile : {2, 4}) {
    const WinogradRun a = run_winograd(g, tile, x, w, b, Activation::kRelu, dy, true);
    const WinogradRun c = run_winograd(g, tile, x, w, b, Activation::kRelu, dy, true);
    EXPECT_EQ(a.y, c.y);
    EXPECT_EQ(a.dx, c.dx);
    EXPECT_EQ(a.dw, c.dw);
    EXPECT_EQ(a.db, c.db);
  }
}

}  // namespace
}  // namespace gradmesh::kernels
