#include "gradmesh/comm/environment.h"

#include <cstdint>
#include <cstdlib>
#include <optional>

#include "gradmesh/comm/mpi/process_group.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm {
namespace {

// Ranks, sizes and generations: non-negative, and small enough for an int.
constexpr int64_t kMaxValue = 1'000'000;

int int_var(const char* name, int fallback, bool required) {
  const std::optional<int64_t> value = env_int(name, 0, kMaxValue);
  if (!value && required)
    throw_error(ErrorKind::kUsage, std::string("environment variable ") + name,
                "not set; start workers with gradmesh launch (or mpirun)");
  return value ? static_cast<int>(*value) : fallback;
}

}  // namespace

bool launched_as_worker() {
  return (std::getenv("RANK") != nullptr && std::getenv("WORLD_SIZE") != nullptr) || launched_by_mpi();
}

WorkerEnvironment read_worker_environment() {
  WorkerEnvironment env;
  if (std::getenv("RANK") == nullptr && launched_by_mpi()) {
    env.rank = int_var("OMPI_COMM_WORLD_RANK", 0, false);
    env.world_size = int_var("OMPI_COMM_WORLD_SIZE", 1, false);
    env.local_rank = int_var("OMPI_COMM_WORLD_LOCAL_RANK", 0, false);
    env.local_world_size = int_var("OMPI_COMM_WORLD_LOCAL_SIZE", env.world_size, false);
    return env;
  }
  env.rank = int_var("RANK", 0, true);
  env.world_size = int_var("WORLD_SIZE", 1, true);
  env.local_rank = int_var("LOCAL_RANK", env.rank, false);
  env.local_world_size = int_var("LOCAL_WORLD_SIZE", env.world_size, false);
  env.generation = int_var("GRADMESH_GENERATION", 0, false);
  env.store_endpoint = env_string("GRADMESH_STORE");
  env.run_id = env_string("GRADMESH_RUN_ID");
  if (env.world_size < 1 || env.rank >= env.world_size)
    throw_error(ErrorKind::kUsage, "environment", "RANK " + std::to_string(env.rank) + " outside WORLD_SIZE " +
                                                      std::to_string(env.world_size));
  if (env.store_endpoint.empty() && env.world_size > 1)
    throw_error(ErrorKind::kUsage, "environment variable GRADMESH_STORE",
                "not set; start workers with gradmesh launch, which sets it");
  return env;
}

std::shared_ptr<ProcessGroup> init_process_group_from_environment(const ProcessGroupOptions& options) {
  return init_process_group(read_worker_environment(), options);
}

std::shared_ptr<ProcessGroup> init_process_group(const WorkerEnvironment& env, const ProcessGroupOptions& options) {
  ProcessGroupOptions resolved = options;
  resolved.local_rank = env.local_rank;
  resolved.local_size = env.local_world_size;
  std::shared_ptr<Store> store;
  if (!env.store_endpoint.empty()) {
    store = std::make_shared<PrefixStore>(open_store(env.store_endpoint),
                                          (env.run_id.empty() ? "run" : env.run_id) + "/" +
                                              std::to_string(env.generation));
  }
  return create_process_group(store, env.rank, env.world_size, resolved);
}

}  // namespace gradmesh::comm
