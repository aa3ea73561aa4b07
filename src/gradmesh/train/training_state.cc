#include "gradmesh/train/training_state.h"

#include <cstring>

#include "gradmesh/checkpoint/manifest.h"
#include "gradmesh/checkpoint/model_shards.h"
#include "gradmesh/checkpoint/optimizer_state.h"
#include "gradmesh/parallel/rank_agreement.h"
#include "gradmesh/config.h"
#include "gradmesh/core/error.h"
#include "gradmesh/train/optimizer_checkpoint.h"
#include "gradmesh/train/rank_setup.h"

namespace gradmesh::train {
namespace {

constexpr const char* kTrainerFile = "trainer.json";

checkpoint::TensorFile weights_file(const std::vector<std::pair<std::string, Tensor>>& named,
                                    const checkpoint::TrainerState& state) {
  checkpoint::TensorFile weights;
  weights.name = checkpoint::kModelFileName;
  weights.tensors = checkpoint::copy_tensors(named);
  weights.metadata = {{"format", "pt"}, {"producer", "gradmesh " GRADMESH_VERSION}, {"step", std::to_string(state.step)}};
  return weights;
}

checkpoint::TensorFile weights_file(const nn::Model& model, const checkpoint::TrainerState& state) {
  return weights_file(model.named_parameters(), state);
}

// Named views of a whole flat buffer laid out as `params`.
std::vector<std::pair<std::string, Tensor>> named_views(const std::vector<nn::ParameterInfo>& params,
                                                        const Tensor& flat) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const nn::ParameterInfo& p : params) out.emplace_back(p.name, flat.slice_flat(p.offset, p.shape));
  return out;
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

void restore_weights(const checkpoint::LoadedCheckpoint& loaded, nn::Model& model, bool others_allowed) {
  std::vector<std::pair<std::string, Tensor>> named;
  for (checkpoint::NamedTensor& t : checkpoint::read_model_weights(loaded)) named.emplace_back(t.name, t.tensor);
  const bool shards = checkpoint::has_model_shards(loaded);
  model.load_parameters(named, loaded.path + (shards ? " (model shards)" : std::string("/") + checkpoint::kModelFileName),
                        others_allowed);
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

std::vector<std::pair<std::string, Tensor>> whole_named_parameters(const parallel::WholeModelView& view,
                                                                   nn::Model& model) {
  return named_views(view.parameters(), view.assemble(model.flat_params()));
}

void restore_split_state(const checkpoint::LoadedCheckpoint& loaded, const parallel::WholeModelView& view,
                         nn::Model& model, optim::Optimizer& optimizer) {
  // A split parameter takes its piece of the whole tensor; a pipeline stage its parameters of the whole model.
  restore_weights(loaded, model, /*others_allowed=*/view.parameters().size() != model.parameters().size());
  const checkpoint::ConsolidatedOptimizerState whole = checkpoint::consolidate_optimizer_state(loaded, view.numel());
  const std::vector<optim::ParamGroup> groups = optimizer.groups();
  const std::vector<int64_t> positions = optimizer_state_positions(groups);
  if (whole.optimizer != optimizer.name())
    throw_error(ErrorKind::kFormat, loaded.path,
                "holds the state of optimizer '" + whole.optimizer + "', but this run uses optim.name = '" +
                    optimizer.name() + "'");
  for (auto& [name, buffer] : optimizer.state()) {
    if (name == "step") {
      buffer.copy_from(whole.step);
      continue;
    }
    const auto values = whole.values.find(pytorch_state_key(name));
    if (values == whole.values.end())
      throw_error(ErrorKind::kFormat, loaded.path,
                  "holds no '" + pytorch_state_key(name) + "' state, which optim.name = '" + optimizer.name() +
                      "' keeps");
    // This rank's pieces, laid out like its parameters, then cut along its
    // optimizer groups (all of them, or its ZeRO shard).
    Tensor local = Tensor::zeros({model.num_parameters()});
    view.take(values->second, local);
    for (size_t g = 0; g < groups.size(); ++g)
      std::memcpy(buffer.data() + positions[g], local.data() + groups[g].offset,
                  static_cast<size_t>(groups[g].count) * sizeof(float));
  }
}

bool resume_split_ranks(comm::ProcessGroup* world, const std::optional<checkpoint::LoadedCheckpoint>& loaded,
                        const parallel::WholeModelView& view, nn::Model& model, optim::Optimizer& optimizer,
                        checkpoint::TrainerState& state) {
  const std::string path = on_leader(world, [&]() -> std::string { return loaded ? loaded->path : ""; }, "resume");
  if (path.empty()) return false;
  on_every_rank(world, [&] {
    restore_split_state(world->rank() == 0 ? *loaded : checkpoint::reopen_checkpoint(path), view, model, optimizer);
  }, "resume from " + path);
  if (world->rank() == 0) state = loaded->trainer;
  const std::string text = parallel::broadcast_string(*world, checkpoint::trainer_state_json(state), 0);
  if (world->rank() != 0) state = checkpoint::parse_trainer_state(text, "trainer state from rank 0");
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
