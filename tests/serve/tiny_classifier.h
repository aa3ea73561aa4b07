// The serving tests' tiny classifier: an MLP on 2x2 single-channel images
// (4 features), 8 hidden units, 3 classes, seed 7.
#pragma once

#include <memory>

#include "gradmesh/nn/model.h"
#include "gradmesh/nn/models.h"

namespace gradmesh::serve::testing {

inline std::unique_ptr<nn::Model> tiny_classifier() {
  nn::MlpSpec spec;
  spec.in_features = 4;
  spec.hidden = {8};
  spec.classes = 3;
  return std::make_unique<nn::Model>(nn::build_mlp(spec), 7);
}

}  // namespace gradmesh::serve::testing
