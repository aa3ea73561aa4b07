// Built-in models, selected by the config's model.kind.
#pragma once

#include <memory>
#include <vector>

#include "gradmesh/nn/layers.h"

namespace gradmesh::nn {

struct MlpSpec {
  int64_t in_features = 784;
  std::vector<int64_t> hidden = {512, 512};
  int64_t classes = 10;
  Activation activation = Activation::kRelu;
  float dropout = 0.0f;  // after each hidden activation
  InitKind init = InitKind::kPytorchDefault;
};

// Sequential(Flatten, Linear, act, [Dropout], ..., Linear): the same layout and
// names as nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), ...).
std::unique_ptr<Sequential> build_mlp(const MlpSpec& spec);

struct CnnSpec {
  int64_t in_channels = 1, height = 28, width = 28;
  std::vector<int64_t> channels = {32, 64};
  int64_t kernel = 3;
  int64_t fc_hidden = 128;
  int64_t classes = 10;
  InitKind init = InitKind::kPytorchDefault;
};

// Per entry of `channels`: Conv2d(k), ReLU, MaxPool2d(2); then Flatten, Linear(fc_hidden), ReLU, Linear(classes).
// The defaults are the reference CNN: conv 1->32 3x3, pool, conv 32->64 3x3, pool, 1600 -> 128 -> 10.
std::unique_ptr<Sequential> build_cnn(const CnnSpec& spec);

}  // namespace gradmesh::nn
