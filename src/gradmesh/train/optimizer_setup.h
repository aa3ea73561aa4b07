// The optimizer a config asks for, over the whole model (one process, plain
// data parallelism) or over this rank's ZeRO shard (parallel.zero >= 1 with
// several ranks): the same update rule and the same weight decay per
// parameter either way, so the two train the same weights.
#pragma once

#include <memory>
#include <vector>

#include "gradmesh/nn/model.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/parallel/zero_reducer.h"
#include "gradmesh/train/config.h"

namespace gradmesh::train {

// optim.weight_decay for every parameter (PyTorch's optimizer over
// model.parameters()), except for the GPT, which decays only its matrices
// (weights and embeddings) and not biases or LayerNorm parameters, as GPT-2
// and nanoGPT train.
float weight_decay_of(const Config& config, const nn::ParameterInfo& param);

// Groups over the whole flat buffer: consecutive parameters with the same
// weight decay share a group, so the groups tile [0, P) in order.
std::vector<optim::ParamGroup> whole_model_param_groups(const Config& config, const nn::Model& model);

// optim.name's optimizer over `groups`.
std::unique_ptr<optim::Optimizer> make_optimizer(const Config& config, std::vector<optim::ParamGroup> groups);

// The ZeRO reducer's options from the [parallel] section (the buckets and
// timeout as the plain reducer's; stage = parallel.zero).
parallel::ZeroOptions zero_options(const ParallelConfig& config);

}  // namespace gradmesh::train
