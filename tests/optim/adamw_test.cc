#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/optim/optimizer.h"

namespace gradmesh::optim {
namespace {

// torch.optim.AdamW written out in double: the reference for the kernel.
struct AdamWReference {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  std::vector<double> m, v;
  int t = 0;

  void step(std::vector<double>& p, const std::vector<double>& g, double lr) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * weight_decay;
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      p[i] -= (lr / bc1) * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
    }
  }
};

std::vector<float> grads_for_step(int step, size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i)
    g[i] = static_cast<float>(std::cos(0.9 * static_cast<double>(i) - 0.8 * step) * (0.2 + 0.3 * step));
  return g;
}

void expect_matches_reference(const AdamWOptions& options, float weight_decay, int steps) {
  const std::vector<float> start = {1.0f, -0.5f, 0.25f, 2.0f, -3.0f, 0.0f, 0.75f};
  std::vector<float> p = start;
  std::vector<double> ref(start.begin(), start.end());
  AdamWReference reference{options.beta1, options.beta2, options.eps, weight_decay, {}, {}, 0};
  auto opt = make_adamw({{0, static_cast<int64_t>(p.size()), weight_decay}}, options);
  const float lr = 0.01f;
  for (int s = 0; s < steps; ++s) {
    const std::vector<float> g = grads_for_step(s, p.size());
    opt->step(p.data(), g.data(), lr);
    reference.step(ref, std::vector<double>(g.begin(), g.end()), lr);
    for (size_t i = 0; i < p.size(); ++i)
      EXPECT_NEAR(p[i], ref[i], 1e-6 * (1 + std::fabs(ref[i]))) << "step " << s << " element " << i;
  }
  // The moments are exposed as state and must follow the reference too.
  auto state = opt->state();
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_NEAR(state[1].second.data()[i], reference.m[i], 1e-6);
    EXPECT_NEAR(state[2].second.data()[i], reference.v[i], 1e-7);
  }
}

TEST(AdamW, MatchesReference) { expect_matches_reference({}, 0.0f, 4); }
TEST(AdamW, WeightDecayMatchesReference) { expect_matches_reference({}, 0.1f, 4); }
// beta1 <= 0.5 takes PyTorch's other lerp formula.
TEST(AdamW, SmallBeta1MatchesReference) { expect_matches_reference({0.3f, 0.9f, 1e-6f}, 0.05f, 5); }

TEST(AdamW, ConstantGradientByHand) {
  // p = 1, g = 0.5 every step, lr = 0.1, default betas, wd = 0.01. With a
  // constant gradient the bias-corrected moments are exactly g and g^2:
  //   step 1: m = 0.05, v = 0.00025; m/bc1 = 0.5, v/bc2 = 0.25 -> update 0.1*0.5/0.5 = 0.1
  //   step 2: m = 0.095 (bc1 0.19), v = 0.00049975 (bc2 0.001999) -> update 0.1 again
  // Decay first multiplies p by 1 - 0.1*0.01 = 0.999:
  //   p1 = 1*0.999 - 0.1        = 0.899
  //   p2 = 0.899*0.999 - 0.1    = 0.798101
  //   p3 = 0.798101*0.999 - 0.1 = 0.697302899
  // (eps shifts each update by about 0.1*1e-8/0.5 = 2e-9.)
  auto opt = make_adamw({{0, 1, 0.01f}}, {});
  float p = 1.0f;
  const float g = 0.5f;
  for (float e : {0.899f, 0.798101f, 0.697302899f}) {
    opt->step(&p, &g, 0.1f);
    EXPECT_NEAR(p, e, 1e-6);
  }
  EXPECT_EQ(opt->steps_taken(), 3);
}

TEST(AdamW, FirstStepMovesByLearningRateWhateverTheGradient) {
  // At t = 1, m/bc1 = g and sqrt(v/bc2) = |g|, so the update is lr * sign(g).
  const std::vector<float> g = {1e-3f, -5.0f, 100.0f, -0.25f, 3e-2f};
  std::vector<float> p(g.size(), 0.5f);
  auto opt = make_adamw({{0, static_cast<int64_t>(g.size()), 0.0f}}, {});
  opt->step(p.data(), g.data(), 0.01f);
  for (size_t i = 0; i < g.size(); ++i) {
    const float expected = 0.5f - 0.01f * (g[i] > 0 ? 1.0f : -1.0f);
    EXPECT_NEAR(p[i], expected, 1e-6) << "gradient " << g[i];
  }
}

TEST(AdamW, GroupsWithDifferentDecayAndUncoveredElements) {
  std::vector<float> p = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> start = p;
  const std::vector<float> g = {0.1f, -0.2f, 0.3f, -0.4f, 0.5f, -0.6f, 0.7f, -0.8f};
  // [6, 8) with decay 0.5, [1, 3) without; 0, 3, 4, 5 are nobody's.
  auto opt = make_adamw({{6, 2, 0.5f}, {1, 2, 0.0f}}, {});
  for (int s = 0; s < 3; ++s) opt->step(p.data(), g.data(), 0.1f);
  for (size_t i : {0u, 3u, 4u, 5u}) EXPECT_EQ(p[i], start[i]) << "element " << i;

  AdamWReference decayed{0.9, 0.999, 1e-8, 0.5, {}, {}, 0}, plain{0.9, 0.999, 1e-8, 0.0, {}, {}, 0};
  std::vector<double> a = {7, 8}, b = {2, 3};
  for (int s = 0; s < 3; ++s) {
    decayed.step(a, {0.7, -0.8}, 0.1);
    plain.step(b, {-0.2, 0.3}, 0.1);
  }
  EXPECT_NEAR(p[6], a[0], 1e-5);
  EXPECT_NEAR(p[7], a[1], 1e-5);
  EXPECT_NEAR(p[1], b[0], 1e-5);
  EXPECT_NEAR(p[2], b[1], 1e-5);
  // Without decay p[6] would end at 6.7 (three updates of lr); decay takes it to ~5.72.
  EXPECT_LT(p[6], 6.5f);
}

TEST(AdamW, StateNamesAndSizes) {
  auto opt = make_adamw({{0, 5, 0.0f}, {10, 3, 0.1f}}, {});
  EXPECT_EQ(opt->name(), "adamw");
  auto state = opt->state();
  ASSERT_EQ(state.size(), 3u);
  EXPECT_EQ(state[0].first, "step");
  EXPECT_EQ(state[1].first, "exp_avg");
  EXPECT_EQ(state[2].first, "exp_avg_sq");
  EXPECT_EQ(state[0].second.numel(), 1);
  EXPECT_EQ(state[1].second.shape(), Shape({8}));
  EXPECT_EQ(state[2].second.shape(), Shape({8}));
  EXPECT_EQ(opt->span_end(), 13);
}

TEST(AdamW, RestoredStateContinuesIdentically) {
  const size_t n = 13;
  std::vector<float> p(n, 0.5f);
  auto original = make_adamw({{0, static_cast<int64_t>(n), 0.01f}}, {});
  for (int s = 0; s < 3; ++s) original->step(p.data(), grads_for_step(s, n).data(), 0.01f);

  auto restored = make_adamw({{0, static_cast<int64_t>(n), 0.01f}}, {});
  auto from = original->state();
  auto to = restored->state();
  for (size_t k = 0; k < from.size(); ++k) to[k].second.copy_from(from[k].second);
  EXPECT_EQ(restored->steps_taken(), 3);

  std::vector<float> q = p;
  const std::vector<float> g = grads_for_step(3, n);
  original->step(p.data(), g.data(), 0.01f);
  restored->step(q.data(), g.data(), 0.01f);
  EXPECT_EQ(std::memcmp(p.data(), q.data(), n * sizeof(float)), 0);
}

TEST(AdamW, SameBitsInVectorBodyAndTail) {
  for (float beta1 : {0.9f, 0.2f}) {
    std::vector<float> p(11, 0.3f);
    std::vector<float> g(11, -0.7f);
    auto opt = make_adamw({{0, 11, 0.05f}}, {beta1, 0.99f, 1e-8f});
    for (int s = 0; s < 3; ++s) {
      opt->step(p.data(), g.data(), 0.1f);
      for (float& x : g) x *= -1.5f;
    }
    for (float v : p) EXPECT_EQ(v, p[0]) << "beta1 " << beta1;
    EXPECT_NE(p[0], 0.3f);
  }
}

TEST(AdamW, InvalidOptionsRejected) {
  const auto expect_config_error = [](const AdamWOptions& o, const char* key) {
    try {
      make_adamw({{0, 4, 0.0f}}, o);
      ADD_FAILURE() << "expected an error naming " << key;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  expect_config_error({1.0f, 0.999f, 1e-8f}, "optim.beta1");
  expect_config_error({-0.1f, 0.999f, 1e-8f}, "optim.beta1");
  expect_config_error({0.9f, 1.5f, 1e-8f}, "optim.beta2");
  expect_config_error({0.9f, NAN, 1e-8f}, "optim.beta2");
  expect_config_error({0.9f, 0.999f, -1e-8f}, "optim.eps");
}

}  // namespace
}  // namespace gradmesh::optim
