// Clocks: monotonic seconds for step timings and progress; Unix milliseconds
// for times shared between processes.
#pragma once

#include <chrono>
#include <cstdint>

namespace gradmesh {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Milliseconds since the Unix epoch: for times that other processes (or
// machines) compare, such as when a launcher saw a failure.
inline int64_t unix_millis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace gradmesh
