#include "gradmesh/nn/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "gradmesh/autograd/attention.h"
#include "gradmesh/autograd/checkpoint.h"
#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/kernels/attention.h"

namespace gradmesh::nn {
namespace {

constexpr double kInitStd = 0.02;

// nanoGPT's init: N(0, std) weights, zero biases.
Linear& init_linear(Linear& layer, double std) {
  layer.weight().init = InitSpec{InitKind::kNormal, layer.in_features(), layer.out_features(), std};
  if (layer.bias()) layer.bias()->init = InitSpec{InitKind::kZeros, layer.in_features(), layer.out_features()};
  return layer;
}

// x [B, T, in] -> [B, T, out] through a Linear (which takes rows).
Variable linear_on_tokens(Linear& layer, const Variable& x) {
  const Shape& s = x.shape();
  Variable y = layer.forward(autograd::reshape(x, {s[0] * s[1], s[2]}));
  return autograd::reshape(y, {s[0], s[1], layer.out_features()});
}

// The same through a whole Linear or a split one (which takes [..., in] as it is).
Variable on_tokens(Module& layer, const Variable& x) {
  if (auto* linear = dynamic_cast<Linear*>(&layer)) return linear_on_tokens(*linear, x);
  return layer.forward(x);
}

Variable embedding_table(Module& wte, TensorSplit* split) {
  return split ? split->embedding_table(wte) : static_cast<Embedding&>(wte).weight().var;
}

}  // namespace

// A part of a block: its Linears are created with nanoGPT's init, whole or
// split by the model's TensorSplit (column-parallel into, row-parallel out of
// the part, so the part costs one all-reduce each way).
class GptPart : public Module {
 protected:
  explicit GptPart(TensorSplit* split) : split_(split) {}
  Module& add_linear(const std::string& name, int64_t in, int64_t out, double std, bool row_parallel,
                     int row_blocks = 1) {
    const InitSpec weight{InitKind::kNormal, in, out, std}, bias{InitKind::kZeros, in, out};
    if (split_ != nullptr)
      return add_child(name, row_parallel ? split_->row_linear(in, out, true, weight, bias)
                                          : split_->column_linear(in, out, true, row_blocks, weight, bias));
    auto layer = std::make_unique<Linear>(in, out);
    Linear& ref = *layer;
    add_child(name, std::move(layer));
    return init_linear(ref, std);
  }
  Dropout* add_dropout(const std::string& name, float p) {
    auto drop = std::make_unique<Dropout>(p);
    Dropout* raw = drop.get();
    add_child(name, std::move(drop));
    return raw;
  }
  TensorSplit* split_;
};

class GptAttention : public GptPart {
 public:
  GptAttention(const GptSpec& spec, double proj_std)
      : GptPart(spec.split.get()),
        n_head_(spec.n_head / (spec.split ? spec.split->degree() : 1)),
        c_attn_(add_linear("c_attn", spec.n_embd, 3 * spec.n_embd, kInitStd, false, /*row_blocks=*/3)),
        c_proj_(add_linear("c_proj", spec.n_embd, spec.n_embd, proj_std, true)),
        resid_dropout_(add_dropout("resid_dropout", spec.dropout)) {}
  // x [B, T, C] -> [B, T, C]; split: this rank's heads only, between the two all-reduces.
  Variable forward(const Variable& x) override {
    Variable y = autograd::causal_self_attention(on_tokens(c_attn_, x), n_head_);
    return resid_dropout_->forward(on_tokens(c_proj_, y));
  }
  // x [1, 1, C] at position `pos`: appends its key and value to the caches.
  Variable decode(const Variable& x, Tensor& keys, Tensor& values, int64_t pos) {
    GRADMESH_CHECK(split_ == nullptr, "key/value-cached decoding of a tensor-parallel GPT");
    const int64_t c = x.shape()[2];
    const Tensor qkv = on_tokens(c_attn_, x).value();
    std::memcpy(keys.data() + pos * c, qkv.data() + c, static_cast<size_t>(c) * sizeof(float));
    std::memcpy(values.data() + pos * c, qkv.data() + 2 * c, static_cast<size_t>(c) * sizeof(float));
    Tensor y = Tensor::empty({1, 1, c});
    kernels::attention_decode(qkv.data(), keys.data(), values.data(), pos + 1, n_head_, c / n_head_, y.data());
    return on_tokens(c_proj_, Variable(y));
  }
  // x [n, 1, C]: one new token of each of n sequences, sequence i at position
  // pos[i] with its own caches; the projections run as one matrix product.
  // Split: this rank's heads, so the caches and q, k, v are n_embd / degree wide.
  Variable decode_batch(const Variable& x, const std::vector<Tensor*>& keys, const std::vector<Tensor*>& values,
                        const std::vector<int64_t>& pos) {
    const int64_t n = x.shape()[0], c = x.shape()[2] / (split_ ? split_->degree() : 1);
    const Tensor qkv = on_tokens(c_attn_, x).value();
    Tensor y = Tensor::empty({n, 1, c});
    for (int64_t i = 0; i < n; ++i) {
      const float* row = qkv.data() + i * 3 * c;
      const auto s = static_cast<size_t>(i);
      std::memcpy(keys[s]->data() + pos[s] * c, row + c, static_cast<size_t>(c) * sizeof(float));
      std::memcpy(values[s]->data() + pos[s] * c, row + 2 * c, static_cast<size_t>(c) * sizeof(float));
      kernels::attention_decode(row, keys[s]->data(), values[s]->data(), pos[s] + 1, n_head_, c / n_head_,
                                y.data() + i * c);
    }
    return on_tokens(c_proj_, Variable(y));
  }
  std::string describe() const override { return "CausalSelfAttention(n_head=" + std::to_string(n_head_) + ")"; }

 private:
  int64_t n_head_;  // on this rank
  Module& c_attn_;
  Module& c_proj_;
  Dropout* resid_dropout_;
};

class GptMlp : public GptPart {
 public:
  GptMlp(const GptSpec& spec, double proj_std)
      : GptPart(spec.split.get()),
        c_fc_(add_linear("c_fc", spec.n_embd, 4 * spec.n_embd, kInitStd, false)),
        c_proj_(add_linear("c_proj", 4 * spec.n_embd, spec.n_embd, proj_std, true)),
        dropout_(add_dropout("dropout", spec.dropout)) {}
  Variable forward(const Variable& x) override {
    Variable h = autograd::activation(on_tokens(c_fc_, x), Activation::kGelu);
    return dropout_->forward(on_tokens(c_proj_, h));
  }
  std::string describe() const override { return "MLP(GELU)"; }

 private:
  Module& c_fc_;
  Module& c_proj_;
  Dropout* dropout_;
};

class GptBlock : public Module {
 public:
  GptBlock(const GptSpec& spec, double proj_std) : recompute_(spec.recompute) {
    ln_1_ = add<LayerNorm>("ln_1", std::make_unique<LayerNorm>(spec.n_embd));
    attn_ = add<GptAttention>("attn", std::make_unique<GptAttention>(spec, proj_std));
    ln_2_ = add<LayerNorm>("ln_2", std::make_unique<LayerNorm>(spec.n_embd));
    mlp_ = add<GptMlp>("mlp", std::make_unique<GptMlp>(spec, proj_std));
  }
  Variable forward(const Variable& x) override {
    if (!(recompute_ && training() && autograd::grad_enabled())) return run(x);
    std::vector<std::pair<std::string, Parameter*>> named;
    collect_parameters("", named);
    std::vector<Variable> params;
    for (auto& [name, p] : named) params.push_back(p->var);
    return autograd::checkpoint([this](const Variable& input) { return run(input); }, x, params);
  }
  Variable decode(const Variable& x, Tensor& keys, Tensor& values, int64_t pos) {
    Variable h = autograd::add(x, attn_->decode(ln_1_->forward(x), keys, values, pos));
    return autograd::add(h, mlp_->forward(ln_2_->forward(h)));
  }
  Variable decode_batch(const Variable& x, const std::vector<Tensor*>& keys, const std::vector<Tensor*>& values,
                        const std::vector<int64_t>& pos) {
    Variable h = autograd::add(x, attn_->decode_batch(ln_1_->forward(x), keys, values, pos));
    return autograd::add(h, mlp_->forward(ln_2_->forward(h)));
  }
  std::string describe() const override { return recompute_ ? "Block (recomputed in backward)" : "Block"; }

 private:
  Variable run(const Variable& x) {
    Variable h = autograd::add(x, attn_->forward(ln_1_->forward(x)));
    return autograd::add(h, mlp_->forward(ln_2_->forward(h)));
  }
  bool recompute_;
  template <class M>
  M* add(const std::string& name, std::unique_ptr<M> module) {
    M* raw = module.get();
    add_child(name, std::move(module));
    return raw;
  }
  LayerNorm* ln_1_;
  GptAttention* attn_;
  LayerNorm* ln_2_;
  GptMlp* mlp_;
};

void check_gpt_spec(const GptSpec& s) {
  auto positive = [](const char* key, int64_t v) {
    if (v < 1) throw_error(ErrorKind::kConfig, key, "must be >= 1, got " + std::to_string(v));
  };
  positive("model.vocab_size", s.vocab_size);
  positive("model.block_size", s.block_size);
  positive("model.n_layer", s.n_layer);
  positive("model.n_head", s.n_head);
  positive("model.n_embd", s.n_embd);
  if (s.n_embd % s.n_head != 0)
    throw_error(ErrorKind::kConfig, "model.n_embd",
                std::to_string(s.n_embd) + " is not divisible by model.n_head = " + std::to_string(s.n_head) +
                    ": every head takes n_embd / n_head columns");
  if (s.split && s.n_head % s.split->degree() != 0)
    throw_error(ErrorKind::kConfig, "model.n_head",
                std::to_string(s.n_head) + " heads do not divide among " + std::to_string(s.split->degree()) +
                    " tensor-parallel ranks (parallel.mesh.tp): every rank takes whole heads");
  if (s.split && s.vocab_size < s.split->degree())
    throw_error(ErrorKind::kConfig, "model.vocab_size",
                std::to_string(s.vocab_size) + " is smaller than the " + std::to_string(s.split->degree()) +
                    " tensor-parallel ranks that split it");
  const int64_t end = s.stage.block_end < 0 ? s.n_layer : s.stage.block_end;
  if (s.stage.count < 1 || s.stage.index < 0 || s.stage.index >= s.stage.count || s.stage.block_begin < 0 ||
      s.stage.block_begin >= end || end > s.n_layer)
    throw_error(ErrorKind::kConfig, "pipeline stage",
                "stage " + std::to_string(s.stage.index) + " of " + std::to_string(s.stage.count) + " with blocks [" +
                    std::to_string(s.stage.block_begin) + ", " + std::to_string(end) + ") of model.n_layer = " +
                    std::to_string(s.n_layer));
  if (!(s.dropout >= 0.0f && s.dropout < 1.0f))
    throw_error(ErrorKind::kConfig, "model.dropout", "must be in [0, 1), got " + std::to_string(s.dropout));
}

Gpt::Gpt(const GptSpec& spec) : spec_(spec) {
  check_gpt_spec(spec);
  const GptStage& stage = spec.stage;
  const bool first = stage.index == 0, last = stage.index == stage.count - 1;
  const int64_t block_end = stage.block_end < 0 ? spec.n_layer : stage.block_end;
  // Residual projections are scaled down so the residual stream's variance
  // does not grow with depth (GPT-2; nanoGPT's c_proj init).
  const double proj_std = kInitStd / std::sqrt(2.0 * static_cast<double>(spec.n_layer));
  auto transformer = std::make_unique<ModuleDict>();
  split_ = spec.split.get();
  wte_ = nullptr;
  wpe_ = nullptr;
  // The first stage embeds; a tied head on another last stage holds its own copy of the table.
  if (first || (last && spec.tie_weights)) {
    if (split_ != nullptr) {
      wte_ = &transformer->add("wte", split_->vocab_embedding(spec.vocab_size, spec.n_embd,
                                                             {InitKind::kNormal, spec.vocab_size, spec.n_embd, kInitStd}));
    } else {
      auto wte = std::make_unique<Embedding>(spec.vocab_size, spec.n_embd);
      wte->weight().init.std = kInitStd;
      wte_ = &transformer->add("wte", std::move(wte));
    }
  }
  if (first) {
    wpe_ = &transformer->add("wpe", std::make_unique<Embedding>(spec.block_size, spec.n_embd));
    wpe_->weight().init.std = kInitStd;
    dropouts_.push_back(&transformer->add("drop", std::make_unique<Dropout>(spec.dropout)));
  }
  // Blocks keep their index in the whole model as their name (transformer.h.<i>).
  auto blocks = std::make_unique<ModuleDict>();
  for (int64_t i = stage.block_begin; i < block_end; ++i) {
    auto block = std::make_unique<GptBlock>(spec, proj_std);
    blocks_.push_back(block.get());
    blocks->add(std::to_string(i), std::move(block));
  }
  transformer->add("h", std::move(blocks));
  ln_f_ = last ? &transformer->add("ln_f", std::make_unique<LayerNorm>(spec.n_embd)) : nullptr;
  add_child("transformer", std::move(transformer));
  lm_head_ = nullptr;
  if (last && !spec.tie_weights && split_ != nullptr) {
    lm_head_ = &add_child("lm_head", split_->column_linear(spec.n_embd, spec.vocab_size, false, 1,
                                                            {InitKind::kNormal, spec.n_embd, spec.vocab_size, kInitStd},
                                                            {}));
  } else if (last && !spec.tie_weights) {
    auto head = std::make_unique<Linear>(spec.n_embd, spec.vocab_size, /*bias=*/false);
    init_linear(*head, kInitStd);
    lm_head_ = &add_child("lm_head", std::move(head));
  }
  if (stage.count > 1) {
    // A stage's parameters start as the whole model's: each takes the random
    // stream of its place in the whole model (the tied copy: the table's).
    GptSpec whole_spec = spec;
    whole_spec.stage = GptStage{};
    std::vector<std::pair<std::string, Parameter*>> whole_named, mine;
    Gpt whole(whole_spec);  // parameter descriptions only: nothing is allocated
    whole.collect_parameters("", whole_named);
    std::map<std::string, int64_t> index;
    for (size_t i = 0; i < whole_named.size(); ++i) index[whole_named[i].first] = static_cast<int64_t>(i);
    collect_parameters("", mine);
    for (auto& [name, param] : mine) param->init.index = index.at(name);
  }
}

Variable Gpt::forward(const Variable& input) {
  const bool first = spec_.stage.index == 0, last = spec_.stage.index == spec_.stage.count - 1;
  const Shape& s = input.shape();
  // A later pipeline stage takes the previous stage's activations [B, T, C].
  if (first ? (s.size() != 2 || s[1] < 1 || s[1] > spec_.block_size)
            : (s.size() != 3 || s[1] < 1 || s[1] > spec_.block_size || s[2] != spec_.n_embd))
    throw_error(ErrorKind::kShape, "GPT",
                "input " + shape_str(s) + ": expected " +
                    (first ? std::string("token ids [batch, T]") : "activations [batch, T, " + std::to_string(spec_.n_embd) + "]") +
                    " with 1 <= T <= block_size = " + std::to_string(spec_.block_size));
  const int64_t batch = s[0], t = s[1], n = batch * t;
  Variable x = input;
  if (first) {
    std::vector<int64_t> tokens(static_cast<size_t>(n)), positions(static_cast<size_t>(n));
    const float* values = input.value().data();
    for (int64_t i = 0; i < n; ++i) {
      tokens[i] = static_cast<int64_t>(values[i]);
      positions[i] = i % t;
    }
    x = run_unit(0, input, [&](const Variable&) {
      Variable e = autograd::add(split_ ? split_->lookup(*wte_, tokens) : static_cast<Embedding*>(wte_)->lookup(tokens),
                                 wpe_->lookup(positions));
      return dropouts_[0]->forward(autograd::reshape(e, {batch, t, spec_.n_embd}));
    });
  }
  for (size_t i = 0; i < blocks_.size(); ++i)
    x = run_unit(static_cast<int>(i) + 1, x, [&](const Variable& in) { return blocks_[i]->forward(in); });
  if (!last) return x;
  return run_unit(static_cast<int>(blocks_.size()) + 1, x, [&](const Variable& in) {
    Variable h = autograd::reshape(ln_f_->forward(in), {n, spec_.n_embd});
    if (lm_head_) return lm_head_->forward(h);
    // Tied and split: this rank's rows of the vocabulary; h's gradient is summed over the group.
    return autograd::linear(split_ ? split_->copy_to_group(h) : h, embedding_table(*wte_, split_), Variable());
  });
}

std::vector<std::vector<Parameter*>> Gpt::parameter_units() {
  if (spec_.stage.count > 1) return {};  // a pipeline stage runs whole (ZeRO stage 3 is not combined with it)
  auto params_of = [](Module& m) {
    std::vector<std::pair<std::string, Parameter*>> named;
    m.collect_parameters("", named);
    std::vector<Parameter*> out;
    for (auto& [name, p] : named) out.push_back(p);
    return out;
  };
  std::vector<Parameter*> embeddings = params_of(*wte_);
  embeddings.push_back(&wpe_->weight());
  std::vector<std::vector<Parameter*>> units{embeddings};
  for (GptBlock* block : blocks_) units.push_back(params_of(*block));
  std::vector<Parameter*> head = params_of(*ln_f_);
  for (Parameter* p : params_of(lm_head_ ? *lm_head_ : *wte_)) head.push_back(p);
  units.push_back(head);
  return units;
}

std::string Gpt::describe() const {
  return "GPT(vocab_size=" + std::to_string(spec_.vocab_size) + ", block_size=" + std::to_string(spec_.block_size) +
         ", n_layer=" + std::to_string(spec_.n_layer) + ", n_head=" + std::to_string(spec_.n_head) +
         ", n_embd=" + std::to_string(spec_.n_embd) + (spec_.tie_weights ? ", tied head)" : ")");
}

KvCache Gpt::new_cache() const {
  KvCache cache;
  const int64_t width = spec_.n_embd / (split_ ? split_->degree() : 1);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    cache.keys.push_back(Tensor::zeros({spec_.block_size, width}));
    cache.values.push_back(Tensor::zeros({spec_.block_size, width}));
  }
  return cache;
}

Variable Gpt::loss(const Variable& output, const std::vector<int32_t>& labels, float denominator) {
  return split_ ? split_->cross_entropy(output, labels, denominator) : Module::loss(output, labels, denominator);
}

void Gpt::predict(const Variable& output, int32_t* classes) {
  if (split_) split_->argmax_rows(output, classes);
  else Module::predict(output, classes);
}

Tensor Gpt::next_token_logits(int64_t token, KvCache& cache) {
  if (split_ != nullptr || spec_.stage.count > 1)
    throw_error(ErrorKind::kUsage, "GPT generation", "a split or pipelined GPT generates through gradmesh serve");
  if (cache.length >= spec_.block_size)
    throw_error(ErrorKind::kUsage, "GPT generation",
                "the cache holds " + std::to_string(cache.length) + " positions, the whole context (block_size = " +
                    std::to_string(spec_.block_size) + ")");
  autograd::NoGradGuard no_grad;
  const int64_t pos = cache.length;
  Variable x = autograd::add(static_cast<Embedding*>(wte_)->lookup({token}), wpe_->lookup({pos}));
  x = autograd::reshape(x, {1, 1, spec_.n_embd});
  for (size_t i = 0; i < blocks_.size(); ++i) x = blocks_[i]->decode(x, cache.keys[i], cache.values[i], pos);
  x = autograd::reshape(ln_f_->forward(x), {1, spec_.n_embd});
  Variable logits = lm_head_ ? lm_head_->forward(x) : autograd::linear(x, embedding_table(*wte_, nullptr), Variable());
  ++cache.length;
  return logits.value().view({spec_.vocab_size});
}

Tensor Gpt::next_token_logits_batch(const std::vector<int64_t>& tokens, const std::vector<KvCache*>& caches) {
  if (split_ != nullptr || spec_.stage.count > 1)
    throw_error(ErrorKind::kUsage, "GPT generation", "a split or pipelined GPT generates through gradmesh serve");
  Tensor ids = Tensor::empty({static_cast<int64_t>(tokens.size())});
  for (size_t i = 0; i < tokens.size(); ++i) ids.data()[i] = static_cast<float>(tokens[i]);
  return decode_stage(ids, caches);
}

Tensor Gpt::decode_stage(const Tensor& input, const std::vector<KvCache*>& caches) {
  const bool first = spec_.stage.index == 0, last = spec_.stage.index == spec_.stage.count - 1;
  const auto n = static_cast<int64_t>(caches.size());
  GRADMESH_CHECK(n > 0 && input.numel() == (first ? n : n * spec_.n_embd), "one token or activation row per cache");
  std::vector<int64_t> positions;
  for (const KvCache* cache : caches) {
    if (cache->length >= spec_.block_size)
      throw_error(ErrorKind::kUsage, "GPT generation",
                  "a cache holds " + std::to_string(cache->length) + " positions, the whole context (block_size = " +
                      std::to_string(spec_.block_size) + ")");
    GRADMESH_CHECK(cache->keys.size() == blocks_.size(), "a cache made by this stage's new_cache()");
    positions.push_back(cache->length);
  }
  autograd::NoGradGuard no_grad;
  Variable x;
  if (first) {
    std::vector<int64_t> tokens(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<int64_t>(input.data()[i]);
    Variable e = split_ ? split_->lookup(*wte_, tokens) : static_cast<Embedding*>(wte_)->lookup(tokens);
    x = autograd::reshape(autograd::add(e, wpe_->lookup(positions)), {n, 1, spec_.n_embd});
  } else {
    x = Variable(input.view({n, 1, spec_.n_embd}));
  }
  std::vector<Tensor*> keys(caches.size()), values(caches.size());
  for (size_t b = 0; b < blocks_.size(); ++b) {
    for (size_t i = 0; i < caches.size(); ++i) keys[i] = &caches[i]->keys[b], values[i] = &caches[i]->values[b];
    x = blocks_[b]->decode_batch(x, keys, values, positions);
  }
  for (KvCache* cache : caches) ++cache->length;
  if (!last) return x.value().view({n, spec_.n_embd});
  x = autograd::reshape(ln_f_->forward(x), {n, spec_.n_embd});
  Variable logits = lm_head_ ? lm_head_->forward(x) : autograd::linear(x, embedding_table(*wte_, split_), Variable());
  return logits.value();
}

std::unique_ptr<Gpt> build_gpt(const GptSpec& spec) { return std::make_unique<Gpt>(spec); }

Tensor last_positions(const Tensor& out, int64_t rows, int64_t t) {
  const int64_t width = out.dim(1);
  GRADMESH_CHECK(out.dim(0) == rows * t, "rows x T positions");
  Tensor last = Tensor::empty({rows, width});
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(last.data() + i * width, out.data() + ((i + 1) * t - 1) * width,
                static_cast<size_t>(width) * sizeof(float));
  return last;
}

int64_t gpt_parameter_count(const GptSpec& s, int tensor_parallel) {
  const int64_t c = s.n_embd, tp = std::max(tensor_parallel, 1);
  // The largest rank's share: split pieces rounded up, replicated parameters whole.
  auto part = [tp](int64_t n) { return (n + tp - 1) / tp; };
  const int64_t block = tp > 1 ? 2 * (2 * c) + (c * 3 * c + 3 * c) / tp + (c * c) / tp + c + part(4 * c) * (c + 1) +
                                     part(4 * c) * c + c
                               : 2 * (2 * c)                 // ln_1, ln_2
                                     + (c * 3 * c + 3 * c)  // c_attn
                                     + (c * c + c)          // attn.c_proj
                                     + (c * 4 * c + 4 * c)  // c_fc
                                     + (4 * c * c + c);     // mlp.c_proj
  // The stage's blocks; the first stage embeds, the last holds ln_f and the
  // head (a tied head on another stage keeps its own copy of the table).
  const bool first = s.stage.index == 0, last = s.stage.index == s.stage.count - 1;
  const int64_t blocks = (s.stage.block_end < 0 ? s.n_layer : s.stage.block_end) - s.stage.block_begin;
  const int64_t table = part(s.vocab_size) * c;
  int64_t count = blocks * block;
  if (first) count += table + s.block_size * c;
  if (last) count += 2 * c + (s.tie_weights && first ? 0 : table);
  return count;
}

}  // namespace gradmesh::nn
