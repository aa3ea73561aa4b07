#include "gradmesh/train/communication_state.h"

#include <cstring>
#include <utility>
#include <vector>

#include "gradmesh/core/error.h"

namespace gradmesh::train {

namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

constexpr const char* kErrorPrefix = "error.";

// PowerSGD's state split into this rank's errors and the shared Q, in state() order.
std::pair<Named, Named> split_powersgd(const parallel::PowerSgdCompressor& c) {
  std::pair<Named, Named> out;
  for (auto& [name, t] : c.state()) (name.starts_with(kErrorPrefix) ? out.first : out.second).emplace_back(name, t);
  return out;
}

int64_t total_numel(const Named& named) {
  int64_t n = 0;
  for (const auto& [name, t] : named) n += t.numel();
  return n;
}

std::string error_name(int rank, const std::string& error) { return "powersgd.rank" + std::to_string(rank) + "." + error; }

}  // namespace

std::optional<checkpoint::TensorFile> gather_communication_state(comm::ProcessGroup& group,
                                                                 const parallel::PowerSgdCompressor* powersgd,
                                                                 const parallel::LocalSgd* local) {
  Named views;
  std::vector<Tensor> keep;  // the gathered errors outlive copy_tensors below
  if (powersgd != nullptr) {
    auto [errors, qs] = split_powersgd(*powersgd);
    const int64_t mine = total_numel(errors);
    Tensor in = Tensor::empty({mine}), all = Tensor::empty({mine * group.size()});
    int64_t at = 0;
    for (const auto& [name, t] : errors) {
      std::memcpy(in.data() + at, t.data(), static_cast<size_t>(t.numel()) * sizeof(float));
      at += t.numel();
    }
    group.allgather(in, all)->wait_or_throw();
    keep.push_back(all);
    if (group.rank() == 0) {
      for (int r = 0; r < group.size(); ++r) {
        at = mine * r;
        for (const auto& [name, t] : errors) {
          views.emplace_back(error_name(r, name), all.slice_flat(at, t.shape()));
          at += t.numel();
        }
      }
      for (const auto& [name, t] : qs) views.emplace_back("powersgd." + name, t);
    }
  }
  if (group.rank() != 0) return std::nullopt;
  if (local != nullptr)
    for (const auto& [name, t] : local->state()) views.emplace_back(std::string("local_sgd.") + name, t);
  checkpoint::TensorFile file;
  file.name = kCommunicationFile;
  file.tensors = checkpoint::copy_tensors(views);
  file.metadata["world_size"] = std::to_string(group.size());
  return file;
}

std::string restore_communication_state(comm::ProcessGroup& group,
                                        const std::optional<checkpoint::LoadedCheckpoint>& loaded,
                                        parallel::PowerSgdCompressor* powersgd, parallel::LocalSgd* local) {
  Named errors, qs, momentum;
  if (powersgd != nullptr) std::tie(errors, qs) = split_powersgd(*powersgd);
  if (local != nullptr) momentum = local->state();
  const int64_t mine = total_numel(errors), world = group.size();
  // [1 flag | every rank's errors | Q | outer momentum]: rank 0 fills it, everyone takes their part.
  Tensor flat = Tensor::zeros({1 + mine * world + total_numel(qs) + total_numel(momentum)});
  std::string why;
  if (group.rank() == 0) {
    try {
      if (!loaded) throw_error(ErrorKind::kFormat, "checkpoint", "none was loaded");
      const checkpoint::SafetensorsFile file = loaded->read_tensor_file(kCommunicationFile);
      const auto saved_world = file.metadata.find("world_size");
      if (saved_world == file.metadata.end() || saved_world->second != std::to_string(world))
        throw_error(ErrorKind::kFormat, kCommunicationFile,
                    "was written by a world of " + (saved_world == file.metadata.end() ? "?" : saved_world->second) +
                        " ranks, this one has " + std::to_string(world));
      float* out = flat.data() + 1;
      auto take = [&](const std::string& name, const Tensor& like) {
        const Tensor* t = file.find(name);
        if (t == nullptr) throw_error(ErrorKind::kFormat, kCommunicationFile, "has no tensor " + name);
        if (t->dtype() != DType::kF32 || t->shape() != like.shape())
          throw_error(ErrorKind::kFormat, kCommunicationFile,
                      name + ": expected float32 " + shape_str(like.shape()) + ", got " + shape_str(t->shape()));
        std::memcpy(out, t->data(), static_cast<size_t>(t->numel()) * sizeof(float));
        out += t->numel();
      };
      for (int r = 0; r < world; ++r)
        for (const auto& [name, t] : errors) take(error_name(r, name), t);
      for (const auto& [name, t] : qs) take("powersgd." + name, t);
      for (const auto& [name, t] : momentum) take(std::string("local_sgd.") + name, t);
      flat.data()[0] = 1;
    } catch (const std::exception& e) {
      why = e.what();  // any failure: the other ranks are waiting in the broadcast below
    }
  }
  group.broadcast(flat)->wait_or_throw();
  if (flat.data()[0] != 1) {
    if (local != nullptr) local->reset_outer();
    // Rank 0 knows why (it read the file); the others only that it did not restore.
    return "the PowerSGD / local-SGD state starts fresh: " + (why.empty() ? std::string("rank 0 could not restore it") : why);
  }
  int64_t at = 1 + mine * group.rank();
  Named restored;
  for (const auto& [name, t] : errors) {
    restored.emplace_back(name, flat.slice_flat(at, t.shape()));
    at += t.numel();
  }
  at = 1 + mine * world;
  for (const auto& [name, t] : qs) {
    restored.emplace_back(name, flat.slice_flat(at, t.shape()));
    at += t.numel();
  }
  if (powersgd != nullptr) powersgd->load_state(restored);
  Named outer;
  for (const auto& [name, t] : momentum) {
    outer.emplace_back(name, flat.slice_flat(at, t.shape()));
    at += t.numel();
  }
  if (local != nullptr) local->load_state(outer);
  return "";
}

}  // namespace gradmesh::train
