// The one registry of process-group backends: which exist, and which `auto` picks.
#include <cstdlib>
#include <string>

#include "gradmesh/comm/checked_process_group.h"
#include "gradmesh/comm/gloo/process_group.h"
#include "gradmesh/comm/hier/process_group.h"
#include "gradmesh/comm/mpi/process_group.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm {
namespace {

constexpr const char* kBackends = "shm, gloo, hier, mpi (or auto)";

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  if (*end != '\0' || parsed < 0 || parsed > 1'000'000)
    throw_error(ErrorKind::kUsage, std::string("environment variable ") + name,
                "expected a non-negative integer, got '" + std::string(value) + "'");
  return static_cast<int>(parsed);
}

// auto: mpi under mpirun; shm when every rank shares this host; hier when hosts
// hold several ranks each; gloo with one rank per host.
std::string pick_backend(const std::string& requested, int size, int local_size) {
  if (requested != "auto") return requested;
  if (launched_by_mpi()) return "mpi";
  if (local_size >= size) return "shm";
  return local_size > 1 ? "hier" : "gloo";
}

}  // namespace

std::shared_ptr<ProcessGroup> create_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                   const ProcessGroupOptions& options) {
  if (size < 1 || rank < 0 || rank >= size)
    throw_error(ErrorKind::kUsage, "process group",
                "rank " + std::to_string(rank) + " outside a world of " + std::to_string(size));
  const int local_size = options.local_size >= 0 ? options.local_size : env_int("LOCAL_WORLD_SIZE", size);
  const int local_rank = options.local_rank >= 0 ? options.local_rank : env_int("LOCAL_RANK", rank % local_size);
  ProcessGroupOptions resolved = options;
  if (resolved.timeout == kDefaultTimeout) resolved.timeout = Millis{int64_t{1000} * env_int("GRADMESH_COMM_TIMEOUT", 300)};
  std::string requested = options.backend;
  if (requested == "auto") requested = env_string("GRADMESH_BACKEND");
  const std::string backend = pick_backend(requested, size, local_size);

  std::shared_ptr<ProcessGroup> group;
  if (backend == "shm") {
    if (local_size < size)
      throw_error(ErrorKind::kUsage, "backend shm",
                  "needs every rank on one host, but LOCAL_WORLD_SIZE is " + std::to_string(local_size) + " of " +
                      std::to_string(size) + " ranks; use hier or gloo");
    group = make_shm_process_group(store, rank, size, resolved.timeout);
  } else if (backend == "gloo") {
    group = make_gloo_process_group(store, rank, size, resolved);
  } else if (backend == "hier") {
    group = make_hier_process_group(store, rank, size, local_rank, local_size, resolved);
  } else if (backend == "mpi") {
    group = make_mpi_process_group(resolved.timeout);
  } else {
    throw_error(ErrorKind::kUsage, "backend '" + backend + "'", std::string("unknown; built in: ") + kBackends);
  }
  if (options.check || env_flag("GRADMESH_COMM_CHECK", false)) group = make_checked(group);
  return group;
}

}  // namespace gradmesh::comm
