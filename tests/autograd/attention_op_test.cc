// causal_self_attention: gradients against finite differences (gradcheck.h
// states the tolerance), shape errors, and when it records.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "gradmesh/autograd/attention.h"
#include "gradmesh/core/error.h"
#include "gradmesh/kernels/attention.h"

namespace gradmesh::autograd {
namespace {

class AttentionOpTest : public ::testing::Test {
 protected:
  void SetUp() override { current_tape().clear(); }
  void TearDown() override { current_tape().clear(); }
};

TEST_F(AttentionOpTest, ForwardIsTheKernelsAttentionWithHeadsSplitFromTheLastDim) {
  Variable qkv = random_leaf({2, 7, 3 * 12}, 1, -2.0f, 2.0f);
  const Variable y = causal_self_attention(qkv, 3);
  ASSERT_EQ(y.shape(), (Shape{2, 7, 12}));
  const kernels::AttentionShape s{2, 7, 3, 4};
  std::vector<float> want(24 * 7);
  kernels::causal_attention_reference(qkv.value().data(), s, want.data(), nullptr);
  const std::vector<float> got = y.value().to_vector();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

TEST_F(AttentionOpTest, GradientMatchesFiniteDifferences) {
  Variable qkv = random_leaf({2, 5, 3 * 8}, 2);
  EXPECT_TRUE(gradcheck([&] { return causal_self_attention(qkv, 2); }, {qkv}));
}

TEST_F(AttentionOpTest, GradientMatchesFiniteDifferencesAcrossTiles) {
  // 35 positions: two query and key blocks, the second partial.
  Variable qkv = random_leaf({1, 35, 3 * 8}, 3);
  EXPECT_TRUE(gradcheck([&] { return causal_self_attention(qkv, 1); }, {qkv}));
}

TEST_F(AttentionOpTest, SecondReaderAccumulatesIntoTheGradient) {
  // Two ops read qkv, so the second backward adds to the gradient the first wrote.
  Variable qkv = random_leaf({1, 6, 3 * 8}, 4);
  EXPECT_TRUE(gradcheck([&] { return add(causal_self_attention(qkv, 2), causal_self_attention(qkv, 1)); }, {qkv}));
}

TEST_F(AttentionOpTest, RecordsOnlyWhenAGradientIsWanted) {
  Variable constant(random_tensor({1, 4, 6}, 5), /*requires_grad=*/false);
  causal_self_attention(constant, 1);
  EXPECT_EQ(current_tape().size(), 0u);
  Variable leaf = random_leaf({1, 4, 6}, 6);
  {
    NoGradGuard no_grad;
    causal_self_attention(leaf, 2);
  }
  EXPECT_EQ(current_tape().size(), 0u);
  EXPECT_TRUE(causal_self_attention(leaf, 2).requires_grad());
  EXPECT_EQ(current_tape().size(), 1u);
}

void expect_shape_error_mentioning(const std::function<void()>& call, const std::vector<std::string>& mentions) {
  try {
    call();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kShape) << e.what();
    for (const std::string& m : mentions) EXPECT_NE(std::string(e.what()).find(m), std::string::npos) << e.what();
  }
}

TEST_F(AttentionOpTest, BadShapesAreShapeErrorsNamingTheShape) {
  const std::string op = "causal_self_attention";
  const std::string expected = "expected n_head >= 1 and qkv [B, T, 3 * C]";
  expect_shape_error_mentioning([] { causal_self_attention(Variable(Tensor::zeros({4, 24})), 2); }, {op, "[4, 24]", expected});
  expect_shape_error_mentioning([] { causal_self_attention(Variable(Tensor::zeros({1, 2, 4, 24})), 2); },
                     {op, "[1, 2, 4, 24]"});
  // 20 is not a multiple of 3 * 2; 18 is a multiple of 3 but not of 3 * 4.
  expect_shape_error_mentioning([] { causal_self_attention(Variable(Tensor::zeros({2, 3, 20})), 2); },
                     {op, "[2, 3, 20]", "n_head 2"});
  expect_shape_error_mentioning([] { causal_self_attention(Variable(Tensor::zeros({2, 3, 18})), 4); },
                     {op, "[2, 3, 18]", "n_head 4"});
  expect_shape_error_mentioning([] { causal_self_attention(Variable(Tensor::zeros({2, 3, 0})), 1); }, {op, "[2, 3, 0]"});
  expect_shape_error_mentioning([] { causal_self_attention(Variable(Tensor::zeros({2, 3, 6})), 0); }, {op, "n_head 0"});
  expect_shape_error_mentioning([] { causal_self_attention(Variable(Tensor::zeros({2, 3, 6})), -1); }, {op, "n_head -1"});
}

}  // namespace
}  // namespace gradmesh::autograd
