#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/nn/models.h"

namespace gradmesh::nn {
namespace {

class LayersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    autograd::current_tape().clear();
    forward_context() = ForwardContext{};
  }
  void TearDown() override { autograd::current_tape().clear(); }
};

Tensor random_tensor(const Shape& shape, uint64_t step, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(shape);
  const CounterRng rng(31, RngPurpose::kTest, step);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = lo + (hi - lo) * rng.uniform(static_cast<uint64_t>(i));
  return t;
}

// Overwrites the parameter called `name` with `values`.
void set_parameter(Model& model, const std::string& name, const std::vector<float>& values) {
  for (const ParameterInfo& p : model.parameters()) {
    if (p.name != name) continue;
    ASSERT_EQ(static_cast<int64_t>(values.size()), p.numel) << name;
    std::memcpy(model.flat_params().data() + p.offset, values.data(), values.size() * sizeof(float));
    return;
  }
  FAIL() << "no parameter " << name;
}

std::vector<std::string> parameter_names(const Model& model) {
  std::vector<std::string> names;
  for (const ParameterInfo& p : model.parameters()) names.push_back(p.name);
  return names;
}

TEST_F(LayersTest, LinearForwardHandValues) {
  auto linear = std::make_unique<Linear>(3, 2);
  Linear* layer = linear.get();
  Model model(std::move(linear), 1);
  EXPECT_EQ(parameter_names(model), (std::vector<std::string>{"weight", "bias"}));
  set_parameter(model, "weight", {1, 0, -1, 0.5f, -0.5f, 2});  // [2, 3]
  set_parameter(model, "bias", {0.1f, -0.2f});
  const autograd::Variable x(Tensor::from_vector({2, 3}, {1, 2, 3, -1, 0.5f, 2}));
  // Row 0: [1 - 3 + 0.1, 0.5 - 1 + 6 - 0.2]; row 1: [-1 - 2 + 0.1, -0.5 - 0.25 + 4 - 0.2].
  const std::vector<float> y = model.forward(x).value().to_vector();
  const std::vector<float> want = {-1.9f, 5.3f, -2.9f, 3.05f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << i;
  EXPECT_EQ(model.forward(x).shape(), (Shape{2, 2}));

  layer->fuse_activation(Activation::kRelu);
  const std::vector<float> relu = model.forward(x).value().to_vector();
  EXPECT_EQ(relu[0], 0.0f);
  EXPECT_NEAR(relu[1], 5.3f, 1e-6);
  EXPECT_EQ(relu[2], 0.0f);
  EXPECT_NEAR(relu[3], 3.05f, 1e-6);
  EXPECT_EQ(layer->describe(), "Linear(in_features=3, out_features=2, bias=True) + fused ReLU");
}

TEST_F(LayersTest, LinearWithoutBias) {
  Model model(std::make_unique<Linear>(2, 2, /*bias=*/false), 1);
  EXPECT_EQ(parameter_names(model), (std::vector<std::string>{"weight"}));
  set_parameter(model, "weight", {1, 2, 3, 4});
  const std::vector<float> y = model.forward(autograd::Variable(Tensor::from_vector({1, 2}, {1, -1})))
                                   .value()
                                   .to_vector();
  EXPECT_EQ(y, (std::vector<float>{-1, -1}));
  EXPECT_EQ(model.root().describe(), "Linear(in_features=2, out_features=2, bias=False)");
}

TEST_F(LayersTest, Conv2dForwardHandValues) {
  // x = [[1 2 3], [4 5 6], [7 8 9]], w = [[1 2], [3 4]], b = 0.5.
  const autograd::Variable x(Tensor::from_vector({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}));
  {
    Model model(std::make_unique<Conv2d>(1, 1, 2), 1);
    EXPECT_EQ(parameter_names(model), (std::vector<std::string>{"weight", "bias"}));
    set_parameter(model, "weight", {1, 2, 3, 4});
    set_parameter(model, "bias", {0.5f});
    const autograd::Variable y = model.forward(x);
    EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
    // y[0,0] = 1 + 4 + 12 + 20 + 0.5, ...
    EXPECT_EQ(y.value().to_vector(), (std::vector<float>{37.5f, 47.5f, 67.5f, 77.5f}));
  }
  {
    // stride 2, padding 1: windows see the zero border.
    Model model(std::make_unique<Conv2d>(1, 1, 2, 2, 1), 1);
    set_parameter(model, "weight", {1, 2, 3, 4});
    set_parameter(model, "bias", {0.5f});
    const autograd::Variable y = model.forward(x);
    EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
    // (0,0): x00*w11; (0,1): x01*w10 + x02*w11; (1,0): x10*w01 + x20*w11; (1,1): full window.
    EXPECT_EQ(y.value().to_vector(), (std::vector<float>{4.5f, 18.5f, 36.5f, 77.5f}));
  }
  {
    // Two output channels from two input channels: channel sums.
    Model model(std::make_unique<Conv2d>(2, 2, 1), 1);
    set_parameter(model, "weight", {1, 1, 1, -1});  // [2, 2, 1, 1]
    set_parameter(model, "bias", {0, 10});
    const autograd::Variable y = model.forward(autograd::Variable(Tensor::from_vector({1, 2, 1, 2}, {1, 2, 5, 7})));
    EXPECT_EQ(y.value().to_vector(), (std::vector<float>{6, 9, 6, 5}));
  }
}

TEST_F(LayersTest, MaxPoolFlattenAndActivationLayers) {
  MaxPool2d pool(2);
  EXPECT_EQ(pool.describe(), "MaxPool2d(kernel_size=2, stride=2, padding=0)");
  const autograd::Variable x(Tensor::from_vector({1, 1, 2, 4}, {1, 5, -2, 0, 3, 2, -1, -3}));
  const autograd::Variable p = pool.forward(x);
  EXPECT_EQ(p.shape(), (Shape{1, 1, 1, 2}));
  EXPECT_EQ(p.value().to_vector(), (std::vector<float>{5, 0}));
  MaxPool2d fused_pool(2);
  fused_pool.fuse_activation(Activation::kRelu);  // relu(maxpool(x))
  const autograd::Variable negated(Tensor::from_vector({1, 1, 2, 4}, {-1, -5, 2, 0, -3, -2, 1, 3}));
  EXPECT_EQ(fused_pool.forward(negated).value().to_vector(), (std::vector<float>{0, 3}));
  EXPECT_EQ(pool.forward(negated).value().to_vector(), (std::vector<float>{-1, 3}));

  Flatten flatten;
  EXPECT_EQ(flatten.forward(x).shape(), (Shape{1, 8}));
  EXPECT_EQ(flatten.forward(autograd::Variable(Tensor::zeros({3, 2, 2, 2}))).shape(), (Shape{3, 8}));

  ActivationLayer relu(Activation::kRelu), tanh_layer(Activation::kTanh), gelu(Activation::kGelu);
  EXPECT_EQ(relu.describe(), "ReLU()");
  EXPECT_EQ(tanh_layer.describe(), "Tanh()");
  EXPECT_EQ(gelu.describe(), "GELU()");
  EXPECT_EQ(relu.forward(x).value().to_vector(), (std::vector<float>{1, 5, 0, 0, 3, 2, 0, 0}));
  EXPECT_NEAR(tanh_layer.forward(x).value().to_vector()[0], std::tanh(1.0), 1e-6);
}

TEST_F(LayersTest, LayerNormModule) {
  Model model(std::make_unique<LayerNorm>(4), 1);
  EXPECT_EQ(parameter_names(model), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(model.flat_params().to_vector(), (std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0}));  // PyTorch's init
  const autograd::Variable x(random_tensor({3, 4}, 1, -3.0f, 3.0f));
  const std::vector<float> y = model.forward(x).value().to_vector();
  for (int r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 4; ++c) mean += y[r * 4 + c] / 4.0;
    for (int c = 0; c < 4; ++c) var += (y[r * 4 + c] - mean) * (y[r * 4 + c] - mean) / 4.0;
    EXPECT_NEAR(mean, 0.0, 1e-6);
    EXPECT_NEAR(var, 1.0, 1e-3);  // eps = 1e-5 shrinks it slightly
  }
  set_parameter(model, "weight", {2, 2, 2, 2});
  set_parameter(model, "bias", {1, 1, 1, 1});
  const std::vector<float> affine = model.forward(x).value().to_vector();
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(affine[i], 2 * y[i] + 1, 1e-5) << i;
}

TEST_F(LayersTest, EmbeddingModuleForwardLookupAndGradient) {
  auto emb = std::make_unique<Embedding>(5, 3);
  Embedding* layer = emb.get();
  Model model(std::move(emb), 4);
  EXPECT_EQ(model.parameters()[0].shape, (Shape{5, 3}));
  const std::vector<float> table = model.flat_params().to_vector();
  // ids as floats through forward(), and as integers through lookup(): same rows.
  const autograd::Variable y = model.forward(autograd::Variable(Tensor::from_vector({2, 2}, {4, 0, 4, 2})));
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  const std::vector<float> rows = y.value().to_vector();
  const int64_t ids[] = {4, 0, 4, 2};
  for (int i = 0; i < 4; ++i)
    for (int d = 0; d < 3; ++d) EXPECT_EQ(rows[i * 3 + d], table[ids[i] * 3 + d]);
  EXPECT_EQ(layer->lookup({4, 0, 4, 2}).value().to_vector(), rows);

  // Gradient: repeated id 4 accumulates, unused rows 1 and 3 get zero (stale NaNs are overwritten).
  model.flat_grads().fill(std::numeric_limits<float>::quiet_NaN());
  model.zero_grad();
  Tensor target = layer->lookup({4, 0, 4, 2}).value().clone();
  for (int64_t i = 0; i < target.numel(); ++i) target.data()[i] -= 0.5f;  // d loss / d out = 1 everywhere
  model.backward(autograd::mse_loss(layer->lookup({4, 0, 4, 2}), target, 1.0f));
  const std::vector<float> want = {1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 2, 2, 2};
  const std::vector<float> grad = model.flat_grads().to_vector();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(grad[i], want[i], 1e-6) << i;
  EXPECT_EQ(layer->describe(), "Embedding(5, 3)");
}

TEST_F(LayersTest, DropoutModuleTrainingAndEval) {
  auto net = std::make_unique<Sequential>();
  net->add(std::make_unique<Dropout>(0.5f));
  net->add(std::make_unique<Dropout>(0.5f));
  Model model(std::move(net), 1);
  auto& first = *model.root().children()[0].second;
  auto& second = *model.root().children()[1].second;
  const autograd::Variable x(random_tensor({16, 32}, 2, 0.5f, 1.0f));
  const std::vector<float> input = x.value().to_vector();

  model.set_training(false);  // eval: identity
  EXPECT_EQ(first.forward(x).value().to_vector(), input);
  EXPECT_EQ(model.forward(x).value().to_vector(), input);

  model.set_training(true);
  forward_context() = ForwardContext{7, 3, 0};
  const std::vector<float> a = first.forward(x).value().to_vector();
  const std::vector<float> b = second.forward(x).value().to_vector();
  int zeros = 0, differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    zeros += a[i] == 0.0f;
    EXPECT_TRUE(a[i] == 0.0f || a[i] == input[i] * 2.0f) << i;
    differ += (a[i] == 0.0f) != (b[i] == 0.0f);
  }
  EXPECT_NEAR(zeros, 256, 64);  // 512 elements at p = 0.5
  EXPECT_GT(differ, 150) << "two dropout layers in one step need different masks";
  // Same step, same layer: same mask. Next step: a new mask.
  EXPECT_EQ(first.forward(x).value().to_vector(), a);
  forward_context().step = 4;
  EXPECT_NE(first.forward(x).value().to_vector(), a);

  EXPECT_THROW(Dropout(1.0f), Error);
  EXPECT_THROW(Dropout(-0.5f), Error);
}

TEST_F(LayersTest, ConstructorsRejectNonPositiveSizes) {
  EXPECT_THROW(Linear(0, 3), Error);
  EXPECT_THROW(Conv2d(1, 2, 0), Error);
  EXPECT_THROW(LayerNorm(0), Error);
  EXPECT_THROW(Embedding(3, 0), Error);
}

}  // namespace
}  // namespace gradmesh::nn
