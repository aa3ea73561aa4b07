// Every ISA copy of every dispatched kernel (kernels/isa.h) gives the same
// bits as the baseline copy, in both numerics modes; the fused mode differs
// from the portable one by rounding only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "conv_test_support.h"
#include "gradmesh/kernels/activation.h"
#include "gradmesh/kernels/attention.h"
#include "gradmesh/kernels/conv_winograd.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/kernels/isa.h"
#include "gradmesh/kernels/layer_norm.h"

namespace gradmesh::kernels {
namespace {

using Outputs = std::vector<std::vector<float>>;
using testing::random_values;

// Restores the CPU's level and the default numerics after each test.
class IsaLevels : public ::testing::Test {
 protected:
  void TearDown() override {
    set_max_isa(IsaLevel::kAvx512);
    set_portable_numerics(false);
  }

  // The levels this CPU can run, baseline first.
  static std::vector<IsaLevel> levels() {
    std::vector<IsaLevel> out;
    for (IsaLevel l : {IsaLevel::kBaseline, IsaLevel::kAvx2, IsaLevel::kAvx512})
      if (static_cast<int>(l) <= static_cast<int>(cpu_isa())) out.push_back(l);
    return out;
  }

  // run() at every level in both modes: every level's bits equal the
  // baseline's, and the two modes agree within `tolerance` (relative to the
  // largest magnitude of each output). Returns whether any fused output
  // differed from its portable twin.
  static bool check(const std::string& what, const std::function<Outputs()>& run, double tolerance) {
    Outputs by_mode[2];
    for (const bool portable : {true, false}) {
      set_portable_numerics(portable);
      Outputs baseline;
      for (IsaLevel level : levels()) {
        set_max_isa(level);
        EXPECT_EQ(active_isa(), level);
        Outputs out = run();
        if (level == IsaLevel::kBaseline) {
          baseline = out;
          continue;
        }
        for (size_t i = 0; i < out.size(); ++i)
          EXPECT_TRUE(out[i].size() == baseline[i].size() &&
                      std::memcmp(out[i].data(), baseline[i].data(), out[i].size() * sizeof(float)) == 0)
              << what << " output " << i << " at " << isa_name(level) << " differs from the baseline copy"
              << (portable ? " (portable numerics)" : " (fused numerics)");
      }
      by_mode[portable ? 1 : 0] = baseline;
    }
    bool differ = false;
    for (size_t i = 0; i < by_mode[0].size(); ++i) {
      double largest = 0, diff = 0;
      for (size_t j = 0; j < by_mode[0][i].size(); ++j) {
        largest = std::max(largest, static_cast<double>(std::fabs(by_mode[1][i][j])));
        diff = std::max(diff, static_cast<double>(std::fabs(by_mode[0][i][j] - by_mode[1][i][j])));
      }
      EXPECT_LE(diff, tolerance * largest) << what << " output " << i << ": fused against portable";
      differ = differ || diff > 0;
    }
    return differ;
  }
};

TEST_F(IsaLevels, EveryLevelRunsAtLeastTheBaseline) {
  ASSERT_FALSE(levels().empty());
  set_max_isa(IsaLevel::kBaseline);
  EXPECT_EQ(active_isa(), IsaLevel::kBaseline);
  EXPECT_NE(describe_numerics().find("baseline"), std::string::npos);
  set_portable_numerics(true);
  EXPECT_NE(describe_numerics().find("no fused multiply-add"), std::string::npos);
}

TEST_F(IsaLevels, GeluForwardAndBackward) {
  const int64_t n = 1000 + 7;  // a partial group of sixteen at the end
  std::vector<float> x = random_values(n, 1), dy = random_values(n, 2);
  for (float& v : x) v *= 6.0f;
  const bool differ = check("gelu", [&] {
    Outputs out(3, std::vector<float>(static_cast<size_t>(n)));
    activation_forward(Activation::kGelu, x.data(), out[0].data(), n);
    activation_backward(Activation::kGelu, x.data(), out[0].data(), dy.data(), out[1].data(), n, false);
    out[2] = out[1];
    activation_backward(Activation::kGelu, x.data(), out[0].data(), dy.data(), out[2].data(), n, true);
    return out;
  }, 1e-6);
  EXPECT_TRUE(differ) << "the fused mode fused nothing";
}

TEST_F(IsaLevels, LayerNormForwardAndBackward) {
  for (const int64_t cols : {128, 37, 5}) {
    const int64_t rows = 9;
    const std::vector<float> x = random_values(rows * cols, 3), gamma = random_values(cols, 4),
                             beta = random_values(cols, 5), dy = random_values(rows * cols, 6);
    check("layer norm, " + std::to_string(cols) + " columns", [&] {
      Outputs out(8);
      for (auto& o : out) o.assign(static_cast<size_t>(rows * cols), 0.25f);
      std::vector<float> mean(rows), rstd(rows);
      layer_norm_forward(x.data(), gamma.data(), beta.data(), rows, cols, 1e-5f, out[0].data(), mean.data(),
                         rstd.data());
      layer_norm_forward(x.data(), nullptr, nullptr, rows, cols, 1e-5f, out[1].data(), mean.data(), rstd.data());
      out[2] = mean;
      out[3] = rstd;
      layer_norm_forward(x.data(), gamma.data(), beta.data(), rows, cols, 1e-5f, out[0].data(), mean.data(),
                         rstd.data());
      // The three passes the autograd op makes, accumulating and not.
      layer_norm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), rows, cols, nullptr, false,
                          out[4].data(), nullptr, true);
      layer_norm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), rows, cols, nullptr, false,
                          nullptr, out[5].data(), false);
      layer_norm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), rows, cols, out[6].data(), true,
                          nullptr, nullptr, true);
      layer_norm_backward(x.data(), nullptr, mean.data(), rstd.data(), dy.data(), rows, cols, out[7].data(), false,
                          nullptr, nullptr, true);
      return out;
    }, 1e-5);
  }
}

// The autograd op asks for every gradient in one call when it can: the
// same bits as one call per gradient, in both modes.
TEST_F(IsaLevels, LayerNormGradientsInOneCallEqualOneCallEach) {
  const int64_t rows = 6, cols = 45;
  const std::vector<float> x = random_values(rows * cols, 13), gamma = random_values(cols, 14),
                           dy = random_values(rows * cols, 15);
  for (const bool portable : {true, false}) {
    set_portable_numerics(portable);
    std::vector<float> y(x.size()), mean(rows), rstd(rows);
    layer_norm_forward(x.data(), gamma.data(), nullptr, rows, cols, 1e-5f, y.data(), mean.data(), rstd.data());
    std::vector<float> dx1(x.size(), 1.0f), dg1(cols, 2.0f), db1(cols, 3.0f);
    std::vector<float> dx3 = dx1, dg3 = dg1, db3 = db1;
    layer_norm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), rows, cols, dx1.data(), true,
                        dg1.data(), db1.data(), true);
    layer_norm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), rows, cols, nullptr, false,
                        dg3.data(), nullptr, true);
    layer_norm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), rows, cols, nullptr, false,
                        nullptr, db3.data(), true);
    layer_norm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), rows, cols, dx3.data(), true,
                        nullptr, nullptr, true);
    EXPECT_EQ(dx1, dx3) << portable;
    EXPECT_EQ(dg1, dg3) << portable;
    EXPECT_EQ(db1, db3) << portable;
  }
}

TEST_F(IsaLevels, BiasColumnSumsAndAdditions) {
  const int64_t rows = 7, cols = 53;
  const std::vector<float> x = random_values(rows * cols, 16), bias = random_values(cols, 17),
                           other = random_values(rows * cols, 18);
  check("bias, column sums, additions", [&] {
    Outputs out(5);
    out[0] = x;
    bias_rows_forward(out[0].data(), bias.data(), rows, cols, Activation::kNone);
    out[1] = x;
    bias_rows_forward(out[1].data(), bias.data(), rows, cols, Activation::kRelu);
    out[2].assign(static_cast<size_t>(cols), 0.5f);
    column_sums(x.data(), rows, cols, out[2].data(), true);
    out[3].resize(x.size());
    add_sum(x.data(), other.data(), out[3].data(), rows * cols);
    out[4] = x;
    add_into(out[4].data(), other.data(), rows * cols, true);
    EXPECT_EQ(out[3], out[4]);
    return out;
  }, 0.0);
}

TEST_F(IsaLevels, AttentionForwardBackwardAndDecode) {
  // T = 45: a diagonal tile cut by the sequence's end; D = 20: 16 + 4 columns.
  const AttentionShape s{2, 45, 3, 20};
  const int64_t C = s.heads * s.head_dim;
  const std::vector<float> qkv = random_values(s.batch * s.seq * 3 * C, 7), dy = random_values(s.batch * s.seq * C, 8);
  const bool differ = check("attention", [&] {
    Outputs out(4);
    out[0].resize(static_cast<size_t>(s.batch * s.seq * C));
    out[1].resize(static_cast<size_t>(s.batch * s.heads * s.seq));
    causal_attention_forward(qkv.data(), s, out[0].data(), out[1].data());
    out[2].assign(qkv.size(), 0.5f);
    causal_attention_backward(qkv.data(), out[0].data(), out[1].data(), dy.data(), s, out[2].data(), true);
    // Decoding the last position of the first sequence from its keys and values.
    std::vector<float> k(static_cast<size_t>(s.seq * C)), v(k.size());
    for (int64_t t = 0; t < s.seq; ++t)
      for (int64_t c = 0; c < C; ++c) {
        k[static_cast<size_t>(t * C + c)] = qkv[static_cast<size_t>(t * 3 * C + C + c)];
        v[static_cast<size_t>(t * C + c)] = qkv[static_cast<size_t>(t * 3 * C + 2 * C + c)];
      }
    out[3].resize(static_cast<size_t>(C));
    attention_decode(qkv.data() + (s.seq - 1) * 3 * C, k.data(), v.data(), s.seq, s.heads, s.head_dim, out[3].data());
    return out;
  }, 1e-5);
  EXPECT_TRUE(differ) << "the fused mode fused nothing";
}

TEST_F(IsaLevels, WinogradConvolution) {
  for (const int tile : {2, 4}) {
    const ConvGeometry g{3, 4, 10, 11, 5, 3, 3, 1, 1};
    const std::vector<float> x = random_values(testing::input_numel(g), 9),
                             w = random_values(g.out_channels * g.in_channels * 9, 10),
                             bias = random_values(g.out_channels, 11), dy = random_values(testing::output_numel(g), 12);
    check("winograd F(" + std::to_string(tile) + "x" + std::to_string(tile) + ")", [&] {
      std::vector<float> u(static_cast<size_t>(winograd_weight_floats(g, tile))),
          v(static_cast<size_t>(winograd_input_floats(g, tile))),
          scratch(static_cast<size_t>(winograd_scratch_floats(g, tile)));
      Outputs out(4);
      out[0].resize(static_cast<size_t>(testing::output_numel(g)));
      winograd_weights(g, tile, w.data(), u.data());
      winograd_forward(g, tile, x.data(), u.data(), bias.data(), Activation::kRelu, false, v.data(), scratch.data(),
                       out[0].data());
      std::vector<float> du(u.size());
      out[1].resize(static_cast<size_t>(g.out_channels));
      out[2].resize(x.size());
      WinogradGrads grads{du.data(), out[1].data(), out[2].data(), false};
      winograd_backward(g, tile, dy.data(), out[0].data(), false, u.data(), v.data(), scratch.data(), grads);
      out[3].resize(w.size());
      winograd_weight_grad(g, tile, du.data(), out[3].data(), false);
      return out;
    }, 0.0);  // the transforms never fuse: both modes are the same arithmetic
  }
}

}  // namespace
}  // namespace gradmesh::kernels
