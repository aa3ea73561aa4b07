#include "gradmesh/checkpoint/snapshot.h"

namespace gradmesh::checkpoint {

std::vector<NamedTensor> copy_tensors(const std::vector<std::pair<std::string, Tensor>>& views) {
  std::vector<NamedTensor> copies;
  copies.reserve(views.size());
  for (const auto& [name, view] : views) copies.push_back({name, view.clone()});
  return copies;
}

int64_t snapshot_tensor_bytes(const Snapshot& snapshot) {
  int64_t bytes = 0;
  for (const TensorFile& file : snapshot.tensor_files)
    for (const NamedTensor& named : file.tensors) bytes += static_cast<int64_t>(named.tensor.nbytes());
  return bytes;
}

}  // namespace gradmesh::checkpoint
