#include "gradmesh/cli/model_source.h"

#include <filesystem>

#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/model_shards.h"
#include "gradmesh/core/error.h"

namespace gradmesh::cli {
namespace {

namespace fs = std::filesystem;

std::string step_of(const checkpoint::SafetensorsFile& file) {
  const auto it = file.metadata.find("step");
  return it == file.metadata.end() || it->second.empty() ? "1" : it->second;
}

}  // namespace

std::string find_run_config(const std::string& path) {
  fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  for (int up = 0; up < 4 && !dir.empty(); ++up, dir = dir.parent_path())
    if (fs::is_regular_file(dir / "config.toml")) return (dir / "config.toml").string();
  throw_error(ErrorKind::kConfig, path,
              "no config.toml in it or the directories above it, so the model's shape is unknown; pass --config");
}

ModelWeights read_model_weights_at(const std::string& path) {
  if (!fs::exists(path)) throw_error(ErrorKind::kIo, path, "does not exist");
  ModelWeights w;
  if (!fs::is_directory(path)) {
    w.file = checkpoint::read_safetensors(path);
    w.version = step_of(w.file);
    return w;
  }
  // A finished run's final weights, else its newest verified checkpoint.
  const fs::path final_weights = fs::path(path) / checkpoint::kModelFileName;
  if (fs::is_regular_file(final_weights) && !checkpoint::is_step_directory(path)) {
    w.file = checkpoint::read_safetensors(final_weights.string());
    w.version = step_of(w.file);
    return w;
  }
  const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(path);
  w.file.tensors = checkpoint::read_model_weights(loaded);  // whole or joined from shards
  w.version = std::to_string(loaded.step);
  return w;
}

std::string load_weights_at(const std::string& path, nn::Model& model, bool others_allowed) {
  ModelWeights weights = read_model_weights_at(path);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& t : weights.file.tensors) tensors.emplace_back(t.name, t.tensor);
  model.load_parameters(tensors, path, others_allowed);
  return weights.version;
}

}  // namespace gradmesh::cli
