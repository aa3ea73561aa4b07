#include "gradmesh/train/optimizer_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "gradmesh/checkpoint/optimizer_state.h"
#include "gradmesh/core/error.h"

namespace gradmesh::train {
namespace {

std::string parameter_names(const nn::Model& model) { return parameter_names_text(model.parameters()); }

// Copies the stored elements of `pieces` (ascending) that fall in `groups`
// (ascending) into `buffer`, laid out as the optimizer lays out its state.
void cut_into(const std::vector<checkpoint::StatePiece>& pieces, const std::vector<optim::ParamGroup>& groups,
              const std::vector<int64_t>& positions, float* buffer) {
  size_t first = 0;
  for (const checkpoint::StatePiece& piece : pieces) {
    const int64_t begin = piece.begin, end = begin + piece.values.numel();
    while (first < groups.size() && groups[first].offset + groups[first].count <= begin) ++first;
    for (size_t g = first; g < groups.size() && groups[g].offset < end; ++g) {
      const int64_t lo = std::max(begin, groups[g].offset), hi = std::min(end, groups[g].offset + groups[g].count);
      if (lo >= hi) continue;
      std::memcpy(buffer + positions[g] + (lo - groups[g].offset), piece.values.data() + (lo - begin),
                  static_cast<size_t>(hi - lo) * sizeof(float));
    }
  }
}

}  // namespace

std::string parameter_names_text(const std::vector<nn::ParameterInfo>& params) {
  std::string names;
  for (const nn::ParameterInfo& p : params) names += (names.empty() ? "" : ",") + p.name;
  return names;
}

std::vector<int64_t> optimizer_state_positions(const std::vector<optim::ParamGroup>& groups) {
  std::vector<int64_t> positions;
  int64_t at = 0;
  for (const optim::ParamGroup& g : groups) {
    positions.push_back(at);
    at += g.count;
  }
  return positions;
}

std::string pytorch_state_key(const std::string& ours) { return ours == "momentum" ? "momentum_buffer" : ours; }

checkpoint::TensorFile whole_optimizer_file(const nn::Model& model, optim::Optimizer& optimizer) {
  return whole_optimizer_file(model.parameters(), optimizer.state(), optimizer.name());
}

checkpoint::TensorFile whole_optimizer_file(const std::vector<nn::ParameterInfo>& params,
                                            const std::vector<std::pair<std::string, Tensor>>& state,
                                            const std::string& optimizer_name) {
  checkpoint::TensorFile file;
  file.name = checkpoint::kOptimizerFileName;
  file.metadata = {{"format", "pt"}, {"optimizer", optimizer_name}, {"param_names", parameter_names_text(params)}};
  for (const auto& [name, buffer] : state) {
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string key = "state." + std::to_string(i) + "." + pytorch_state_key(name);
      // "step" is one counter for the whole buffer; PyTorch keeps one per parameter.
      Tensor piece = name == "step" ? buffer.clone() : buffer.slice_flat(params[i].offset, params[i].shape).clone();
      file.tensors.push_back({key, std::move(piece)});
    }
  }
  return file;
}

checkpoint::TensorFile optimizer_shard_file(const nn::Model& model, optim::Optimizer& optimizer, int rank,
                                            int world_size, int zero_stage) {
  std::vector<checkpoint::ElementRange> ranges;
  for (const optim::ParamGroup& g : optimizer.groups()) {
    if (g.count == 0) continue;
    if (!ranges.empty() && ranges.back().begin + ranges.back().count == g.offset) ranges.back().count += g.count;
    else ranges.push_back({g.offset, g.count});
  }
  Tensor step;
  std::vector<std::pair<std::string, Tensor>> buffers;
  for (auto& [name, buffer] : optimizer.state()) {
    if (name == "step") step = buffer;
    else buffers.emplace_back(pytorch_state_key(name), buffer);
  }
  return checkpoint::optimizer_shard_file(rank, world_size, ranges, buffers, step,
                                          {{"format", "pt"},
                                           {"optimizer", optimizer.name()},
                                           {"param_names", parameter_names(model)},
                                           {"zero_stage", std::to_string(zero_stage)},
                                           {"world_size", std::to_string(world_size)},
                                           {"rank", std::to_string(rank)}});
}

void restore_optimizer(const checkpoint::LoadedCheckpoint& loaded, const nn::Model& model,
                       optim::Optimizer& optimizer) {
  std::vector<optim::ParamGroup> groups = optimizer.groups();
  const std::vector<int64_t> positions = optimizer_state_positions(groups);
  GRADMESH_CHECK(std::is_sorted(groups.begin(), groups.end(),
                                [](const optim::ParamGroup& a, const optim::ParamGroup& b) { return a.offset < b.offset; }),
                 "optimizer groups are in flat-buffer order");
  std::vector<std::pair<std::string, Tensor>> state = optimizer.state();
  std::map<std::string, std::vector<checkpoint::ElementRange>> stored;
  bool first = true;
  for (const std::string& file : checkpoint::optimizer_state_files(loaded)) {
    const checkpoint::StoredOptimizerState s = checkpoint::read_optimizer_state(loaded, file);
    if (s.optimizer != optimizer.name())
      throw_error(ErrorKind::kFormat, s.source,
                  "holds the state of optimizer '" + s.optimizer + "', but this run uses optim.name = '" +
                      optimizer.name() + "'");
    for (auto& [name, buffer] : state) {
      if (name == "step") {
        if (first) std::memcpy(buffer.data(), s.step.data(), sizeof(float));
        continue;
      }
      const std::string key = pytorch_state_key(name);
      const auto pieces = s.pieces.find(key);
      if (pieces == s.pieces.end())
        throw_error(ErrorKind::kFormat, s.source,
                    "holds no '" + key + "' state, which optim.name = '" + optimizer.name() + "' keeps");
      for (const checkpoint::StatePiece& p : pieces->second) stored[key].push_back({p.begin, p.values.numel()});
      cut_into(pieces->second, groups, positions, buffer.data());
    }
    first = false;
  }
  // Every element of the model once: else some of this rank's state was never written.
  for (auto& [key, ranges] : stored)
    checkpoint::check_ranges_tile(std::move(ranges), model.num_parameters(),
                                  loaded.path + ": optimizer state '" + key + "'");
}

}  // namespace gradmesh::train
