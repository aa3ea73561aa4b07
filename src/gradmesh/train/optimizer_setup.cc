#include "gradmesh/train/optimizer_setup.h"

#include "gradmesh/train/rank_setup.h"

namespace gradmesh::train {

float weight_decay_of(const Config& config, const nn::ParameterInfo& param) {
  const auto decay = static_cast<float>(config.optim.weight_decay);
  if (config.model.kind != "gpt") return decay;
  return param.shape.size() >= 2 ? decay : 0.0f;
}

std::vector<optim::ParamGroup> whole_model_param_groups(const Config& config, const nn::Model& model) {
  std::vector<optim::ParamGroup> groups;
  for (const nn::ParameterInfo& p : model.parameters()) {
    const float wd = weight_decay_of(config, p);
    if (!groups.empty() && groups.back().weight_decay == wd) groups.back().count += p.numel;
    else groups.push_back({p.offset, p.numel, wd});
  }
  return groups;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Config& config, std::vector<optim::ParamGroup> groups) {
  const OptimConfig& c = config.optim;
  if (c.name == "adamw")
    return optim::make_adamw(std::move(groups),
                             {static_cast<float>(c.beta1), static_cast<float>(c.beta2), static_cast<float>(c.eps)});
  return optim::make_sgd(std::move(groups),
                         {static_cast<float>(c.momentum), static_cast<float>(c.dampening), c.nesterov});
}

parallel::ZeroOptions zero_options(const ParallelConfig& config) {
  const parallel::ReducerOptions plain = reducer_options(config);
  parallel::ZeroOptions o;
  o.stage = static_cast<int>(config.zero);
  o.bucket_bytes = plain.bucket_bytes;
  o.first_bucket_bytes = plain.first_bucket_bytes;
  o.overlap = plain.overlap;
  o.timeout = plain.timeout;
  return o;
}

}  // namespace gradmesh::train
