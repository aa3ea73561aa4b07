// Test support shared by the convolution kernel tests: random inputs from the
// counter-based RNG, sizes and a readable name for a geometry.
#pragma once

#include <string>
#include <vector>

#include "gradmesh/core/rng.h"
#include "gradmesh/kernels/conv.h"

namespace gradmesh::kernels::testing {

// n values in [-1, 1), the same for every (seed, step).
inline std::vector<float> random_values(int64_t n, uint64_t step, uint64_t seed = 23) {
  const CounterRng rng(seed, RngPurpose::kTest, step);
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 2.0f * rng.uniform(i) - 1.0f;
  return v;
}

inline int64_t input_numel(const ConvGeometry& g) { return g.batch * g.in_channels * g.height * g.width; }
inline int64_t output_numel(const ConvGeometry& g) { return g.batch * g.out_channels * g.out_h() * g.out_w(); }

inline std::string describe(const ConvGeometry& g) {
  return "N=" + std::to_string(g.batch) + " C=" + std::to_string(g.in_channels) + " H=" + std::to_string(g.height) +
         " W=" + std::to_string(g.width) + " OC=" + std::to_string(g.out_channels) + " K=" +
         std::to_string(g.kernel_h) + "x" + std::to_string(g.kernel_w) + " stride=" + std::to_string(g.stride) +
         " padding=" + std::to_string(g.padding);
}

}  // namespace gradmesh::kernels::testing
