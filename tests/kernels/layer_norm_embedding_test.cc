#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradmesh/kernels/embedding.h"
#include "gradmesh/kernels/layer_norm.h"

namespace gradmesh::kernels {
namespace {

TEST(LayerNorm, ForwardHandValues) {
  // Row [1 2 3 4]: mean 2.5, variance 1.25. Row [5 5 5 5]: variance 0, so only eps keeps rstd finite.
  const std::vector<float> x = {1, 2, 3, 4, 5, 5, 5, 5};
  const float eps = 1e-5f;
  std::vector<float> y(8), mean(2), rstd(2);
  layer_norm_forward(x.data(), nullptr, nullptr, 2, 4, eps, y.data(), mean.data(), rstd.data());
  const double inv = 1.0 / std::sqrt(1.25 + eps);
  EXPECT_FLOAT_EQ(mean[0], 2.5f);
  EXPECT_NEAR(rstd[0], inv, 1e-6);
  const double want0[] = {-1.5 * inv, -0.5 * inv, 0.5 * inv, 1.5 * inv};
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(y[c], want0[c], 1e-6) << c;
  EXPECT_FLOAT_EQ(mean[1], 5.0f);
  EXPECT_NEAR(rstd[1], 1.0 / std::sqrt(1e-5), 1e-2);
  for (int c = 4; c < 8; ++c) EXPECT_EQ(y[c], 0.0f) << c;

  // With gamma [1 2 1 2] and beta [0 0 1 1]: y = xhat * gamma + beta.
  const std::vector<float> gamma = {1, 2, 1, 2}, beta = {0, 0, 1, 1};
  layer_norm_forward(x.data(), gamma.data(), beta.data(), 2, 4, eps, y.data(), mean.data(), rstd.data());
  const double want_affine[] = {-1.5 * inv, -1.0 * inv, 0.5 * inv + 1, 3.0 * inv + 1};
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(y[c], want_affine[c], 1e-6) << c;
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_EQ(y[6], 1.0f);
}

TEST(LayerNorm, LargeOffsetDoesNotCancel) {
  // Mean 1e4, spread 1: a one-pass E[x^2] - E[x]^2 in float would lose the variance entirely.
  const std::vector<float> x = {10000.0f, 10001.0f, 10002.0f, 10003.0f};
  std::vector<float> y(4), mean(1), rstd(1);
  layer_norm_forward(x.data(), nullptr, nullptr, 1, 4, 0.0f, y.data(), mean.data(), rstd.data());
  const double inv = 1.0 / std::sqrt(1.25);
  EXPECT_NEAR(y[0], -1.5 * inv, 1e-4);
  EXPECT_NEAR(y[3], 1.5 * inv, 1e-4);
}

TEST(LayerNorm, BackwardParamGradientsAndShiftInvariance) {
  const std::vector<float> x = {0.3f, -1.2f, 2.0f, 0.7f, -0.4f, 1.1f, 0.0f, -2.5f};
  const std::vector<float> gamma = {0.5f, 1.5f, -1.0f, 2.0f};
  const std::vector<float> dy = {1.0f, -0.5f, 0.25f, 2.0f, -1.0f, 0.75f, 0.5f, -0.25f};
  std::vector<float> y(8), mean(2), rstd(2);
  layer_norm_forward(x.data(), gamma.data(), nullptr, 2, 4, 1e-5f, y.data(), mean.data(), rstd.data());
  std::vector<float> dx(8), dgamma(4, 9.0f), dbeta(4, 9.0f);
  layer_norm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), 2, 4, dx.data(), false,
                      dgamma.data(), dbeta.data(), false);
  for (int c = 0; c < 4; ++c) {
    double want_dgamma = 0;
    for (int r = 0; r < 2; ++r) want_dgamma += dy[r * 4 + c] * (x[r * 4 + c] - mean[r]) * rstd[r];
    EXPECT_NEAR(dgamma[c], want_dgamma, 1e-5) << c;
    EXPECT_FLOAT_EQ(dbeta[c], dy[c] + dy[4 + c]) << c;
  }
  // y is invariant to adding a constant to a row, so each row of dx sums to zero.
  for (int r = 0; r < 2; ++r) {
    double sum = 0, magnitude = 0;
    for (int c = 0; c < 4; ++c) {
      sum += dx[r * 4 + c];
      magnitude += std::fabs(dx[r * 4 + c]);
    }
    EXPECT_NEAR(sum, 0.0, 1e-5);
    EXPECT_GT(magnitude, 0.1);
  }
  // accumulate flags add on top of what is there.
  std::vector<float> dx2 = dx, dgamma2 = dgamma, dbeta2 = dbeta;
  layer_norm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), 2, 4, dx2.data(), true,
                      dgamma2.data(), dbeta2.data(), true);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(dx2[i], 2 * dx[i]) << i;
  for (int c = 0; c < 4; ++c) {
    EXPECT_FLOAT_EQ(dgamma2[c], 2 * dgamma[c]) << c;
    EXPECT_FLOAT_EQ(dbeta2[c], 2 * dbeta[c]) << c;
  }
}

TEST(Embedding, GatherCopiesRowsIncludingRepeats) {
  const std::vector<float> table = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};  // [4, 3]
  const std::vector<int64_t> ids = {2, 0, 2, 3, 2};
  std::vector<float> out(15);
  embedding_gather(table.data(), 3, ids.data(), 5, out.data());
  EXPECT_EQ(out, (std::vector<float>{20, 21, 22, 0, 1, 2, 20, 21, 22, 30, 31, 32, 20, 21, 22}));
}

TEST(Embedding, ScatterAddAccumulatesRepeatedIds) {
  const std::vector<int64_t> ids = {2, 0, 2, 3, 2};
  std::vector<float> dout(15);
  for (int i = 0; i < 15; ++i) dout[i] = static_cast<float>(i + 1);  // row i = [3i+1, 3i+2, 3i+3]
  std::vector<float> dtable(12, 0.5f);  // scatter adds onto what is there
  embedding_scatter_add(dout.data(), 3, ids.data(), 5, dtable.data());
  // row 0 <- dout row 1; row 1 untouched; row 2 <- rows 0 + 2 + 4; row 3 <- row 3.
  const std::vector<float> want = {4.5f,  5.5f,  6.5f,  0.5f,  0.5f,  0.5f,
                                   21.5f, 24.5f, 27.5f, 10.5f, 11.5f, 12.5f};
  EXPECT_EQ(dtable, want);
}

}  // namespace
}  // namespace gradmesh::kernels
