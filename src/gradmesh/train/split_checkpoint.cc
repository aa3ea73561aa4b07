#include "gradmesh/train/split_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "gradmesh/checkpoint/model_shards.h"
#include "gradmesh/checkpoint/optimizer_state.h"
#include "gradmesh/config.h"
#include "gradmesh/train/optimizer_checkpoint.h"

namespace gradmesh::train {
namespace {

// `count` elements: at `whole` in the whole model, `local` in the rank's
// flat parameters, `state` in its optimizer state buffers.
struct SavedPiece {
  int64_t whole, local, state, count;
};

// The provided segments cut along the optimizer's groups, in whole-model order.
std::vector<SavedPiece> saved_pieces(const parallel::WholeModelView& view, const optim::Optimizer& optimizer) {
  const std::vector<optim::ParamGroup> groups = optimizer.groups();
  const std::vector<int64_t> positions = optimizer_state_positions(groups);
  std::vector<size_t> order(groups.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return groups[a].offset < groups[b].offset; });
  std::vector<SavedPiece> pieces;
  for (const parallel::ViewSegment& s : view.provided_segments()) {
    for (size_t g : order) {
      const int64_t lo = std::max(s.local, groups[g].offset);
      const int64_t hi = std::min(s.local + s.count, groups[g].offset + groups[g].count);
      if (lo < hi) pieces.push_back({s.whole + (lo - s.local), lo, positions[g] + (lo - groups[g].offset), hi - lo});
    }
  }
  std::sort(pieces.begin(), pieces.end(), [](const SavedPiece& a, const SavedPiece& b) { return a.whole < b.whole; });
  return pieces;
}

// The pieces' elements of `source` (at `local` or `state`), back to back.
Tensor gather(const std::vector<SavedPiece>& pieces, const float* source, int64_t SavedPiece::*at, int64_t total) {
  Tensor out = Tensor::empty({total});
  float* to = out.data();
  for (const SavedPiece& p : pieces) {
    std::memcpy(to, source + p.*at, static_cast<size_t>(p.count) * sizeof(float));
    to += p.count;
  }
  return out;
}

}  // namespace

int split_checkpoint_writers(const checkpoint::SavedLayout& layout) {
  return layout.pp * layout.tp * (layout.zero > 0 ? layout.dp : 1);
}

bool writes_split_checkpoint(const checkpoint::SavedLayout& layout, int dp_rank) {
  return layout.zero > 0 || dp_rank == 0;
}

checkpoint::Snapshot take_split_snapshot(const parallel::WholeModelView& view, nn::Model& model,
                                         optim::Optimizer& optimizer, const checkpoint::TrainerState& state,
                                         const SplitSave& save) {
  const std::vector<SavedPiece> pieces = saved_pieces(view, optimizer);
  std::vector<checkpoint::ElementRange> ranges;
  int64_t total = 0;
  for (const SavedPiece& p : pieces) {
    total += p.count;
    if (!ranges.empty() && ranges.back().begin + ranges.back().count == p.whole) ranges.back().count += p.count;
    else ranges.push_back({p.whole, p.count});
  }
  std::vector<std::pair<std::string, Shape>> params;
  for (const nn::ParameterInfo& p : view.parameters()) params.emplace_back(p.name, p.shape);
  checkpoint::Snapshot snapshot;
  snapshot.step = state.step;
  snapshot.world_size = state.world_size;
  snapshot.tensor_files.push_back(checkpoint::model_shard_file(
      save.index + 1, save.count, save.index, ranges,
      gather(pieces, model.flat_params().data(), &SavedPiece::local, total), params,
      {{"format", "pt"}, {"producer", "gradmesh " GRADMESH_VERSION}, {"step", std::to_string(state.step)}}));
  Tensor step;
  std::vector<std::pair<std::string, Tensor>> buffers;
  for (auto& [name, buffer] : optimizer.state()) {
    if (name == "step") step = buffer;
    else buffers.emplace_back(pytorch_state_key(name), gather(pieces, buffer.data(), &SavedPiece::state, total));
  }
  snapshot.tensor_files.push_back(checkpoint::optimizer_shard_file(
      save.index, save.count, ranges, buffers, step,
      {{"format", "pt"},
       {"optimizer", optimizer.name()},
       {"param_names", parameter_names_text(view.parameters())},
       {"zero_stage", std::to_string(save.layout.zero)},
       {"world_size", std::to_string(state.world_size)},
       {"rank", std::to_string(save.index)}}));
  snapshot.is_part = save.index != 0;
  if (save.index == 0) {
    snapshot.layout = save.layout;
    snapshot.text_files.emplace_back(checkpoint::kTrainerStateFileName, checkpoint::trainer_state_json(state));
    for (int i = 2; i <= save.count; ++i)
      for (const char* of : {checkpoint::kModelShardOf, checkpoint::kOptimizerShardOf})
        snapshot.parts_from_others.push_back(checkpoint::shard_file_name(of, i, save.count));
  }
  return snapshot;
}

}  // namespace gradmesh::train
