#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gradmesh/kernels/dropout.h"

namespace gradmesh::kernels {
namespace {

struct DropoutResult {
  std::vector<float> y;
  std::vector<uint8_t> mask;
};

DropoutResult run(const std::vector<float>& x, int64_t rows, int64_t features, float p, uint64_t seed,
                  uint64_t step_key, int64_t first_sample) {
  DropoutResult r{std::vector<float>(x.size(), -1.0f), std::vector<uint8_t>(x.size(), 7)};
  dropout_forward(x.data(), r.y.data(), r.mask.data(), rows, features, p, seed, step_key, first_sample);
  return r;
}

// Nonzero inputs, so a zero output can only come from the mask.
std::vector<float> ramp(size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = 0.5f + static_cast<float>(i % 97) * 0.01f;
  return x;
}

TEST(Dropout, KeepsAboutOneMinusPAndScalesKeptValues) {
  const int64_t rows = 100, features = 1000;
  const std::vector<float> x = ramp(rows * features);
  for (const float p : {0.1f, 0.3f, 0.5f, 0.9f}) {
    SCOPED_TRACE(p);
    const DropoutResult r = run(x, rows, features, p, 5, 0, 0);
    const float scale = 1.0f / (1.0f - p);
    int64_t kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(r.mask[i] == 0 || r.mask[i] == 1) << i;
      if (r.mask[i]) {
        ++kept;
        ASSERT_EQ(r.y[i], x[i] * scale) << i;
      } else {
        ASSERT_EQ(r.y[i], 0.0f) << i;
      }
    }
    // Binomial(1e5, 1-p): standard deviation <= 0.0016 in the fraction; 0.01 is over 6 sigma.
    EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(x.size()), 1.0 - p, 0.01);
  }
}

TEST(Dropout, SameKeysSameMaskDifferentKeysDifferentMask) {
  const int64_t rows = 8, features = 256;
  const std::vector<float> x = ramp(rows * features);
  const DropoutResult a = run(x, rows, features, 0.5f, 1, 3, 0);
  const DropoutResult b = run(x, rows, features, 0.5f, 1, 3, 0);
  EXPECT_EQ(a.mask, b.mask);
  EXPECT_EQ(std::memcmp(a.y.data(), b.y.data(), a.y.size() * sizeof(float)), 0);

  auto differing = [&](const DropoutResult& other) {
    int64_t n = 0;
    for (size_t i = 0; i < a.mask.size(); ++i) n += a.mask[i] != other.mask[i];
    return n;
  };
  // Independent masks at p = 0.5 disagree on about half the 2048 elements.
  EXPECT_GT(differing(run(x, rows, features, 0.5f, 2, 3, 0)), 700);  // other seed
  EXPECT_GT(differing(run(x, rows, features, 0.5f, 1, 4, 0)), 700);  // other step key
  EXPECT_GT(differing(run(x, rows, features, 0.5f, 1, 3, 8)), 700);  // other samples
}

TEST(Dropout, MaskIsPerGlobalSample) {
  // A batch of 10 rows split 3 + 7 across two "ranks" must see the same mask as one batch.
  const int64_t rows = 10, features = 37, first = 40;
  const std::vector<float> x = ramp(rows * features);
  const DropoutResult whole = run(x, rows, features, 0.4f, 9, 12, first);
  const std::vector<float> head(x.begin(), x.begin() + 3 * features), tail(x.begin() + 3 * features, x.end());
  const DropoutResult r0 = run(head, 3, features, 0.4f, 9, 12, first);
  const DropoutResult r1 = run(tail, 7, features, 0.4f, 9, 12, first + 3);
  std::vector<uint8_t> mask = r0.mask;
  mask.insert(mask.end(), r1.mask.begin(), r1.mask.end());
  std::vector<float> y = r0.y;
  y.insert(y.end(), r1.y.begin(), r1.y.end());
  EXPECT_EQ(mask, whole.mask);
  EXPECT_EQ(y, whole.y);
  // Row r of the batch is sample first + r, so the mask does not depend on the row's position.
  const DropoutResult shifted = run(x, rows, features, 0.4f, 9, 12, first + 1);
  EXPECT_TRUE(std::equal(shifted.mask.begin(), shifted.mask.end() - features, whole.mask.begin() + features));
}

TEST(Dropout, BackwardScalesByMask) {
  const std::vector<uint8_t> mask = {1, 0, 1, 1};
  const std::vector<float> dy = {1, 2, 3, 4};
  std::vector<float> dx(4, 100.0f);
  dropout_backward(dy.data(), mask.data(), 4, 0.75f, dx.data(), false);
  EXPECT_EQ(dx, (std::vector<float>{4, 0, 12, 16}));
  dropout_backward(dy.data(), mask.data(), 4, 0.75f, dx.data(), true);
  EXPECT_EQ(dx, (std::vector<float>{8, 0, 24, 32}));
}

TEST(Dropout, ZeroProbabilityKeepsEverything) {
  const std::vector<float> x = ramp(64);
  const DropoutResult r = run(x, 4, 16, 0.0f, 1, 1, 0);
  EXPECT_EQ(r.y, x);
  for (uint8_t m : r.mask) EXPECT_EQ(m, 1);
}

}  // namespace
}  // namespace gradmesh::kernels
