#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/optim/clip.h"

namespace gradmesh::optim {
namespace {

TEST(Clip, BelowThresholdLeavesGradientsUnchanged) {
  std::vector<float> g = {3.0f, -4.0f};
  EXPECT_FLOAT_EQ(clip_grad_norm(g.data(), 2, 10.0f), 5.0f);
  EXPECT_EQ(g[0], 3.0f);
  EXPECT_EQ(g[1], -4.0f);
}

TEST(Clip, AboveThresholdScalesToMaxNorm) {
  // norm 5 > 1: scale by 1 / (5 + 1e-6), giving (0.6, -0.8) up to 1e-7.
  std::vector<float> g = {3.0f, -4.0f};
  EXPECT_FLOAT_EQ(clip_grad_norm(g.data(), 2, 1.0f), 5.0f);
  EXPECT_NEAR(g[0], 0.6f, 1e-6);
  EXPECT_NEAR(g[1], -0.8f, 1e-6);
  EXPECT_NEAR(grad_norm(g.data(), 2), 1.0, 1e-6);
  EXPECT_LE(grad_norm(g.data(), 2), 1.0);
}

TEST(Clip, NormOfLargeBufferAcrossBlocks) {
  // 200'003 elements of 0.5 (several reduction blocks plus a ragged end).
  const int64_t n = 200'003;
  std::vector<float> g(static_cast<size_t>(n), 0.5f);
  EXPECT_NEAR(grad_norm(g.data(), n), 0.5 * std::sqrt(static_cast<double>(n)), 1e-9);
  const float before = clip_grad_norm(g.data(), n, 2.0f);
  EXPECT_NEAR(before, 0.5 * std::sqrt(static_cast<double>(n)), 1e-3);
  EXPECT_NEAR(grad_norm(g.data(), n), 2.0, 1e-5);
  EXPECT_EQ(g.front(), g.back());
}

TEST(Clip, EmptyAndNonFinite) {
  EXPECT_EQ(grad_norm(nullptr, 0), 0.0);
  EXPECT_EQ(clip_grad_norm(nullptr, 0, 1.0f), 0.0f);

  std::vector<float> g = {1.0f, INFINITY, 2.0f};
  EXPECT_TRUE(std::isinf(clip_grad_norm(g.data(), 3, 1.0f)));
  EXPECT_EQ(g[0], 1.0f);  // left for the caller to skip the step
  EXPECT_EQ(g[2], 2.0f);
  g[1] = NAN;
  EXPECT_TRUE(std::isnan(clip_grad_norm(g.data(), 3, 1.0f)));
}

TEST(Clip, InvalidMaxNormRejected) {
  std::vector<float> g = {1.0f};
  for (float bad : {0.0f, -1.0f, NAN, INFINITY}) {
    try {
      clip_grad_norm(g.data(), 1, bad);
      ADD_FAILURE() << "max_norm " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find("max_norm"), std::string::npos);
    }
  }
  EXPECT_EQ(g[0], 1.0f);
}

}  // namespace
}  // namespace gradmesh::optim
