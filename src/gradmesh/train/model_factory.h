// Builds the model a config describes, for inputs of a given geometry.
#pragma once

#include <memory>

#include "gradmesh/nn/model.h"
#include "gradmesh/train/config.h"

namespace gradmesh::train {

struct InputGeometry {
  int64_t channels, height, width;
  int64_t classes;
};

std::unique_ptr<nn::Model> build_model(const ModelConfig& config, const InputGeometry& input, uint64_t seed);

}  // namespace gradmesh::train
