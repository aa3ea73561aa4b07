// The environment contract between the launcher and each worker.
//
// A worker sees the launcher's environment plus these variables (the torchrun
// names, so a PyTorch script runs unchanged, and GRADMESH_* for our own
// process groups). docs/launch.md has the table; change both together.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gradmesh/elastic/rank_assignment.h"

namespace gradmesh::elastic {

struct RunIdentity {
  std::string run_id;          // TORCHELASTIC_RUN_ID, GRADMESH_RUN_ID
  std::string store_endpoint;  // GRADMESH_STORE
  int generation = 0;          // GRADMESH_GENERATION, TORCHELASTIC_RESTART_COUNT
  int max_restarts = 0;        // TORCHELASTIC_MAX_RESTARTS
  bool replacement = false;    // GRADMESH_REPLACEMENT: replaces a failed worker in place
};

using EnvVars = std::vector<std::pair<std::string, std::string>>;

// The variables for local rank `local_rank` of this node.
// REQUIRES: 0 <= local_rank < assignment.local_world_size.
EnvVars worker_variables(const RankAssignment& assignment, int local_rank, const RunIdentity& run);

// `base` ("NAME=value" entries, e.g. from environ) without the names that
// `vars` sets, followed by `vars` in order: each name appears exactly once.
std::vector<std::string> merge_environment(const std::vector<std::string>& base, const EnvVars& vars);

// This process's environment as "NAME=value" entries.
std::vector<std::string> current_environment();

}  // namespace gradmesh::elastic
