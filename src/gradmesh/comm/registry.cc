// The one registry of process-group backends: which exist, and which `auto` picks.
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
constexpr int64_t kMaxRanks = 1'000'000;

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
  const int local_size = options.local_size >= 0
                             ? options.local_size
                             : static_cast<int>(env_int("LOCAL_WORLD_SIZE", 1, kMaxRanks).value_or(size));
  if (local_size < 1)
    throw_error(ErrorKind::kUsage, "process group", "local_size " + std::to_string(local_size) + " (expected >= 1)");
  const int local_rank = options.local_rank >= 0
                             ? options.local_rank
                             : static_cast<int>(env_int("LOCAL_RANK", 0, kMaxRanks).value_or(rank % local_size));
  ProcessGroupOptions resolved = options;
  resolved.timeout = group_timeout(options);
  std::string requested = options.backend;
  if (requested == "auto") requested = env_string("GRADMESH_BACKEND");
  const std::string backend = pick_backend(requested, size, local_size);

  std::shared_ptr<ProcessGroup> group;
  if (backend == "shm") {
    if (local_size < size)
      throw_error(ErrorKind::kUsage, "backend shm",
                  "needs every rank on one host, but LOCAL_WORLD_SIZE is " + std::to_string(local_size) + " of " +
                      std::to_string(size) + " ranks; use hier or gloo");
    group = make_shm_process_group(store, rank, size, *resolved.timeout);
  } else if (backend == "gloo") {
    group = make_gloo_process_group(store, rank, size, resolved);
  } else if (backend == "hier") {
    group = make_hier_process_group(store, rank, size, local_rank, local_size, resolved);
  } else if (backend == "mpi") {
    group = make_mpi_process_group(*resolved.timeout);
  } else {
    throw_error(ErrorKind::kUsage, "backend '" + backend + "'", std::string("unknown; built in: ") + kBackends);
  }
  if (options.check || env_flag("GRADMESH_COMM_CHECK", false)) group = make_checked(group);
  return group;
}

}  // namespace gradmesh::comm
