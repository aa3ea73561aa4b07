// Makes the gradmesh group behind one torch.distributed process group.
//
// The backend is chosen as `gradmesh train` chooses it, per group: shm when
// every member is on one host, hier when hosts hold several members each
// (numbered host-major, as launchers number them), gloo otherwise.
// GRADMESH_BACKEND (shm, gloo, hier) overrides the choice; mpi is not
// offered, since its world cannot follow torch's subgroups. A member's host
// is its launcher's node (GROUP_RANK, set by gradmesh launch and torchrun),
// or its host name without one; members publish theirs through the store.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace gradmesh::pytorch {

struct GroupRequest {
  c10::intrusive_ptr<c10d::Store> store;  // torch's store for this group
  int rank = 0, size = 1;
  std::chrono::milliseconds timeout{300'000};
  std::vector<int> world_ranks;  // empty: the world group (identity)
  bool check = false;            // fingerprint every collective (also GRADMESH_COMM_CHECK=1)
};

c10::intrusive_ptr<c10d::ProcessGroup> make_group(const GroupRequest& request);

}  // namespace gradmesh::pytorch
