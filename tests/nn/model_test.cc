#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/bf16.h"
#include "gradmesh/core/error.h"
#include "gradmesh/nn/gpt.h"
#include "gradmesh/nn/init.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/nn/models.h"

namespace gradmesh::nn {
namespace {

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override { autograd::current_tape().clear(); }
  void TearDown() override { autograd::current_tape().clear(); }
};

struct Expected {
  std::string name;
  Shape shape;
};

void expect_layout(const Model& model, const std::vector<Expected>& want) {
  const std::vector<ParameterInfo>& got = model.parameters();
  ASSERT_EQ(got.size(), want.size());
  int64_t offset = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name) << i;
    EXPECT_EQ(got[i].shape, want[i].shape) << want[i].name;
    EXPECT_EQ(got[i].numel, shape_numel(want[i].shape)) << want[i].name;
    EXPECT_EQ(got[i].offset, offset) << want[i].name << " is not contiguous with the previous parameter";
    offset += shape_numel(want[i].shape);
  }
  EXPECT_EQ(model.num_parameters(), offset);
}

// Named parameters are views of the flat buffer at their offsets, not copies.
void expect_views_of_flat_buffer(Model& model) {
  const auto named = model.named_parameters();
  ASSERT_EQ(named.size(), model.parameters().size());
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(named[i].first, model.parameters()[i].name);
    EXPECT_EQ(named[i].second.data(), model.flat_params().data() + model.parameters()[i].offset) << named[i].first;
  }
}

TEST_F(ModelTest, MlpDefaultNamesShapesAndLayout) {
  Model model(build_mlp(MlpSpec{}), 0);
  expect_layout(model, {{"1.weight", {512, 784}},
                        {"1.bias", {512}},
                        {"3.weight", {512, 512}},
                        {"3.bias", {512}},
                        {"5.weight", {10, 512}},
                        {"5.bias", {10}}});
  EXPECT_EQ(model.num_parameters(), 669706);
  expect_views_of_flat_buffer(model);
  const std::string summary = model.summary();
  EXPECT_NE(summary.find("669706"), std::string::npos) << summary;
  EXPECT_NE(summary.find("Linear(in_features=784, out_features=512"), std::string::npos) << summary;
}

TEST_F(ModelTest, CnnDefaultNamesShapesAndLayout) {
  Model model(build_cnn(CnnSpec{}), 0);
  expect_layout(model, {{"0.weight", {32, 1, 3, 3}},
                        {"0.bias", {32}},
                        {"3.weight", {64, 32, 3, 3}},
                        {"3.bias", {64}},
                        {"7.weight", {128, 1600}},
                        {"7.bias", {128}},
                        {"9.weight", {10, 128}},
                        {"9.bias", {10}}});
  expect_views_of_flat_buffer(model);
  // The reference CNN maps a 28x28 image to 10 logits.
  autograd::NoGradGuard no_grad;
  EXPECT_EQ(model.forward(autograd::Variable(Tensor::zeros({2, 1, 28, 28}))).shape(), (Shape{2, 10}));
}

TEST_F(ModelTest, MlpWithDropoutKeepsPyTorchIndices) {
  MlpSpec spec;
  spec.dropout = 0.2f;
  Model model(build_mlp(spec), 0);
  // Flatten, Linear, ReLU, Dropout, Linear, ReLU, Dropout, Linear.
  expect_layout(model, {{"1.weight", {512, 784}},
                        {"1.bias", {512}},
                        {"4.weight", {512, 512}},
                        {"4.bias", {512}},
                        {"7.weight", {10, 512}},
                        {"7.bias", {10}}});
}

TEST_F(ModelTest, CnnRejectsTooManyStages) {
  CnnSpec spec;
  spec.channels = {8, 8, 8, 8};
  try {
    build_cnn(spec);
    FAIL() << "a 28x28 input cannot take four conv+pool stages";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  }
}

TEST_F(ModelTest, SameSeedSameParametersDifferentSeedDifferent) {
  const MlpSpec spec{20, {16, 12}, 5};
  Model a(build_mlp(spec), 5), b(build_mlp(spec), 5), c(build_mlp(spec), 6);
  ASSERT_EQ(a.num_parameters(), b.num_parameters());
  EXPECT_EQ(std::memcmp(a.flat_params().data(), b.flat_params().data(), a.flat_params().nbytes()), 0);
  const std::vector<float> va = a.flat_params().to_vector(), vc = c.flat_params().to_vector();
  int64_t same = 0;
  for (size_t i = 0; i < va.size(); ++i) same += va[i] == vc[i];
  EXPECT_LT(same, static_cast<int64_t>(va.size()) / 100);
}

// ZeRO stage 3 initialises only the pieces a rank owns: pieces cutting across
// parameters, filled in any order, must give the bits of the whole init
// (the LayerNorm ones/zeros and the embeddings' normal included).
TEST_F(ModelTest, DeferredValuesFilledPieceByPieceEqualTheWholeInit) {
  for (const bool gpt : {false, true}) {
    auto build = [&]() -> std::unique_ptr<Module> {
      if (!gpt) return build_mlp(MlpSpec{20, {16, 12}, 5});
      GptSpec g;
      g.vocab_size = 11;
      g.block_size = 8;
      g.n_layer = 2;
      g.n_head = 2;
      g.n_embd = 8;
      return build_gpt(g);
    };
    Model whole(build(), 9), pieces(build(), 9, ParameterInit::kDeferred);
    const int64_t n = whole.num_parameters();
    pieces.flat_params().fill(-7.0f);  // a stale value left anywhere shows up below
    int64_t prev = 0;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int64_t c : {int64_t{1}, n / 3, 2 * n / 3, n - 5, n}) {
      ranges.emplace_back(prev, c);
      prev = c;
    }
    for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) pieces.initialize_range(it->first, it->second);
    pieces.initialize_range(0, 1);
    EXPECT_EQ(std::memcmp(whole.flat_params().data(), pieces.flat_params().data(), whole.flat_params().nbytes()), 0)
        << (gpt ? "gpt" : "mlp");
    EXPECT_THROW(pieces.initialize_range(0, n + 1), Error);
  }
}

TEST_F(ModelTest, InitDependsOnlyOnSeedParameterIndexAndElement) {
  // Parameter 0 has the same shape in both models; everything after it differs.
  Model a(build_mlp(MlpSpec{30, {20, 10}, 4}), 9), b(build_mlp(MlpSpec{30, {20, 7, 3}, 2}), 9);
  const int64_t n = a.parameters()[0].numel;
  ASSERT_EQ(n, b.parameters()[0].numel);
  EXPECT_EQ(std::memcmp(a.flat_params().data(), b.flat_params().data(), static_cast<size_t>(n) * sizeof(float)), 0);
}

struct Moments {
  double mean, variance, min, max;
};

Moments moments(const Tensor& t) {
  double sum = 0, sum_sq = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (float v : t.to_vector()) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
    lo = std::min<double>(lo, v);
    hi = std::max<double>(hi, v);
  }
  const double n = static_cast<double>(t.numel()), mean = sum / n;
  return {mean, sum_sq / n - mean * mean, lo, hi};
}

TEST_F(ModelTest, PytorchDefaultInitOfLinear784x512) {
  Model model(std::make_unique<Linear>(784, 512), 3);
  const auto named = model.named_parameters();
  const double bound = 1.0 / std::sqrt(784.0);
  const Moments w = moments(named[0].second);
  EXPECT_GE(w.min, -bound);
  EXPECT_LE(w.max, bound);
  EXPECT_GT(w.max, 0.99 * bound);  // the whole interval is used, not a narrower one
  EXPECT_LT(w.min, -0.99 * bound);
  // 401408 samples: the variance estimate's relative standard error is ~0.16%; allow 2%.
  EXPECT_NEAR(w.variance, bound * bound / 3, 0.02 * bound * bound / 3);
  EXPECT_NEAR(w.mean, 0.0, 0.01 * bound);
  const Moments b = moments(named[1].second);  // PyTorch draws the bias from the same bound
  EXPECT_GE(b.min, -bound);
  EXPECT_LE(b.max, bound);
  EXPECT_GT(b.variance, 0.5 * bound * bound / 3);
}

TEST_F(ModelTest, KaimingAndXavierInitScales) {
  Model kn(std::make_unique<Linear>(784, 512, true, InitKind::kKaimingNormal), 3);
  const Moments w = moments(kn.named_parameters()[0].second);
  const double std_want = std::sqrt(2.0 / 784);
  EXPECT_NEAR(std::sqrt(w.variance), std_want, 0.02 * std_want);
  EXPECT_NEAR(w.mean, 0.0, 0.01 * std_want);
  EXPECT_GT(w.max, 3 * std_want);  // a normal's tails, not a uniform's bounded range
  const Moments bias = moments(kn.named_parameters()[1].second);
  EXPECT_EQ(bias.min, 0.0);  // non-default schemes start biases at zero
  EXPECT_EQ(bias.max, 0.0);

  Model ku(std::make_unique<Linear>(784, 512, true, InitKind::kKaimingUniform), 3);
  const Moments u = moments(ku.named_parameters()[0].second);
  const double ku_bound = std::sqrt(6.0 / 784);
  EXPECT_LE(u.max, ku_bound);
  EXPECT_GT(u.max, 0.99 * ku_bound);

  Model xu(std::make_unique<Linear>(784, 512, true, InitKind::kXavierUniform), 3);
  const Moments x = moments(xu.named_parameters()[0].second);
  const double xu_bound = std::sqrt(6.0 / (784 + 512));
  EXPECT_LE(x.max, xu_bound);
  EXPECT_GT(x.max, 0.99 * xu_bound);

  Model xn(std::make_unique<Linear>(784, 512, true, InitKind::kXavierNormal), 3);
  const double xn_std = std::sqrt(2.0 / (784 + 512));
  EXPECT_NEAR(std::sqrt(moments(xn.named_parameters()[0].second).variance), xn_std, 0.02 * xn_std);

  // Conv2d: fan_in = in_channels * k * k.
  Model conv(std::make_unique<Conv2d>(32, 64, 3, 1, 0, true, InitKind::kKaimingNormal), 3);
  const double conv_std = std::sqrt(2.0 / (32 * 9));
  EXPECT_NEAR(std::sqrt(moments(conv.named_parameters()[0].second).variance), conv_std, 0.03 * conv_std);
}

TEST_F(ModelTest, InitializeFillsAndParsesNames) {
  Tensor t = Tensor::empty({4});
  initialize(t, {InitKind::kOnes, 1, 1}, 0, 0);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 1, 1, 1}));
  initialize(t, {InitKind::kZeros, 1, 1}, 0, 0);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{0, 0, 0, 0}));
  Tensor a = Tensor::empty({64}), b = Tensor::empty({64});
  initialize(a, {InitKind::kNormal, 1, 1}, 1, 0);
  initialize(b, {InitKind::kNormal, 1, 1}, 1, 1);  // another parameter index: another stream
  EXPECT_NE(a.to_vector(), b.to_vector());

  EXPECT_EQ(parse_weight_init("default"), InitKind::kPytorchDefault);
  EXPECT_EQ(parse_weight_init("kaiming_normal"), InitKind::kKaimingNormal);
  EXPECT_EQ(parse_weight_init("kaiming_uniform"), InitKind::kKaimingUniform);
  EXPECT_EQ(parse_weight_init("xavier_uniform"), InitKind::kXavierUniform);
  EXPECT_EQ(parse_weight_init("xavier_normal"), InitKind::kXavierNormal);
  try {
    parse_weight_init("he_normal");
    FAIL() << "unknown init accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("he_normal"), std::string::npos) << e.what();
  }
}

std::vector<std::pair<std::string, Tensor>> cloned_parameters(const Model& model) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, t] : model.named_parameters()) out.emplace_back(name, t.clone());
  return out;
}

const MlpSpec kSmallMlp{12, {10, 8}, 4};

TEST_F(ModelTest, LoadParametersRoundTrip) {
  Model source(build_mlp(kSmallMlp), 1), dest(build_mlp(kSmallMlp), 2);
  ASSERT_NE(std::memcmp(source.flat_params().data(), dest.flat_params().data(), source.flat_params().nbytes()), 0);
  dest.load_parameters(cloned_parameters(source), "weights.safetensors");
  EXPECT_EQ(std::memcmp(source.flat_params().data(), dest.flat_params().data(), source.flat_params().nbytes()), 0);
  expect_views_of_flat_buffer(dest);
}

TEST_F(ModelTest, LoadParametersWidensBf16) {
  Model source(build_mlp(kSmallMlp), 1), dest(build_mlp(kSmallMlp), 2);
  std::vector<std::pair<std::string, Tensor>> bf16;
  for (const auto& [name, t] : source.named_parameters()) bf16.emplace_back(name, t.to(DType::kBF16));
  dest.load_parameters(bf16, "weights.safetensors");
  const std::vector<float> want = source.flat_params().to_vector(), got = dest.flat_params().to_vector();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], bf16_to_float(float_to_bf16(want[i]))) << i;
}

// load_parameters must throw an Error naming `tensor` and the source, and copy nothing.
void expect_rejected(Model& dest, const std::vector<std::pair<std::string, Tensor>>& tensors,
                     const std::string& tensor) {
  const Tensor before = dest.flat_params().clone();
  try {
    dest.load_parameters(tensors, "ckpt/weights.safetensors");
    ADD_FAILURE() << "load_parameters accepted a bad set of tensors (" << tensor << ")";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(tensor), std::string::npos) << what;
    EXPECT_NE(what.find("ckpt/weights.safetensors"), std::string::npos) << what;
  }
  EXPECT_EQ(std::memcmp(before.data(), dest.flat_params().data(), before.nbytes()), 0)
      << "a rejected load changed the parameters";
}

TEST_F(ModelTest, LoadParametersRejectsMissingTensor) {
  Model source(build_mlp(kSmallMlp), 1), dest(build_mlp(kSmallMlp), 2);
  auto tensors = cloned_parameters(source);
  tensors.erase(tensors.begin() + 3);  // "3.bias"
  expect_rejected(dest, tensors, "3.bias");
}

TEST_F(ModelTest, LoadParametersRejectsWrongShape) {
  Model source(build_mlp(kSmallMlp), 1), dest(build_mlp(kSmallMlp), 2);
  auto tensors = cloned_parameters(source);
  ASSERT_EQ(tensors[4].first, "5.weight");  // the last weight: earlier tensors are valid
  tensors[4].second = Tensor::zeros({4, 7});
  expect_rejected(dest, tensors, "5.weight");
  tensors[4].second = Tensor::zeros({8, 4});  // transposed
  expect_rejected(dest, tensors, "5.weight");
}

TEST_F(ModelTest, LoadParametersRejectsUnexpectedTensor) {
  Model source(build_mlp(kSmallMlp), 1), dest(build_mlp(kSmallMlp), 2);
  auto tensors = cloned_parameters(source);
  tensors.emplace_back("7.weight", Tensor::zeros({4, 4}));
  expect_rejected(dest, tensors, "7.weight");
}

Tensor batch_input(int64_t rows, int64_t features, float phase) {
  Tensor x = Tensor::empty({rows, features});
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = std::sin(0.37f * static_cast<float>(i) + phase);
  return x;
}

std::vector<float> gradient_of(Model& model, const Tensor& x, const std::vector<int32_t>& labels) {
  model.zero_grad();
  model.backward(autograd::cross_entropy(model.forward(autograd::Variable(x)), labels));
  return model.flat_grads().to_vector();
}

TEST_F(ModelTest, ZeroGradOverwritesAndOmittingItAccumulates) {
  Model model(build_mlp(kSmallMlp), 4);
  const Tensor x1 = batch_input(5, 12, 0.0f), x2 = batch_input(5, 12, 1.0f);
  const std::vector<int32_t> y1 = {0, 1, 2, 3, 0}, y2 = {3, 3, 1, 0, 2};
  const std::vector<float> g1 = gradient_of(model, x1, y1), g2 = gradient_of(model, x2, y2);

  // zero_grad then backward overwrites whatever is in the buffer, NaN included.
  model.flat_grads().fill(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(gradient_of(model, x1, y1), g1);

  // Two passes without zero_grad in between: the gradient is the sum.
  model.zero_grad();
  model.backward(autograd::cross_entropy(model.forward(autograd::Variable(x1)), y1));
  model.backward(autograd::cross_entropy(model.forward(autograd::Variable(x2)), y2));
  const std::vector<float> sum = model.flat_grads().to_vector();
  int64_t nonzero = 0;
  for (size_t i = 0; i < sum.size(); ++i) {
    EXPECT_NEAR(sum[i], g1[i] + g2[i], 1e-6f * (1 + std::fabs(g1[i]) + std::fabs(g2[i]))) << i;
    nonzero += g1[i] != 0.0f;
  }
  EXPECT_GT(nonzero, static_cast<int64_t>(sum.size()) / 2);
}

// Linear/Conv2d followed by ReLU, left unfused: Sequential(0: Conv, 1: ReLU, 2: Pool, 3: Flatten, 4: Linear, 5: ReLU,
// 6: Linear) when `conv`, else Sequential(Flatten, Linear, ReLU, Linear, ReLU, Linear).
std::unique_ptr<Sequential> unfused_net(bool conv) {
  auto net = std::make_unique<Sequential>();
  if (conv) {
    net->add(std::make_unique<Conv2d>(1, 4, 3));
    net->add(std::make_unique<ActivationLayer>(Activation::kRelu));
    net->add(std::make_unique<MaxPool2d>(2));
    net->add(std::make_unique<Flatten>());
    net->add(std::make_unique<Linear>(36, 10));
  } else {
    net->add(std::make_unique<Flatten>());
    net->add(std::make_unique<Linear>(64, 10));
  }
  net->add(std::make_unique<ActivationLayer>(Activation::kRelu));
  net->add(std::make_unique<Linear>(10, 3));
  return net;
}

TEST_F(ModelTest, FuseActivationsIsBitIdentical) {
  for (const bool conv : {false, true}) {
    SCOPED_TRACE(conv ? "cnn" : "mlp");
    Model plain(unfused_net(conv), 11), fused(unfused_net(conv), 11);
    auto& seq = static_cast<Sequential&>(fused.root());
    seq.fuse_activations();
    // Each ReLU is folded into a neighbour (which one is the Sequential's choice).
    int fused_layers = 0;
    for (const auto& [name, child] : seq.children())
      fused_layers += child->describe().find("fused ReLU") != std::string::npos;
    EXPECT_EQ(fused_layers, conv ? 2 : 1);
    ASSERT_EQ(plain.parameters().size(), fused.parameters().size());
    for (size_t i = 0; i < plain.parameters().size(); ++i)
      EXPECT_EQ(plain.parameters()[i].name, fused.parameters()[i].name);

    const Tensor x = batch_input(4, 64, 0.5f).view({4, 1, 8, 8});
    const std::vector<int32_t> labels = {0, 2, 1, 2};
    plain.zero_grad();
    fused.zero_grad();
    const autograd::Variable out_plain = plain.forward(autograd::Variable(x));
    const autograd::Variable out_fused = fused.forward(autograd::Variable(x));
    // 7 ops (cnn) or 3 (mlp) unfused; each fused ReLU is one op fewer.
    EXPECT_EQ(autograd::current_tape().size(), conv ? 7u + 5u : 3u + 2u);
    ASSERT_EQ(out_plain.value().nbytes(), out_fused.value().nbytes());
    EXPECT_EQ(std::memcmp(out_plain.value().data(), out_fused.value().data(), out_plain.value().nbytes()), 0);
    autograd::current_tape().clear();
    plain.backward(autograd::cross_entropy(plain.forward(autograd::Variable(x)), labels));
    fused.backward(autograd::cross_entropy(fused.forward(autograd::Variable(x)), labels));
    EXPECT_EQ(std::memcmp(plain.flat_grads().data(), fused.flat_grads().data(), plain.flat_grads().nbytes()), 0);
  }
}

TEST_F(ModelTest, FuseActivationsLeavesOtherActivationsAlone) {
  auto net = std::make_unique<Sequential>();
  net->add(std::make_unique<Linear>(4, 4));
  net->add(std::make_unique<ActivationLayer>(Activation::kGelu));
  net->add(std::make_unique<Linear>(4, 4));
  auto* first = static_cast<Linear*>(net->children()[0].second.get());
  net->fuse_activations();
  EXPECT_EQ(first->fused_activation(), Activation::kNone);
  // build_mlp with GELU keeps the GELU layers.
  MlpSpec spec = kSmallMlp;
  spec.activation = Activation::kGelu;
  auto mlp = build_mlp(spec);
  EXPECT_EQ(static_cast<Linear*>(mlp->children()[1].second.get())->fused_activation(), Activation::kNone);
}

}  // namespace
}  // namespace gradmesh::nn
