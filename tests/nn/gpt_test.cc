// The GPT model: nanoGPT's parameter names, shapes and init, the causal
// property (a position never sees the future), the key/value cache giving the
// same logits as the full forward, a gradient for every parameter, tied and
// untied heads, and the errors a bad spec or input gets.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/nn/generate.h"
#include "gradmesh/nn/gpt.h"
#include "gradmesh/nn/model.h"

namespace gradmesh::nn {
namespace {

GptSpec small_spec(bool tied = true) {
  GptSpec s;
  s.vocab_size = 11;
  s.block_size = 8;
  s.n_layer = 2;
  s.n_head = 2;
  s.n_embd = 8;
  s.tie_weights = tied;
  return s;
}

Tensor ids_tensor(const std::vector<float>& ids, int64_t batch) {
  return Tensor::from_vector({batch, static_cast<int64_t>(ids.size()) / batch}, ids);
}

class GptTest : public ::testing::Test {
 protected:
  void SetUp() override { autograd::current_tape().clear(); }
  void TearDown() override { autograd::current_tape().clear(); }
};

TEST_F(GptTest, ParameterNamesAndShapesAreNanoGpts) {
  Model model(build_gpt(small_spec(false)), 1);
  std::vector<std::string> names;
  for (const ParameterInfo& p : model.parameters()) names.push_back(p.name);
  const std::vector<std::string> head{"transformer.wte.weight", "transformer.wpe.weight",
                                      "transformer.h.0.ln_1.weight", "transformer.h.0.ln_1.bias",
                                      "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.bias",
                                      "transformer.h.0.attn.c_proj.weight", "transformer.h.0.attn.c_proj.bias",
                                      "transformer.h.0.ln_2.weight", "transformer.h.0.ln_2.bias",
                                      "transformer.h.0.mlp.c_fc.weight", "transformer.h.0.mlp.c_fc.bias",
                                      "transformer.h.0.mlp.c_proj.weight", "transformer.h.0.mlp.c_proj.bias"};
  ASSERT_GE(names.size(), head.size());
  for (size_t i = 0; i < head.size(); ++i) EXPECT_EQ(names[i], head[i]);
  EXPECT_EQ(names[names.size() - 3], "transformer.ln_f.weight");
  EXPECT_EQ(names.back(), "lm_head.weight");
  EXPECT_EQ(model.parameters()[4].shape, (Shape{24, 8}));  // c_attn [3C, C]
  EXPECT_EQ(model.parameters()[10].shape, (Shape{32, 8}));  // c_fc [4C, C]
  EXPECT_EQ(model.num_parameters(), gpt_parameter_count(small_spec(false)));
  Model tied(build_gpt(small_spec(true)), 1);
  EXPECT_EQ(tied.parameters().back().name, "transformer.ln_f.bias");
  EXPECT_EQ(tied.num_parameters(), gpt_parameter_count(small_spec(true)));
  EXPECT_EQ(tied.num_parameters() + 11 * 8, model.num_parameters());
}

TEST_F(GptTest, InitIsNanoGpts) {
  GptSpec spec = small_spec();
  spec.n_embd = 64;
  spec.vocab_size = 200;
  Model model(build_gpt(spec), 3);
  for (auto& [name, t] : model.named_parameters()) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      sum += t.data()[i];
      sq += double(t.data()[i]) * t.data()[i];
    }
    const double mean = sum / static_cast<double>(t.numel()), rms = std::sqrt(sq / static_cast<double>(t.numel()));
    if (name.find("ln_") != std::string::npos && name.ends_with(".weight")) {
      EXPECT_EQ(mean, 1.0) << name;
    } else if (name.ends_with(".bias")) {
      EXPECT_EQ(rms, 0.0) << name;
    } else {
      const double want = name.find("c_proj") != std::string::npos ? 0.02 / std::sqrt(4.0) : 0.02;
      EXPECT_NEAR(rms, want, want * 0.1) << name;
    }
  }
}

TEST_F(GptTest, APositionNeverSeesTheTokensAfterIt) {
  Model model(build_gpt(small_spec()), 5);
  model.set_training(false);
  autograd::NoGradGuard no_grad;
  const Tensor a = model.forward(autograd::Variable(ids_tensor({1, 2, 3, 4, 5, 6}, 1))).value();
  const Tensor b = model.forward(autograd::Variable(ids_tensor({1, 2, 3, 9, 9, 9}, 1))).value();
  ASSERT_EQ(a.shape(), (Shape{6, 11}));
  for (int64_t i = 0; i < 3 * 11; ++i) EXPECT_EQ(a.data()[i], b.data()[i]) << i;
  bool later_differs = false;
  for (int64_t i = 3 * 11; i < 6 * 11; ++i) later_differs |= a.data()[i] != b.data()[i];
  EXPECT_TRUE(later_differs);
}

TEST_F(GptTest, TheCacheGivesTheLogitsOfTheFullForward) {
  for (bool tied : {true, false}) {
    Model model(build_gpt(small_spec(tied)), 9);
    model.set_training(false);
    auto& gpt = static_cast<Gpt&>(model.root());
    const std::vector<float> ids{3, 1, 4, 1, 5, 9, 2, 6};
    Tensor full;
    {
      autograd::NoGradGuard no_grad;
      full = model.forward(autograd::Variable(ids_tensor(ids, 1))).value();
    }
    KvCache cache = gpt.new_cache();
    for (size_t t = 0; t < ids.size(); ++t) {
      const Tensor step = gpt.next_token_logits(static_cast<int64_t>(ids[t]), cache);
      for (int64_t v = 0; v < 11; ++v)
        EXPECT_NEAR(step.data()[v], full.data()[t * 11 + v], 1e-5) << "position " << t << " token " << v;
    }
    EXPECT_EQ(cache.length, 8);
    EXPECT_THROW(gpt.next_token_logits(1, cache), Error);  // the context is full
  }
}

// Continuous batching: three sequences at different positions advanced
// together give each one's own logits, as one sequence at a time does.
TEST_F(GptTest, BatchedDecodingGivesEachSequenceItsOwnLogits) {
  Model model(build_gpt(small_spec()), 9);
  model.set_training(false);
  auto& gpt = static_cast<Gpt&>(model.root());
  const std::vector<std::vector<int64_t>> seqs = {{3, 1, 4, 1, 5}, {9, 2}, {6, 5, 3, 5, 8, 9, 7}};
  std::vector<KvCache> alone(3), together(3);
  for (size_t i = 0; i < 3; ++i) alone[i] = gpt.new_cache(), together[i] = gpt.new_cache();
  // Sequence i joins at step i and feeds one token per step until it runs out.
  for (size_t step = 0; step < 9; ++step) {
    std::vector<int64_t> tokens;
    std::vector<KvCache*> caches;
    std::vector<size_t> who;
    for (size_t i = 0; i < 3; ++i) {
      if (step < i || step - i >= seqs[i].size()) continue;
      tokens.push_back(seqs[i][step - i]);
      caches.push_back(&together[i]);
      who.push_back(i);
    }
    if (tokens.empty()) continue;
    const Tensor batch = gpt.next_token_logits_batch(tokens, caches);
    ASSERT_EQ(batch.shape(), (Shape{static_cast<int64_t>(tokens.size()), 11}));
    for (size_t k = 0; k < who.size(); ++k) {
      const Tensor one = gpt.next_token_logits(tokens[k], alone[who[k]]);
      for (int64_t v = 0; v < 11; ++v)
        EXPECT_NEAR(batch.data()[static_cast<int64_t>(k) * 11 + v], one.data()[v], 1e-5)
            << "sequence " << who[k] << " step " << step;
    }
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(together[i].length, static_cast<int64_t>(seqs[i].size()));
  KvCache full = gpt.new_cache();
  full.length = 8;
  std::vector<KvCache*> caches{&together[0], &full};
  EXPECT_THROW(gpt.next_token_logits_batch({1, 1}, caches), Error);  // one context is full
}

TEST_F(GptTest, EveryParameterGetsAGradient) {
  Model model(build_gpt(small_spec()), 2);
  model.zero_grad();
  std::vector<float> ids;
  std::vector<int32_t> targets;
  for (int i = 0; i < 2 * 8; ++i) {
    ids.push_back(static_cast<float>((i * 7) % 11));
    targets.push_back((i * 7 + 3) % 11);
  }
  autograd::Variable loss = autograd::cross_entropy(model.forward(autograd::Variable(ids_tensor(ids, 2))), targets);
  EXPECT_NEAR(loss.value().item(), std::log(11.0), 0.1);  // small init: close to uniform
  model.backward(loss);
  for (const ParameterInfo& p : model.parameters()) {
    double norm = 0;
    for (int64_t i = 0; i < p.numel; ++i) norm += std::abs(model.flat_grads().data()[p.offset + i]);
    EXPECT_GT(norm, 0) << p.name;
  }
}

TEST_F(GptTest, BadSpecsAndInputsAreNamed) {
  GptSpec s = small_spec();
  s.n_head = 3;
  try {
    build_gpt(s);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("model.n_embd"), std::string::npos) << e.what();
  }
  Model model(build_gpt(small_spec()), 1);
  EXPECT_THROW(model.forward(autograd::Variable(Tensor::zeros({1, 9}))), Error);  // longer than block_size
  EXPECT_THROW(model.forward(autograd::Variable(Tensor::zeros({9}))), Error);
  EXPECT_THROW(model.forward(autograd::Variable(Tensor::full({1, 2}, 11.0f))), Error);  // token outside the vocabulary
}

TEST(SampleToken, GreedyTopKAndTemperature) {
  const std::vector<float> logits{0.0f, 3.0f, 1.0f, 2.0f};
  GenerateOptions greedy;
  greedy.temperature = 0;
  EXPECT_EQ(sample_token(logits.data(), 4, greedy, 0.99f), 1);
  GenerateOptions top2;
  top2.top_k = 2;
  for (float u : {0.0f, 0.3f, 0.6f, 0.99f}) {
    const int64_t t = sample_token(logits.data(), 4, top2, u);
    EXPECT_TRUE(t == 1 || t == 3) << u;
  }
  EXPECT_EQ(sample_token(logits.data(), 4, top2, 0.0f), 1);
  EXPECT_EQ(sample_token(logits.data(), 4, top2, 0.99f), 3);
  // A low temperature concentrates the mass on the best token.
  GenerateOptions cold;
  cold.temperature = 0.05;
  EXPECT_EQ(sample_token(logits.data(), 4, cold, 0.99f), 1);
  // The full distribution reaches every token.
  GenerateOptions warm;
  std::vector<int> seen(4);
  const CounterRng rng(1, RngPurpose::kTest, 0);
  for (int i = 0; i < 2000; ++i) ++seen[sample_token(logits.data(), 4, warm, rng.uniform(i))];
  for (int v = 0; v < 4; ++v) EXPECT_GT(seen[v], 0) << v;
  EXPECT_GT(seen[1], seen[3]);
  EXPECT_GT(seen[3], seen[2]);
}

TEST_F(GptTest, GenerationIsDeterministicPerSeedAndGoesPastTheContext) {
  Model model(build_gpt(small_spec()), 4);
  auto& gpt = static_cast<Gpt&>(model.root());
  GenerateOptions o;
  o.max_tokens = 20;  // more than block_size = 8
  o.seed = 5;
  const std::vector<int64_t> a = generate(gpt, {1, 2}, o), b = generate(gpt, {1, 2}, o);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 20u);
  for (int64_t t : a) EXPECT_TRUE(t >= 0 && t < 11);
  o.seed = 6;
  EXPECT_NE(generate(gpt, {1, 2}, o), a);
  EXPECT_THROW(generate(gpt, {}, o), Error);
  EXPECT_THROW(generate(gpt, std::vector<int64_t>(9, 1), o), Error);
}

}  // namespace
}  // namespace gradmesh::nn

namespace gradmesh::nn {
namespace {

// Loss and every parameter gradient of one step on fixed data.
std::pair<float, std::vector<float>> one_step(bool recompute, float dropout) {
  autograd::current_tape().clear();
  GptSpec spec = small_spec();
  spec.recompute = recompute;
  spec.dropout = dropout;
  Model model(build_gpt(spec), 7);
  forward_context().seed = 3;
  forward_context().step = 1;
  model.zero_grad();
  std::vector<float> ids;
  std::vector<int32_t> targets;
  for (int i = 0; i < 3 * 8; ++i) {
    ids.push_back(static_cast<float>((i * 5) % 11));
    targets.push_back((i * 5 + 2) % 11);
  }
  autograd::Variable loss = autograd::cross_entropy(model.forward(autograd::Variable(ids_tensor(ids, 3))), targets);
  std::vector<int> final_order;
  model.backward(loss, [&](int p) { final_order.push_back(p); });
  EXPECT_EQ(final_order.size(), model.parameters().size()) << "every gradient-final event fires once";
  return {loss.value().item(), model.flat_grads().to_vector()};
}

TEST_F(GptTest, RecomputedBlocksGiveBitIdenticalGradients) {
  for (float dropout : {0.0f, 0.2f}) {
    const auto plain = one_step(false, dropout), recomputed = one_step(true, dropout);
    EXPECT_EQ(plain.first, recomputed.first) << "dropout " << dropout;
    EXPECT_TRUE(plain.second == recomputed.second) << "gradients differ with dropout " << dropout;
  }
  // Recomputation keeps fewer ops on the tape: one per block instead of the block's ops.
  GptSpec spec = small_spec();
  size_t ops[2];
  for (bool recompute : {false, true}) {
    autograd::current_tape().clear();
    spec.recompute = recompute;
    Model model(build_gpt(spec), 1);
    autograd::Variable out = model.forward(autograd::Variable(Tensor::zeros({1, 4})));
    ops[recompute] = autograd::current_tape().size();
    autograd::current_tape().clear();
  }
  EXPECT_LT(ops[1] + 10, ops[0]);
}

}  // namespace
}  // namespace gradmesh::nn

namespace gradmesh::nn {
namespace {

// Unit hooks that poison a unit's parameters (NaN) whenever they are outside
// the unit's forward or backward and restore them inside: a model that read
// a parameter outside its unit's window would produce NaN.
class PoisoningHooks : public UnitHooks {
 public:
  explicit PoisoningHooks(Model& model) : model_(model), saved_(model.flat_params().to_vector()),
                                          units_(model.parameter_units()) {
    for (size_t u = 0; u < units_.size(); ++u) poison(static_cast<int>(u));
  }
  void before_forward(int unit) override { restore(unit), log_.push_back("f" + std::to_string(unit)); }
  void after_forward(int unit) override { poison(unit); }
  void before_backward(int unit) override { restore(unit), log_.push_back("b" + std::to_string(unit)); }
  void after_backward(int unit) override { poison(unit), log_.push_back("/b" + std::to_string(unit)); }
  void restore_all() {
    for (size_t u = 0; u < units_.size(); ++u) restore(static_cast<int>(u));
  }
  std::vector<std::string> log_;

 private:
  void each(int unit, const std::function<void(int64_t)>& f) {
    for (int p : units_[unit]) {
      const ParameterInfo& info = model_.parameters()[p];
      for (int64_t i = info.offset; i < info.offset + info.numel; ++i) f(i);
    }
  }
  void poison(int unit) { each(unit, [&](int64_t i) { model_.flat_params().data()[i] = NAN; }); }
  void restore(int unit) { each(unit, [&](int64_t i) { model_.flat_params().data()[i] = saved_[i]; }); }
  Model& model_;
  std::vector<float> saved_;
  std::vector<std::vector<int>> units_;
};

std::vector<float> gradients_with(bool hooked, bool recompute, std::vector<std::string>* log) {
  autograd::current_tape().clear();
  GptSpec spec = small_spec();
  spec.recompute = recompute;
  Model model(build_gpt(spec), 11);
  std::unique_ptr<PoisoningHooks> hooks;
  if (hooked) hooks = std::make_unique<PoisoningHooks>(model);
  forward_context().unit_hooks = hooks.get();
  model.zero_grad();
  std::vector<float> ids;
  std::vector<int32_t> targets;
  for (int i = 0; i < 2 * 8; ++i) {
    ids.push_back(static_cast<float>((i * 3) % 11));
    targets.push_back((i * 3 + 1) % 11);
  }
  autograd::Variable loss = autograd::cross_entropy(model.forward(autograd::Variable(ids_tensor(ids, 2))), targets);
  model.backward(loss);
  forward_context().unit_hooks = nullptr;
  if (hooks && log) *log = hooks->log_;
  return model.flat_grads().to_vector();
}

TEST_F(GptTest, UnitHooksBracketEveryUseOfAUnitsParameters) {
  EXPECT_EQ(Model(build_gpt(small_spec()), 1).parameter_units().size(), 4u);  // embeddings, 2 blocks, head
  for (bool recompute : {false, true}) {
    std::vector<std::string> log;
    const std::vector<float> plain = gradients_with(false, recompute, nullptr);
    const std::vector<float> hooked = gradients_with(true, recompute, &log);
    EXPECT_TRUE(plain == hooked) << "a parameter was read outside its unit (recompute " << recompute << ")";
    const std::vector<std::string> want{"f0", "f1", "f2", "f3", "b3", "/b3", "b2", "/b2", "b1", "/b1", "b0", "/b0"};
    EXPECT_EQ(log, want);
  }
}

}  // namespace
}  // namespace gradmesh::nn
