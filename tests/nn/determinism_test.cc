// Training is bit-reproducible: same seed, same data, same steps -> same bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/nn/models.h"

namespace gradmesh::nn {
namespace {

class DeterminismTest : public ::testing::Test {
 protected:
  void SetUp() override {
    autograd::current_tape().clear();
    forward_context() = ForwardContext{};
  }
  void TearDown() override {
    autograd::current_tape().clear();
    forward_context() = ForwardContext{};
  }
};

// Synthetic batch `step`: features [rows, features] and labels from a fixed linear rule,
// so the task is learnable and the loss should fall.
struct Batch {
  Tensor x;
  std::vector<int32_t> labels;
};

Batch make_batch(int step, int64_t rows, int64_t features, int32_t classes) {
  Batch b{Tensor::empty({rows, features}), std::vector<int32_t>(static_cast<size_t>(rows))};
  for (int64_t r = 0; r < rows; ++r) {
    double score = 0;
    for (int64_t f = 0; f < features; ++f) {
      const float v = std::sin(0.9f * static_cast<float>(r * features + f) + 1.7f * static_cast<float>(step));
      b.x.data()[r * features + f] = v;
      score += (f % 3 == 0 ? 1.0 : -0.5) * v;
    }
    b.labels[static_cast<size_t>(r)] = score > 0.3 ? 0 : (score < -0.3 ? 1 : classes - 1);
  }
  return b;
}

// 20 plain SGD steps (params -= 0.1 * grads on the flat buffers); returns the loss of each step.
std::vector<float> train(Model& model, const Shape& input_shape, int32_t classes) {
  std::vector<float> losses;
  const int64_t rows = input_shape[0], features = shape_numel(input_shape) / rows;
  for (int step = 0; step < 20; ++step) {
    forward_context() = ForwardContext{42, static_cast<uint64_t>(step), 0};
    const Batch b = make_batch(step % 4, rows, features, classes);
    model.zero_grad();
    const autograd::Variable loss =
        autograd::cross_entropy(model.forward(autograd::Variable(b.x.view(input_shape))), b.labels);
    losses.push_back(loss.value().item());
    model.backward(loss);
    float* p = model.flat_params().data();
    const float* g = model.flat_grads().data();
    for (int64_t i = 0; i < model.num_parameters(); ++i) p[i] -= 0.1f * g[i];
  }
  return losses;
}

bool same_bytes(Model& a, Model& b) {
  return a.num_parameters() == b.num_parameters() &&
         std::memcmp(a.flat_params().data(), b.flat_params().data(), a.flat_params().nbytes()) == 0;
}

TEST_F(DeterminismTest, MlpWithDropoutTrainsBitIdentically) {
  MlpSpec spec{24, {32, 16}, 3};
  spec.dropout = 0.25f;  // masks come from (seed, step, sample): they must repeat too
  Model a(build_mlp(spec), 17), b(build_mlp(spec), 17);
  const Tensor initial = a.flat_params().clone();
  const std::vector<float> la = train(a, {16, 24}, 3);
  const std::vector<float> lb = train(b, {16, 24}, 3);
  EXPECT_TRUE(same_bytes(a, b));
  EXPECT_EQ(la, lb);
  EXPECT_NE(std::memcmp(initial.data(), a.flat_params().data(), initial.nbytes()), 0) << "training did nothing";
  // Averaged over the 4 repeating batches, the loss falls.
  EXPECT_LT(la[16] + la[17] + la[18] + la[19], la[0] + la[1] + la[2] + la[3]);

  // A different seed trains to different bytes, so the comparison above is not vacuous.
  Model c(build_mlp(spec), 18);
  train(c, {16, 24}, 3);
  EXPECT_FALSE(same_bytes(a, c));
}

TEST_F(DeterminismTest, CnnTrainsBitIdentically) {
  CnnSpec spec;
  spec.height = spec.width = 10;
  spec.channels = {4};
  spec.fc_hidden = 12;
  spec.classes = 3;
  Model a(build_cnn(spec), 5), b(build_cnn(spec), 5);
  const std::vector<float> la = train(a, {8, 1, 10, 10}, 3);
  const std::vector<float> lb = train(b, {8, 1, 10, 10}, 3);
  EXPECT_TRUE(same_bytes(a, b));
  EXPECT_EQ(la, lb);
  for (float l : la) EXPECT_TRUE(std::isfinite(l));
}

}  // namespace
}  // namespace gradmesh::nn
