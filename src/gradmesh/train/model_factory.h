// Builds the model a config describes, for inputs of a given geometry.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradmesh/nn/gpt.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/nn/tensor_split.h"
#include "gradmesh/parallel/pipeline_schedule.h"
#include "gradmesh/train/config.h"

namespace gradmesh::train {

// What the data gives the model: an image's shape, or (language models) the
// token set's vocabulary size.
struct InputGeometry {
  int64_t channels = 0, height = 0, width = 0;
  int64_t vocab_size = 0;
};

// The GPT a config describes: model.vocab_size, or the data's when it is 0.
// Throws Error(kConfig) naming the key when the config's vocabulary is
// smaller than the data's, or a size is invalid.
nn::GptSpec gpt_spec(const ModelConfig& config, const InputGeometry& input);

// The most parameters a model may have: 8 GiB of float32 weights, as much
// again for gradients, and optimizer state on top.
inline constexpr int64_t kMaxParameters = int64_t{1} << 31;

// How many parameters build_model would create (config.classes outputs),
// counted without building anything and without overflow. Throws
// Error(kConfig) naming the keys (model.hidden, model.channels,
// model.fc_hidden, model.classes) and the layer when one layer or the whole
// model would exceed kMaxParameters. Geometry errors of the CNN (too many
// stages for the input) are left to build_model, which names them.
int64_t count_parameters(const ModelConfig& config, const InputGeometry& input);

// Checks count_parameters first, so an oversized config fails before any allocation.
// `split` (tensor parallelism) splits a GPT's layers and `stage` (pipeline
// parallelism) builds one stage of it; other models refuse both.
std::unique_ptr<nn::Model> build_model(const ModelConfig& config, const InputGeometry& input, uint64_t seed,
                                      nn::ParameterInit values = nn::ParameterInit::kNow,
                                      std::shared_ptr<nn::TensorSplit> split = nullptr,
                                      const nn::GptStage& stage = {});

// The whole GPT's parameters (names, shapes) in order, without allocating them.
std::vector<std::pair<std::string, Shape>> gpt_whole_parameters(const ModelConfig& config, const InputGeometry& input);
// The GPT's blocks split into `stages` pipeline stages, balanced by an
// estimate of each block's and the head's work (parallel::balance_stages).
std::vector<parallel::StageBlocks> gpt_stage_split(const ModelConfig& config, const InputGeometry& input, int stages);

}  // namespace gradmesh::train
