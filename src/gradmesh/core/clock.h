// Monotonic wall time in seconds, for step timings and progress.
#pragma once

#include <chrono>

namespace gradmesh {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace gradmesh
