// Test support for the parallel tests: a model's parameter list given only
// the parameters' sizes, for planning buckets and shards without a model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gradmesh/nn/model.h"

namespace gradmesh::parallel::testing {

// Parameters "p0", "p1", ... of shape [numels[i]], laid out back to back in the flat buffer.
inline std::vector<nn::ParameterInfo> params_of_sizes(const std::vector<int64_t>& numels) {
  std::vector<nn::ParameterInfo> out;
  int64_t offset = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    out.push_back({"p" + std::to_string(i), {numels[i]}, offset, numels[i]});
    offset += numels[i];
  }
  return out;
}

}  // namespace gradmesh::parallel::testing
