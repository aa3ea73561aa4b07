// Test support: the weights a training run saved, and how close two runs are.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "gradmesh/checkpoint/safetensors.h"

namespace gradmesh::testing {

// Every tensor of a safetensors file, concatenated in file order.
inline std::vector<float> weights_of(const std::string& path) {
  std::vector<float> flat;
  for (const auto& t : checkpoint::read_safetensors(path).tensors) {
    const std::vector<float> v = t.tensor.to_vector();
    flat.insert(flat.end(), v.begin(), v.end());
  }
  return flat;
}

// max |a - b| / max |b|: runs whose only difference is how a global batch was
// split sum in a different order, so they agree to rounding, not bit for bit.
inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || b.empty()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

}  // namespace gradmesh::testing
