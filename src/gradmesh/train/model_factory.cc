#include "gradmesh/train/model_factory.h"

#include <string>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/nn/models.h"

namespace gradmesh::train {
namespace {

nn::Activation parse_activation(const std::string& name) {
  if (name == "relu") return nn::Activation::kRelu;
  if (name == "gelu") return nn::Activation::kGelu;
  if (name == "tanh") return nn::Activation::kTanh;
  throw_error(ErrorKind::kConfig, "model.activation", "expected relu, gelu or tanh, got '" + name + "'");
}

std::string list_text(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

// Adds layers one at a time and stops at the first that breaks the budget,
// so no product or sum here can overflow: every factor is at most 2^31
// (config bounds and IDX limits) and the running total at most 2^31 before
// each addition.
class ParameterBudget {
 public:
  explicit ParameterBudget(std::string keys) : keys_(std::move(keys)) {}

  // A layer of `weights_a * weights_b` weights and `biases` biases.
  void add(const std::string& layer, int64_t weights_a, int64_t weights_b, int64_t biases) {
    int64_t weights = 0, layer_total = 0;
    if (__builtin_mul_overflow(weights_a, weights_b, &weights) ||
        __builtin_add_overflow(weights, biases, &layer_total) || layer_total > kMaxParameters)
      throw_error(ErrorKind::kConfig, keys_,
                  layer + " alone would hold " + std::to_string(weights_a) + " x " + std::to_string(weights_b) +
                      " weights, more than the " + std::to_string(kMaxParameters) +
                      " (2^31) parameters a model may have; use narrower layers");
    total_ += layer_total;  // both <= 2^31: no overflow
    if (total_ > kMaxParameters)
      throw_error(ErrorKind::kConfig, keys_,
                  "the model would have more than " + std::to_string(kMaxParameters) +
                      " (2^31) parameters (the total passes it at " + layer + "); use fewer or narrower layers");
  }
  int64_t total() const { return total_; }

 private:
  std::string keys_;
  int64_t total_ = 0;
};

int64_t count_mlp(const ModelConfig& c, const InputGeometry& input) {
  ParameterBudget budget("model.hidden = " + list_text(c.hidden) + ", model.classes = " + std::to_string(c.classes));
  int64_t in = input.channels * input.height * input.width;
  for (size_t i = 0; i < c.hidden.size(); ++i) {
    budget.add("hidden layer " + std::to_string(i + 1) + " (" + std::to_string(in) + " -> " +
                   std::to_string(c.hidden[i]) + ")",
               in, c.hidden[i], c.hidden[i]);
    in = c.hidden[i];
  }
  budget.add("the output layer (" + std::to_string(in) + " -> " + std::to_string(c.classes) + ")", in, c.classes,
             c.classes);
  return budget.total();
}

// Mirrors nn::build_cnn's shapes: each stage is a valid conv, then a 2x2 pool.
int64_t count_cnn(const ModelConfig& c, const InputGeometry& input) {
  ParameterBudget budget("model.channels = " + list_text(c.channels) + ", model.fc_hidden = " +
                         std::to_string(c.fc_hidden) + ", model.classes = " + std::to_string(c.classes));
  int64_t channels = input.channels, h = input.height, w = input.width;
  const int64_t k = c.kernel_size;
  for (size_t i = 0; i < c.channels.size(); ++i) {
    h = h - k + 1;
    w = w - k + 1;
    if (h < 2 || w < 2) return budget.total();  // build_cnn explains this one
    budget.add("conv layer " + std::to_string(i + 1) + " (" + std::to_string(channels) + " -> " +
                   std::to_string(c.channels[i]) + " channels)",
               channels * k * k, c.channels[i], c.channels[i]);
    channels = c.channels[i];
    h /= 2;
    w /= 2;
  }
  // channels <= 2^20 and h * w <= the input's pixels <= 2^31: fits in int64.
  const int64_t flat = channels * h * w;
  budget.add("the hidden linear layer (" + std::to_string(flat) + " -> " + std::to_string(c.fc_hidden) + ")", flat,
             c.fc_hidden, c.fc_hidden);
  budget.add("the output layer (" + std::to_string(c.fc_hidden) + " -> " + std::to_string(c.classes) + ")",
             c.fc_hidden, c.classes, c.classes);
  return budget.total();
}

int64_t count_gpt(const ModelConfig& c, const InputGeometry& input) {
  const nn::GptSpec spec = gpt_spec(c, input);
  // Every factor is at most 2^16 (schema bounds), so each term fits int64;
  // the block term is checked before it is multiplied by n_layer.
  const int64_t block = nn::gpt_parameter_count({spec.vocab_size, spec.block_size, 1, spec.n_head, spec.n_embd,
                                                 spec.dropout, true}) -
                        (spec.vocab_size + spec.block_size) * spec.n_embd - 2 * spec.n_embd;
  if (block > kMaxParameters / spec.n_layer)
    throw_error(ErrorKind::kConfig, "model.n_layer = " + std::to_string(spec.n_layer) + ", model.n_embd = " + std::to_string(spec.n_embd),
                "the GPT would have more than " + std::to_string(kMaxParameters) + " (2^31) parameters; use fewer or narrower layers");
  const int64_t total = nn::gpt_parameter_count(spec);
  if (total > kMaxParameters)
    throw_error(ErrorKind::kConfig, "model.n_embd = " + std::to_string(spec.n_embd),
                "the GPT would have " + std::to_string(total) + " parameters, more than " + std::to_string(kMaxParameters) + " (2^31)");
  return total;
}

}  // namespace

nn::GptSpec gpt_spec(const ModelConfig& c, const InputGeometry& input) {
  nn::GptSpec spec;
  spec.vocab_size = c.vocab_size > 0 ? c.vocab_size : input.vocab_size;
  if (c.vocab_size > 0 && input.vocab_size > c.vocab_size)
    throw_error(ErrorKind::kConfig, "model.vocab_size",
                std::to_string(c.vocab_size) + " is smaller than the token set's vocabulary of " +
                    std::to_string(input.vocab_size) + "; set 0 to take the token set's");
  if (spec.vocab_size < 1)
    throw_error(ErrorKind::kConfig, "model.vocab_size", "0 needs a token set to take the vocabulary from (data.format = \"tokens\")");
  spec.block_size = c.block_size;
  spec.n_layer = c.n_layer;
  spec.n_head = c.n_head;
  spec.n_embd = c.n_embd;
  spec.dropout = static_cast<float>(c.dropout);
  spec.tie_weights = c.tie_weights;
  spec.recompute = c.recompute;
  nn::check_gpt_spec(spec);
  return spec;
}

int64_t count_parameters(const ModelConfig& config, const InputGeometry& input) {
  if (config.kind == "mlp") return count_mlp(config, input);
  if (config.kind == "cnn") return count_cnn(config, input);
  if (config.kind == "gpt") return count_gpt(config, input);
  throw_error(ErrorKind::kConfig, "model.kind", "expected mlp, cnn or gpt, got '" + config.kind + "'");
}

std::vector<std::pair<std::string, Shape>> gpt_whole_parameters(const ModelConfig& config, const InputGeometry& input) {
  const std::unique_ptr<nn::Gpt> whole = nn::build_gpt(gpt_spec(config, input));  // descriptions only
  std::vector<std::pair<std::string, nn::Parameter*>> named;
  whole->collect_parameters("", named);
  std::vector<std::pair<std::string, Shape>> out;
  for (auto& [name, param] : named) out.emplace_back(name, param->shape);
  return out;
}

std::vector<parallel::StageBlocks> gpt_stage_split(const ModelConfig& config, const InputGeometry& input, int stages) {
  const nn::GptSpec spec = gpt_spec(config, input);
  // Estimated work per token, in multiply-adds: a block's four matrices
  // (12 C^2) and its attention over the context (2 T C); the head's V x C
  // matrix and the loss over V. Equal blocks: the head decides where to cut.
  const double c = static_cast<double>(spec.n_embd), t = static_cast<double>(spec.block_size);
  const double block = 12 * c * c + 2 * t * c, head = c * static_cast<double>(spec.vocab_size) + 4.0 * spec.vocab_size;
  return parallel::balance_stages(std::vector<double>(static_cast<size_t>(spec.n_layer), block), stages, 0.0, head,
                                  "parallel.mesh.pp");
}

std::unique_ptr<nn::Model> build_model(const ModelConfig& config, const InputGeometry& input, uint64_t seed,
                                      nn::ParameterInit values, std::shared_ptr<nn::TensorSplit> split,
                                      const nn::GptStage& stage) {
  if ((split || stage.count > 1) && config.kind != "gpt")
    throw_error(ErrorKind::kConfig, "model.kind", "only the GPT splits its layers for tensor parallelism, got \"" +
                                                      config.kind + "\"");
  count_parameters(config, input);
  const nn::InitKind init = nn::parse_weight_init(config.init);
  std::unique_ptr<nn::Module> root;
  if (config.kind == "gpt") {
    nn::GptSpec spec = gpt_spec(config, input);
    spec.split = std::move(split);
    spec.stage = stage;
    root = nn::build_gpt(spec);
  } else if (config.kind == "mlp") {
    nn::MlpSpec spec;
    spec.in_features = input.channels * input.height * input.width;
    spec.hidden = config.hidden;
    spec.classes = config.classes;
    spec.activation = parse_activation(config.activation);
    spec.dropout = static_cast<float>(config.dropout);
    spec.init = init;
    root = nn::build_mlp(spec);
  } else {
    nn::CnnSpec spec;
    spec.in_channels = input.channels;
    spec.height = input.height;
    spec.width = input.width;
    spec.channels = config.channels;
    spec.kernel = config.kernel_size;
    spec.fc_hidden = config.fc_hidden;
    spec.classes = config.classes;
    spec.init = init;
    root = nn::build_cnn(spec);
  }
  return std::make_unique<nn::Model>(std::move(root), seed, values);
}

}  // namespace gradmesh::train
