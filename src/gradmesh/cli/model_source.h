// Where a trained model comes from for gradmesh generate and serve: a run
// directory (its final model.safetensors, else its newest checkpoint), a
// checkpoint directory (step-N, whole, sharded or split), a checkpoints
// directory, or a .safetensors file; and the config.toml that says the
// model's shape.
#pragma once

#include <string>

#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/nn/model.h"

namespace gradmesh::cli {

// The config.toml of the run `path` belongs to: in it, or up to three levels
// up (<run>/checkpoints/step-N/model.safetensors). Error(kConfig) naming the
// path when there is none ("pass --config").
std::string find_run_config(const std::string& path);

struct ModelWeights {
  checkpoint::SafetensorsFile file;  // the whole model's tensors
  std::string version;               // the checkpoint's step, else the file's "step" metadata, else "1"
};

// The weights at `path` (any of the forms above). Error(kIo) when it does
// not exist; the loaders' errors (kFormat naming the file) otherwise.
ModelWeights read_model_weights_at(const std::string& path);

// Loads the weights at `path` into `model` (nn::Model::load_parameters;
// `others_allowed`: a pipeline stage takes its part) and returns their version.
std::string load_weights_at(const std::string& path, nn::Model& model, bool others_allowed = false);

}  // namespace gradmesh::cli
