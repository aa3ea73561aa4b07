// Joining the job a worker was started into, from its environment.
//
// Under gradmesh launch (or torchrun-style launchers): RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE and GRADMESH_STORE / GRADMESH_RUN_ID /
// GRADMESH_GENERATION. Under mpirun/srun: MPI's own variables, and the mpi
// backend. Missing or malformed variables are Error(kUsage) naming them.
#pragma once

#include <memory>

#include "gradmesh/comm/process_group.h"

namespace gradmesh::comm {

struct WorkerEnvironment {
  int rank = 0, world_size = 1;
  int local_rank = 0, local_world_size = 1;
  std::string store_endpoint;  // empty under mpirun
  std::string run_id;
  int generation = 0;
};

// True when RANK/WORLD_SIZE or an MPI launcher's variables are present.
bool launched_as_worker();
WorkerEnvironment read_worker_environment();

// Opens the store (namespaced "<run_id>/<generation>") and builds the world group.
std::shared_ptr<ProcessGroup> init_process_group_from_environment(const ProcessGroupOptions& options = {});
// The same for a given environment: in-process recovery forms the group of a
// later generation than the one the worker was started in.
std::shared_ptr<ProcessGroup> init_process_group(const WorkerEnvironment& env, const ProcessGroupOptions& options = {});

}  // namespace gradmesh::comm
