#include "gradmesh/train/training_state.h"

#include <cstring>
#include <map>

#include "gradmesh/config.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/text_format.h"
#include "gradmesh/parallel/rank_agreement.h"

namespace gradmesh::train {
namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kTrainerFile = "trainer.json";

// Our per-element state buffer name -> PyTorch's key inside state[i].
std::string pytorch_key(const std::string& ours) { return ours == "momentum" ? "momentum_buffer" : ours; }

std::string parameter_names(const nn::Model& model) {
  std::string names;
  for (const nn::ParameterInfo& p : model.parameters()) names += (names.empty() ? "" : ",") + p.name;
  return names;
}

}  // namespace

checkpoint::Snapshot take_snapshot(const nn::Model& model, optim::Optimizer& optimizer,
                                   const checkpoint::TrainerState& state) {
  checkpoint::Snapshot snapshot;
  snapshot.step = state.step;
  snapshot.world_size = state.world_size;

  checkpoint::TensorFile weights;
  weights.name = kModelFile;
  weights.tensors = checkpoint::copy_tensors(model.named_parameters());
  weights.metadata = {{"format", "pt"}, {"producer", "gradmesh " GRADMESH_VERSION}, {"step", std::to_string(state.step)}};

  checkpoint::TensorFile optim_file;
  optim_file.name = kOptimizerFile;
  optim_file.metadata = {{"format", "pt"}, {"optimizer", optimizer.name()}, {"param_names", parameter_names(model)}};
  const std::vector<nn::ParameterInfo>& params = model.parameters();
  for (auto& [name, buffer] : optimizer.state()) {
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string key = "state." + std::to_string(i) + "." + pytorch_key(name);
      // "step" is one counter for the whole buffer; PyTorch keeps one per parameter.
      Tensor piece = name == "step" ? buffer.clone()
                                    : buffer.slice_flat(params[i].offset, params[i].shape).clone();
      optim_file.tensors.push_back({key, std::move(piece)});
    }
  }
  snapshot.tensor_files.push_back(std::move(weights));
  snapshot.tensor_files.push_back(std::move(optim_file));
  snapshot.text_files.emplace_back(kTrainerFile, checkpoint::trainer_state_json(state));
  return snapshot;
}

void restore_state(const checkpoint::LoadedCheckpoint& loaded, nn::Model& model, optim::Optimizer& optimizer) {
  const checkpoint::SafetensorsFile weights = loaded.read_tensor_file(kModelFile);
  std::vector<std::pair<std::string, Tensor>> named;
  for (const checkpoint::NamedTensor& t : weights.tensors) named.emplace_back(t.name, t.tensor);
  const std::string weights_path = loaded.path + "/" + kModelFile;
  model.load_parameters(named, weights_path);

  const std::string optim_path = loaded.path + "/" + kOptimizerFile;
  const checkpoint::SafetensorsFile state = loaded.read_tensor_file(kOptimizerFile);
  const auto kind = state.metadata.find("optimizer");
  if (kind == state.metadata.end() || kind->second != optimizer.name())
    throw_error(ErrorKind::kFormat, optim_path,
                "holds the state of optimizer '" + (kind == state.metadata.end() ? "?" : kind->second) +
                    "', but this run uses optim.name = '" + optimizer.name() + "'");
  const std::vector<nn::ParameterInfo>& params = model.parameters();
  for (auto& [name, buffer] : optimizer.state()) {
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string key = "state." + std::to_string(i) + "." + pytorch_key(name);
      const Tensor* stored = state.find(key);
      Tensor target = name == "step" ? buffer : buffer.slice_flat(params[i].offset, params[i].shape);
      if (stored == nullptr)
        throw_error(ErrorKind::kFormat, optim_path, "tensor '" + key + "' (" + params[i].name + ") is missing");
      if (stored->dtype() != DType::kF32 || stored->shape() != target.shape())
        throw_error(ErrorKind::kFormat, optim_path,
                    "tensor '" + key + "' has dtype " + dtype_label(stored->dtype()) + " and " +
                        std::to_string(stored->numel()) + " elements; expected F32 with " +
                        std::to_string(target.numel()));
      std::memcpy(target.data(), stored->data(), static_cast<size_t>(target.numel()) * sizeof(float));
    }
  }
}

void broadcast_training_state(comm::ProcessGroup& group, int root, nn::Model& model, optim::Optimizer& optimizer,
                              checkpoint::TrainerState& state) {
  comm::BroadcastOptions options;
  options.root = root;
  group.broadcast(model.flat_params(), options)->wait_or_throw();
  for (auto& [name, buffer] : optimizer.state()) group.broadcast(buffer, options)->wait_or_throw();
  const std::string text = parallel::broadcast_string(group, checkpoint::trainer_state_json(state), root);
  if (group.rank() != root) state = checkpoint::parse_trainer_state(text, "trainer state from rank " + std::to_string(root));
}

}  // namespace gradmesh::train
