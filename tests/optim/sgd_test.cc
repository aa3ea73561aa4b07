#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/optim/optimizer.h"

namespace gradmesh::optim {
namespace {

// torch.optim.SGD written out in double, one element at a time: the
// reference the flat kernels are checked against.
struct SgdReference {
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  std::vector<double> buf;
  int steps = 0;

  void step(std::vector<double>& p, const std::vector<double>& g, double lr) {
    if (buf.empty()) buf.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + weight_decay * p[i];
      if (momentum != 0) {
        buf[i] = steps == 0 ? d : momentum * buf[i] + (1 - dampening) * d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
    ++steps;
  }
};

// Gradients that change sign and size from step to step.
std::vector<float> sgd_grads_for_step(int step, size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i)
    g[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i) + 1.3 * step) * (1.0 + 0.5 * step));
  return g;
}

void expect_sgd_matches_reference(const SgdOptions& options, float weight_decay, int steps) {
  const std::vector<float> start = {1.0f, -0.5f, 0.25f, 2.0f, -3.0f};
  std::vector<float> p = start;
  std::vector<double> ref(start.begin(), start.end());
  SgdReference reference{options.momentum, options.dampening, weight_decay, options.nesterov, {}, 0};
  auto opt = make_sgd({{0, static_cast<int64_t>(p.size()), weight_decay}}, options);
  const float lr = 0.05f;
  for (int s = 0; s < steps; ++s) {
    const std::vector<float> g = sgd_grads_for_step(s, p.size());
    opt->step(p.data(), g.data(), lr);
    reference.step(ref, std::vector<double>(g.begin(), g.end()), lr);
    for (size_t i = 0; i < p.size(); ++i)
      EXPECT_NEAR(p[i], ref[i], 1e-5 * (1 + std::fabs(ref[i]))) << "step " << s << " element " << i;
  }
  EXPECT_EQ(opt->steps_taken(), steps);
}

TEST(Sgd, PlainMatchesReference) { expect_sgd_matches_reference({}, 0.0f, 4); }
TEST(Sgd, WeightDecayMatchesReference) { expect_sgd_matches_reference({}, 0.1f, 4); }
TEST(Sgd, MomentumMatchesReference) { expect_sgd_matches_reference({0.9f, 0.0f, false}, 0.01f, 5); }
TEST(Sgd, DampeningMatchesReference) { expect_sgd_matches_reference({0.9f, 0.3f, false}, 0.0f, 5); }
TEST(Sgd, NesterovMatchesReference) { expect_sgd_matches_reference({0.8f, 0.0f, true}, 0.05f, 5); }

TEST(Sgd, MomentumByHand) {
  // p = 1, g = 0.5 every step, lr = 0.1, momentum 0.9:
  //   step 1: buf = 0.5                    p = 1     - 0.1*0.5   = 0.95
  //   step 2: buf = 0.9*0.5  + 0.5 = 0.95  p = 0.95  - 0.1*0.95  = 0.855
  //   step 3: buf = 0.9*0.95 + 0.5 = 1.355 p = 0.855 - 0.1*1.355 = 0.7195
  auto opt = make_sgd({{0, 1, 0.0f}}, {0.9f, 0.0f, false});
  float p = 1.0f;
  const float g = 0.5f;
  const float expected[] = {0.95f, 0.855f, 0.7195f};
  for (float e : expected) {
    opt->step(&p, &g, 0.1f);
    EXPECT_NEAR(p, e, 1e-6);
  }
}

TEST(Sgd, DampeningSkippedOnFirstStepByHand) {
  // p = 1, g = 1, lr = 0.1, momentum 0.9, dampening 0.5. PyTorch copies the
  // first gradient into the buffer undamped:
  //   step 1: buf = 1                      p = 1   - 0.1   = 0.9
  //   step 2: buf = 0.9*1 + 0.5*1 = 1.4    p = 0.9 - 0.14  = 0.76
  auto opt = make_sgd({{0, 1, 0.0f}}, {0.9f, 0.5f, false});
  float p = 1.0f;
  const float g = 1.0f;
  opt->step(&p, &g, 0.1f);
  EXPECT_NEAR(p, 0.9f, 1e-6);
  EXPECT_NEAR(opt->state()[1].second.data()[0], 1.0f, 1e-7);
  opt->step(&p, &g, 0.1f);
  EXPECT_NEAR(p, 0.76f, 1e-6);
  EXPECT_NEAR(opt->state()[1].second.data()[0], 1.4f, 1e-6);
}

TEST(Sgd, NesterovByHand) {
  // p = 1, g = 1, lr = 0.1, momentum 0.9, nesterov:
  //   step 1: buf = 1;   d = 1 + 0.9*1   = 1.9   p = 1    - 0.19  = 0.81
  //   step 2: buf = 1.9; d = 1 + 0.9*1.9 = 2.71  p = 0.81 - 0.271 = 0.539
  auto opt = make_sgd({{0, 1, 0.0f}}, {0.9f, 0.0f, true});
  float p = 1.0f;
  const float g = 1.0f;
  opt->step(&p, &g, 0.1f);
  EXPECT_NEAR(p, 0.81f, 1e-6);
  opt->step(&p, &g, 0.1f);
  EXPECT_NEAR(p, 0.539f, 1e-6);
}

TEST(Sgd, WeightDecayByHand) {
  // p = 2, g = 0, lr = 0.5, wd = 0.1, no momentum: p -= 0.5 * 0.1 * p, so p *= 0.95.
  auto opt = make_sgd({{0, 1, 0.1f}}, {});
  float p = 2.0f;
  const float g = 0.0f;
  for (float e : {1.9f, 1.805f, 1.71475f}) {
    opt->step(&p, &g, 0.5f);
    EXPECT_NEAR(p, e, 1e-6);
  }
}

TEST(Sgd, GroupsWithDifferentDecayAndUncoveredElements) {
  // Buffer of 10: group A = [5, 9) without decay, group B = [0, 3) with
  // decay; elements 3, 4 and 9 belong to no group and must not move.
  std::vector<float> p(10);
  for (size_t i = 0; i < p.size(); ++i) p[i] = 1.0f + 0.1f * static_cast<float>(i);
  const std::vector<float> start = p;
  const std::vector<float> g(10, 0.5f);
  auto opt = make_sgd({{5, 4, 0.0f}, {0, 3, 0.2f}}, {0.9f, 0.0f, false});
  EXPECT_EQ(opt->state_numel(), 7);
  EXPECT_EQ(opt->span_end(), 9);
  for (int s = 0; s < 3; ++s) opt->step(p.data(), g.data(), 0.1f);

  for (size_t i : {3u, 4u, 9u}) EXPECT_EQ(p[i], start[i]) << "element " << i;
  SgdReference decayed{0.9, 0, 0.2, false, {}, 0}, plain{0.9, 0, 0, false, {}, 0};
  std::vector<double> a(start.begin(), start.begin() + 3), b(start.begin() + 5, start.begin() + 9);
  for (int s = 0; s < 3; ++s) {
    decayed.step(a, std::vector<double>(3, 0.5), 0.1);
    plain.step(b, std::vector<double>(4, 0.5), 0.1);
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(p[i], a[i], 1e-6);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(p[5 + i], b[i], 1e-6);
  // The momentum buffer lays the groups out in the order they were given.
  const Tensor momentum = opt->state()[1].second;
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(momentum.data()[i], plain.buf[i], 1e-6);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(momentum.data()[4 + i], decayed.buf[i], 1e-6);
}

TEST(Sgd, StateNamesAndSizes) {
  auto plain = make_sgd({{0, 6, 0.0f}, {8, 2, 0.0f}}, {});
  auto state = plain->state();
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state[0].first, "step");
  EXPECT_EQ(state[0].second.shape(), Shape({1}));
  EXPECT_EQ(plain->name(), "sgd");

  auto heavy = make_sgd({{0, 6, 0.0f}, {8, 2, 0.0f}}, {0.9f, 0.0f, false});
  state = heavy->state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[1].first, "momentum");
  EXPECT_EQ(state[1].second.shape(), Shape({8}));
}

TEST(Sgd, RestoredStateContinuesIdentically) {
  const size_t n = 9;
  std::vector<float> p(n, 1.0f);
  auto original = make_sgd({{0, static_cast<int64_t>(n), 0.01f}}, {0.9f, 0.1f, false});
  for (int s = 0; s < 2; ++s) original->step(p.data(), sgd_grads_for_step(s, n).data(), 0.1f);

  // A fresh optimizer whose state views are overwritten, as a checkpoint load does.
  auto restored = make_sgd({{0, static_cast<int64_t>(n), 0.01f}}, {0.9f, 0.1f, false});
  auto from = original->state();
  auto to = restored->state();
  for (size_t k = 0; k < from.size(); ++k) to[k].second.copy_from(from[k].second);
  EXPECT_EQ(restored->steps_taken(), 2);

  std::vector<float> q = p;
  const std::vector<float> g = sgd_grads_for_step(2, n);
  original->step(p.data(), g.data(), 0.1f);
  restored->step(q.data(), g.data(), 0.1f);
  EXPECT_EQ(std::memcmp(p.data(), q.data(), n * sizeof(float)), 0);
}

TEST(Sgd, SameBitsInVectorBodyAndTail) {
  // 19 identical elements: whichever lane or tail position an element lands
  // in, it must get the same bits.
  std::vector<float> p(19, 0.3f);
  const std::vector<float> g(19, -0.7f);
  auto opt = make_sgd({{0, 19, 0.05f}}, {0.9f, 0.0f, true});
  for (int s = 0; s < 3; ++s) opt->step(p.data(), g.data(), 0.1f);
  for (float v : p) EXPECT_EQ(v, p[0]);
}

TEST(Sgd, InvalidOptionsRejected) {
  const auto expect_config_error = [](const SgdOptions& o, const char* key) {
    try {
      make_sgd({{0, 4, 0.0f}}, o);
      ADD_FAILURE() << "expected an error naming " << key;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  expect_config_error({0.0f, 0.0f, true}, "optim.nesterov");   // no momentum
  expect_config_error({0.9f, 0.1f, true}, "optim.nesterov");   // dampening
  expect_config_error({-0.1f, 0.0f, false}, "optim.momentum");
  expect_config_error({NAN, 0.0f, false}, "optim.momentum");
}

TEST(Sgd, InvalidLearningRateLeavesStateUnchanged) {
  auto opt = make_sgd({{0, 1, 0.0f}}, {0.9f, 0.0f, false});
  float p = 1.0f;
  const float g = 1.0f;
  EXPECT_THROW(opt->step(&p, &g, -0.1f), Error);
  EXPECT_THROW(opt->step(&p, &g, INFINITY), Error);
  EXPECT_EQ(p, 1.0f);
  EXPECT_EQ(opt->steps_taken(), 0);
  opt->step(&p, &g, 0.0f);  // lr = 0 is allowed (e.g. a schedule's first warmup value)
  EXPECT_EQ(p, 1.0f);
  EXPECT_EQ(opt->steps_taken(), 1);
}

}  // namespace
}  // namespace gradmesh::optim
