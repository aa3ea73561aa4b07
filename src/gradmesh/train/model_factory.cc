#include "gradmesh/train/model_factory.h"

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

}  // namespace

std::unique_ptr<nn::Model> build_model(const ModelConfig& config, const InputGeometry& input, uint64_t seed) {
  const nn::InitKind init = nn::parse_weight_init(config.init);
  std::unique_ptr<nn::Module> root;
  if (config.kind == "mlp") {
    nn::MlpSpec spec;
    spec.in_features = input.channels * input.height * input.width;
    spec.hidden = config.hidden;
    spec.classes = input.classes;
    spec.activation = parse_activation(config.activation);
    spec.dropout = static_cast<float>(config.dropout);
    spec.init = init;
    root = nn::build_mlp(spec);
  } else if (config.kind == "cnn") {
    nn::CnnSpec spec;
    spec.in_channels = input.channels;
    spec.height = input.height;
    spec.width = input.width;
    spec.channels = config.channels;
    spec.kernel = config.kernel_size;
    spec.fc_hidden = config.fc_hidden;
    spec.classes = input.classes;
    spec.init = init;
    root = nn::build_cnn(spec);
  } else {
    throw_error(ErrorKind::kConfig, "model.kind", "expected mlp or cnn, got '" + config.kind + "'");
  }
  return std::make_unique<nn::Model>(std::move(root), seed);
}

}  // namespace gradmesh::train
