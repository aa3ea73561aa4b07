// Test support for the kernel tests: a quiet NaN to fill outputs and padding
// with, so that a missed write or a read of padding poisons the result.
#pragma once

#include <limits>

namespace gradmesh::kernels::testing {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace gradmesh::kernels::testing
