#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradmesh/kernels/loss.h"

namespace gradmesh::kernels {
namespace {

// -log softmax(z)[label] in double, written the textbook way (fine for small logits).
double xent_reference(const std::vector<double>& z, int label) {
  double sum = 0;
  for (double v : z) sum += std::exp(v);
  return std::log(sum) - z[static_cast<size_t>(label)];
}

TEST(SoftmaxXent, ForwardMatchesReferenceAndStoresProbabilities) {
  const std::vector<float> logits = {1, 2, 3, -0.5f, 0.25f, 0};
  const std::vector<int32_t> labels = {2, 0};
  std::vector<float> probs(6);
  const double loss = softmax_xent_forward(logits.data(), labels.data(), 2, 3, probs.data());
  const double want = xent_reference({1, 2, 3}, 2) + xent_reference({-0.5, 0.25, 0}, 0);
  EXPECT_NEAR(loss, want, 1e-6);
  for (int r = 0; r < 2; ++r) {
    double sum = 0, denom = 0;
    for (int c = 0; c < 3; ++c) denom += std::exp(static_cast<double>(logits[r * 3 + c]));
    for (int c = 0; c < 3; ++c) {
      EXPECT_NEAR(probs[r * 3 + c], std::exp(static_cast<double>(logits[r * 3 + c])) / denom, 1e-6);
      sum += probs[r * 3 + c];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST(SoftmaxXent, HugeLogitsStayFiniteAndCorrect) {
  // exp(1e4) overflows float and double; max-subtraction must avoid it.
  const std::vector<float> logits = {1e4f, 0.0f, -1e4f,   // label 1: loss = 1e4
                                     1e4f, 1e4f, -1e4f,   // label 0: loss = log 2
                                     -1e4f, -1e4f, -1e4f, // label 2: loss = log 3
                                     1e4f, 0.0f, 0.0f};   // label 0: loss ~ 0
  const std::vector<int32_t> labels = {1, 0, 2, 0};
  std::vector<float> probs(12);
  const double loss = softmax_xent_forward(logits.data(), labels.data(), 4, 3, probs.data());
  ASSERT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, 1e4 + std::log(2.0) + std::log(3.0), 1e-3);
  for (float p : probs) ASSERT_TRUE(std::isfinite(p));
  EXPECT_FLOAT_EQ(probs[0], 1.0f);
  EXPECT_FLOAT_EQ(probs[1], 0.0f);
  EXPECT_FLOAT_EQ(probs[3], 0.5f);
  EXPECT_FLOAT_EQ(probs[4], 0.5f);
  EXPECT_NEAR(probs[6], 1.0f / 3.0f, 1e-7);
  EXPECT_FLOAT_EQ(probs[9], 1.0f);

  // Row by row, so that each row's loss is checked on its own.
  const double row0 = softmax_xent_forward(logits.data(), labels.data(), 1, 3, probs.data());
  EXPECT_NEAR(row0, 1e4, 1e-3);
  const double row3 = softmax_xent_forward(logits.data() + 9, labels.data() + 3, 1, 3, probs.data());
  EXPECT_NEAR(row3, 0.0, 1e-6);
}

TEST(SoftmaxXent, BackwardIsScaledProbsMinusOneHot) {
  const std::vector<float> probs = {0.1f, 0.7f, 0.2f, 0.5f, 0.25f, 0.25f};
  const std::vector<int32_t> labels = {1, 2};
  std::vector<float> d(6, 42.0f);
  softmax_xent_backward(probs.data(), labels.data(), 2, 3, 0.5f, d.data(), false);
  const std::vector<float> want = {0.05f, -0.15f, 0.1f, 0.25f, 0.125f, -0.375f};
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(d[i], want[i]) << i;
  softmax_xent_backward(probs.data(), labels.data(), 2, 3, 0.5f, d.data(), true);
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(d[i], 2 * want[i]) << i;
}

TEST(SquaredError, SumAndBackward) {
  const std::vector<float> pred = {1, 2, 3};
  const std::vector<float> target = {0, 4, 3.5f};
  EXPECT_DOUBLE_EQ(squared_error_sum(pred.data(), target.data(), 3), 1 + 4 + 0.25);
  std::vector<float> d(3, -1.0f);
  squared_error_backward(pred.data(), target.data(), 3, 0.5f, d.data(), false);
  EXPECT_EQ(d, (std::vector<float>{1.0f, -2.0f, -0.5f}));
  squared_error_backward(pred.data(), target.data(), 3, 1.0f, d.data(), true);
  EXPECT_EQ(d, (std::vector<float>{3.0f, -6.0f, -1.5f}));
}

TEST(ArgmaxRows, PicksLargestAndFirstOnTies) {
  const std::vector<float> x = {0, 3, 1,      // 1
                                -5, -2, -3,   // 1 (all negative)
                                7, 7, 7,      // 0 (tie: first)
                                1, 4, 4,      // 1 (tie: first of the two)
                                -1, -1, 2};   // 2 (last column)
  std::vector<int32_t> out(5, -1);
  argmax_rows(x.data(), 5, 3, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 1, 0, 1, 2}));
  const std::vector<float> column = {3, -1};
  std::vector<int32_t> single(2, -1);
  argmax_rows(column.data(), 2, 1, single.data());
  EXPECT_EQ(single, (std::vector<int32_t>{0, 0}));
}

}  // namespace
}  // namespace gradmesh::kernels
