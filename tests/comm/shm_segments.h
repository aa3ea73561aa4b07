// Test support: shared-memory segments a test's groups left behind in /dev/shm.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gradmesh/comm/shm/segment.h"
#include "gradmesh/comm/store.h"

namespace gradmesh::comm::testing {

// Segments of groups that rendezvoused through `store` still present in /dev/shm.
inline std::vector<std::string> leftover_segments(const Store& store) {
  const std::string prefix = shm::segment_name_prefix(store.describe()).substr(1);
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) found.push_back(entry.path().filename());
  return found;
}

}  // namespace gradmesh::comm::testing
