#include "gradmesh/train/training_state.h"

#include "gradmesh/checkpoint/manifest.h"
#include "gradmesh/checkpoint/optimizer_state.h"
#include "gradmesh/parallel/rank_agreement.h"
#include "gradmesh/config.h"
#include "gradmesh/train/optimizer_checkpoint.h"
#include "gradmesh/train/rank_setup.h"

namespace gradmesh::train {
namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kTrainerFile = "trainer.json";

checkpoint::TensorFile weights_file(const nn::Model& model, const checkpoint::TrainerState& state) {
  checkpoint::TensorFile weights;
  weights.name = kModelFile;
  weights.tensors = checkpoint::copy_tensors(model.named_parameters());
  weights.metadata = {{"format", "pt"}, {"producer", "gradmesh " GRADMESH_VERSION}, {"step", std::to_string(state.step)}};
  return weights;
}

}  // namespace

checkpoint::Snapshot take_snapshot(const nn::Model& model, optim::Optimizer& optimizer,
                                   const checkpoint::TrainerState& state) {
  checkpoint::Snapshot snapshot;
  snapshot.step = state.step;
  snapshot.world_size = state.world_size;
  snapshot.tensor_files.push_back(weights_file(model, state));
  snapshot.tensor_files.push_back(whole_optimizer_file(model, optimizer));
  snapshot.text_files.emplace_back(kTrainerFile, checkpoint::trainer_state_json(state));
  return snapshot;
}

checkpoint::Snapshot take_sharded_snapshot(const nn::Model& model, optim::Optimizer& optimizer,
                                           const checkpoint::TrainerState& state, int rank, int world_size) {
  checkpoint::Snapshot snapshot;
  snapshot.step = state.step;
  snapshot.world_size = world_size;
  snapshot.is_part = rank != 0;
  if (rank == 0) {
    snapshot.tensor_files.push_back(weights_file(model, state));
    snapshot.text_files.emplace_back(kTrainerFile, checkpoint::trainer_state_json(state));
    for (int r = 1; r < world_size; ++r)
      snapshot.parts_from_others.push_back(checkpoint::shard_file_name(checkpoint::kOptimizerShardOf, r + 1, world_size));
  }
  snapshot.tensor_files.push_back(optimizer_shard_file(model, optimizer, rank, world_size, state.zero_stage));
  return snapshot;
}

void restore_weights(const checkpoint::LoadedCheckpoint& loaded, nn::Model& model) {
  const checkpoint::SafetensorsFile weights = loaded.read_tensor_file(kModelFile);
  std::vector<std::pair<std::string, Tensor>> named;
  for (const checkpoint::NamedTensor& t : weights.tensors) named.emplace_back(t.name, t.tensor);
  model.load_parameters(named, loaded.path + "/" + kModelFile);
}

void restore_state(const checkpoint::LoadedCheckpoint& loaded, nn::Model& model, optim::Optimizer& optimizer) {
  restore_weights(loaded, model);
  restore_optimizer(loaded, model, optimizer);
}

bool resume_ranks(comm::ProcessGroup* group, const std::optional<checkpoint::LoadedCheckpoint>& loaded,
                  nn::Model& model, optim::Optimizer& optimizer, bool sharded, checkpoint::TrainerState& state) {
  const std::string path = on_leader(group, [&]() -> std::string {
    if (!loaded) return "";
    restore_state(*loaded, model, optimizer);
    state = loaded->trainer;
    return loaded->path;
  }, "resume");
  if (path.empty()) return false;
  if (!multi_rank(group)) return true;
  broadcast_training_state(*group, 0, model, sharded ? nullptr : &optimizer, state);
  if (sharded)
    on_every_rank(group, [&] {
      if (group->rank() != 0) restore_optimizer(checkpoint::reopen_checkpoint(path), model, optimizer);
    }, "resume from " + path);
  return true;
}

void broadcast_training_state(comm::ProcessGroup& group, int root, nn::Model& model, optim::Optimizer* optimizer,
                              checkpoint::TrainerState& state) {
  comm::BroadcastOptions options;
  options.root = root;
  group.broadcast(model.flat_params(), options)->wait_or_throw();
  if (optimizer)
    for (auto& [name, buffer] : optimizer->state()) group.broadcast(buffer, options)->wait_or_throw();
  const std::string text = parallel::broadcast_string(group, checkpoint::trainer_state_json(state), root);
  if (group.rank() != root) state = checkpoint::parse_trainer_state(text, "trainer state from rank " + std::to_string(root));
}

}  // namespace gradmesh::train
