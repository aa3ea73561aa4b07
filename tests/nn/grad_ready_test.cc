// "Gradient final" events: Model::backward's hook fires once per parameter, as soon
// as that parameter's gradient can no longer change.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/nn/models.h"

namespace gradmesh::nn {
namespace {

class GradReadyTest : public ::testing::Test {
 protected:
  void SetUp() override { autograd::current_tape().clear(); }
  void TearDown() override { autograd::current_tape().clear(); }
};

Tensor input(int64_t rows, int64_t features) {
  Tensor x = Tensor::empty({rows, features});
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = std::cos(0.61f * static_cast<float>(i));
  return x;
}

struct HookRecord {
  std::vector<int> order;                        // parameter indices in firing order
  std::map<int, std::vector<float>> at_firing;   // each parameter's gradient when its hook fired
};

// Runs backward with a hook that records the firing order and a copy of the
// parameter's gradient (its view of flat_grads) at that moment.
HookRecord backward_recording(Model& model, const autograd::Variable& loss) {
  HookRecord record;
  model.backward(loss, [&](int index) {
    record.order.push_back(index);
    const ParameterInfo& p = model.parameters()[static_cast<size_t>(index)];
    const float* g = model.flat_grads().data() + p.offset;
    record.at_firing[index] = std::vector<float>(g, g + p.numel);
  });
  return record;
}

// Every parameter fired exactly once, and its gradient at firing time is bit-identical
// to its gradient after the whole backward pass.
void expect_fired_once_with_final_gradient(Model& model, const HookRecord& record) {
  const size_t n = model.parameters().size();
  ASSERT_EQ(record.order.size(), n);
  std::vector<int> count(n, 0);
  for (int index : record.order) {
    ASSERT_GE(index, 0);
    ASSERT_LT(static_cast<size_t>(index), n);
    ++count[static_cast<size_t>(index)];
  }
  for (size_t i = 0; i < n; ++i) {
    const ParameterInfo& p = model.parameters()[i];
    EXPECT_EQ(count[i], 1) << p.name;
    const std::vector<float>& early = record.at_firing.at(static_cast<int>(i));
    EXPECT_EQ(std::memcmp(early.data(), model.flat_grads().data() + p.offset, early.size() * sizeof(float)), 0)
        << p.name << " changed after its hook fired";
  }
}

TEST_F(GradReadyTest, MlpFiresEachParameterOnceLastLayerFirst) {
  Model model(build_mlp(MlpSpec{16, {12, 8}, 5}), 3);
  ASSERT_EQ(model.parameters().size(), 6u);  // 1.weight 1.bias 3.weight 3.bias 5.weight 5.bias
  model.flat_grads().fill(std::numeric_limits<float>::quiet_NaN());  // stale contents must not survive
  model.zero_grad();
  const autograd::Variable logits = model.forward(autograd::Variable(input(6, 16)));
  const HookRecord record = backward_recording(model, autograd::cross_entropy(logits, {0, 1, 2, 3, 4, 0}));
  expect_fired_once_with_final_gradient(model, record);

  // Reverse order of use: a layer's parameters fire before those of any earlier layer.
  std::vector<int> position(6);
  for (size_t k = 0; k < record.order.size(); ++k) position[static_cast<size_t>(record.order[k])] = static_cast<int>(k);
  for (int later : {4, 5})
    for (int earlier : {0, 1, 2, 3}) EXPECT_LT(position[later], position[earlier]) << later << " vs " << earlier;
  for (int later : {2, 3})
    for (int earlier : {0, 1}) EXPECT_LT(position[later], position[earlier]) << later << " vs " << earlier;
  for (float g : model.flat_grads().to_vector()) ASSERT_TRUE(std::isfinite(g));
}

TEST_F(GradReadyTest, CnnFiresEachParameterOnceWithFinalGradient) {
  CnnSpec spec;
  spec.height = spec.width = 10;
  spec.channels = {3, 4};
  spec.fc_hidden = 6;
  spec.classes = 3;
  Model model(build_cnn(spec), 5);
  model.zero_grad();
  const autograd::Variable logits =
      model.forward(autograd::Variable(input(2, 100).view({2, 1, 10, 10})));
  const HookRecord record = backward_recording(model, autograd::cross_entropy(logits, {1, 2}));
  expect_fired_once_with_final_gradient(model, record);
  EXPECT_EQ(record.order.front() / 2, 3) << "the last Linear's parameters should fire first";
  EXPECT_EQ(record.order.back() / 2, 0) << "the first conv's parameters should fire last";
}

// A module whose forward pass reads `used` twice (y = W (W x)), computes with `dead`
// without letting it reach the output, and never touches `unused`.
class SharedDeadUnused : public Module {
 public:
  SharedDeadUnused() {
    used_ = &add_parameter("used", {4, 4}, {InitKind::kPytorchDefault, 4, 4});
    dead_ = &add_parameter("dead", {4, 4}, {InitKind::kPytorchDefault, 4, 4});
    unused_ = &add_parameter("unused", {3}, {InitKind::kOnes, 3, 3});
  }
  Variable forward(const Variable& x) override {
    const Variable discarded = autograd::linear(x, dead_->var, Variable());
    (void)discarded;
    return autograd::linear(autograd::linear(x, used_->var, Variable()), used_->var, Variable());
  }
  std::string describe() const override { return "SharedDeadUnused"; }

 private:
  Parameter* used_;
  Parameter* dead_;
  Parameter* unused_;
};

TEST_F(GradReadyTest, SharedDeadAndUnusedParameters) {
  Model model(std::make_unique<SharedDeadUnused>(), 8);
  ASSERT_EQ(model.parameters().size(), 3u);
  model.flat_grads().fill(std::numeric_limits<float>::quiet_NaN());
  model.zero_grad();
  const autograd::Variable out = model.forward(autograd::Variable(input(3, 4)));
  const HookRecord record = backward_recording(model, autograd::cross_entropy(out, {0, 3, 1}));
  // A parameter read by two ops fires once, after both contributions.
  expect_fired_once_with_final_gradient(model, record);

  const std::vector<float> grads = model.flat_grads().to_vector();
  auto grad_of = [&](size_t i) {
    const ParameterInfo& p = model.parameters()[i];
    return std::vector<float>(grads.begin() + p.offset, grads.begin() + p.offset + p.numel);
  };
  int nonzero = 0;
  for (float g : grad_of(0)) nonzero += g != 0.0f;
  EXPECT_GT(nonzero, 8) << "the shared parameter should get a real gradient";
  for (float g : grad_of(1)) EXPECT_EQ(g, 0.0f) << "dead: its output never reached the loss";
  for (float g : grad_of(2)) EXPECT_EQ(g, 0.0f) << "unused: never read";
  EXPECT_EQ(record.order.back(), 2) << "an unused parameter fires at the end";
}

TEST_F(GradReadyTest, SharedParameterGradientSumsBothUses) {
  // The gradient of W in y = W (W x) is the sum of the gradients of two independent
  // copies, one per use: compare against leaves w_inner and w_outer holding W's values.
  Model model(std::make_unique<SharedDeadUnused>(), 8);
  const Tensor x = input(3, 4);
  const std::vector<int32_t> labels = {0, 3, 1};
  model.zero_grad();
  model.backward(autograd::cross_entropy(model.forward(autograd::Variable(x)), labels));
  const ParameterInfo& p = model.parameters()[0];
  const std::vector<float> both(model.flat_grads().data() + p.offset, model.flat_grads().data() + p.offset + p.numel);

  autograd::Variable w_inner(model.named_parameters()[0].second.clone(), true);
  autograd::Variable w_outer(model.named_parameters()[0].second.clone(), true);
  autograd::current_tape().backward(autograd::cross_entropy(
      autograd::linear(autograd::linear(autograd::Variable(x), w_inner, autograd::Variable()), w_outer,
                       autograd::Variable()),
      labels));
  const std::vector<float> inner = w_inner.grad().to_vector(), outer = w_outer.grad().to_vector();
  for (size_t i = 0; i < both.size(); ++i) EXPECT_NEAR(both[i], inner[i] + outer[i], 1e-6) << i;
}

}  // namespace
}  // namespace gradmesh::nn
