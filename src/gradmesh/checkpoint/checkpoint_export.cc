#include "gradmesh/checkpoint/checkpoint_export.h"

#include <map>

#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/model_shards.h"
#include "gradmesh/checkpoint/optimizer_state.h"
#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/config.h"
#include "gradmesh/core/error.h"

namespace gradmesh::checkpoint {
namespace {


// The consolidated per-element state cut per parameter, in PyTorch's names.
std::vector<NamedTensor> per_parameter_state(const ConsolidatedOptimizerState& state, const SafetensorsFile& weights,
                                             const std::string& source) {
  std::map<std::string, const Tensor*> by_name;
  for (const NamedTensor& t : weights.tensors) by_name[t.name] = &t.tensor;
  std::vector<std::string> names = state.param_names;
  if (names.empty())
    for (const NamedTensor& t : weights.tensors) names.push_back(t.name);
  // The order optimizer.safetensors has: the step counters, then each state buffer.
  std::vector<NamedTensor> out;
  for (size_t i = 0; i < names.size(); ++i) out.push_back({"state." + std::to_string(i) + ".step", state.step});
  for (const auto& [key, values] : state.values) {
    int64_t offset = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      const auto it = by_name.find(names[i]);
      if (it == by_name.end())
        throw_error(ErrorKind::kFormat, source,
                    "the optimizer state names parameter '" + names[i] + "', which " + kModelFileName + " does not hold");
      const Shape& shape = it->second->shape();
      out.push_back({"state." + std::to_string(i) + "." + key, values.slice_flat(offset, shape)});
      offset += it->second->numel();
    }
  }
  return out;
}

}  // namespace

std::string optimizer_export_path(const std::string& output) {
  const std::string suffix = ".safetensors";
  const bool has_suffix = output.size() > suffix.size() &&
                          output.compare(output.size() - suffix.size(), suffix.size(), suffix) == 0;
  return (has_suffix ? output.substr(0, output.size() - suffix.size()) : output) + ".optimizer" + suffix;
}

ExportResult export_checkpoint(const std::string& checkpoint_path, const std::string& output, bool with_optimizer) {
  const LoadedCheckpoint loaded = load_checkpoint(checkpoint_path);
  ExportResult r;
  r.checkpoint = loaded.path;
  r.step = loaded.step;
  SafetensorsFile weights;
  weights.tensors = read_model_weights(loaded);  // whole, or joined from the shards of a split run
  const std::map<std::string, std::string> metadata{{"format", "pt"},
                                                    {"producer", "gradmesh " GRADMESH_VERSION},
                                                    {"step", std::to_string(loaded.step)},
                                                    {"source", loaded.path}};
  r.weights_path = output;
  r.weights_tensors = static_cast<int64_t>(weights.tensors.size());
  write_safetensors(output, weights.tensors, metadata);
  if (!with_optimizer) return r;
  int64_t numel = 0;
  for (const NamedTensor& t : weights.tensors) numel += t.tensor.numel();
  const ConsolidatedOptimizerState state = consolidate_optimizer_state(loaded, numel);
  std::map<std::string, std::string> optimizer_metadata = metadata;
  optimizer_metadata["optimizer"] = state.optimizer;
  std::string names;
  for (const std::string& n : state.param_names) names += (names.empty() ? "" : ",") + n;
  optimizer_metadata["param_names"] = names;
  const std::vector<NamedTensor> tensors = per_parameter_state(state, weights, loaded.path);
  r.optimizer_path = optimizer_export_path(output);
  r.optimizer_tensors = static_cast<int64_t>(tensors.size());
  write_safetensors(r.optimizer_path, tensors, optimizer_metadata);
  return r;
}

}  // namespace gradmesh::checkpoint
