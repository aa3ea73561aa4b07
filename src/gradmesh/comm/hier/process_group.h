// The `hier` backend: shared memory inside each host, Gloo TCP between hosts.
//
// An all-reduce of B bytes over H hosts with L ranks each:
//   1. shm all-reduce among the L ranks of each host   (memory bandwidth, ~B per rank)
//   2. Gloo all-reduce among the H host leaders        (network: 2(H-1)/H x B per leader)
//   3. shm broadcast from the leader to its host        (memory bandwidth)
// so only one rank per host touches the network, and the network carries the
// bytes of H ranks instead of H x L. Other collectives follow the same three
// stages; send/recv and sub-groups go through a Gloo group of all ranks.
// A reduce-scatter is the all-reduce above, of which each rank keeps its slice.
//
// BF16 stays BF16 at every stage, so the network carries 2 bytes per element:
// the shm stage sums in float32 and rounds once, the leaders' gloo all-reduce
// (between hosts a ring that rounds each partial sum at each of its H-1 hops:
// gloo/process_group.h) adds the hosts' sums, and the broadcast copies bits. avg across hosts is that sum, divided by the world
// size in float32 at the end and rounded once more; on one host the shm stage
// divides before its only rounding.
// Ranks are numbered host-major: rank = host * L + local_rank (as gradmesh
// launch assigns them); every host has the same L.
#pragma once

#include <memory>

#include "gradmesh/comm/process_group.h"

namespace gradmesh::comm {

// REQUIRES: size % local_size == 0 and rank / local_size identifies the host.
std::shared_ptr<ProcessGroup> make_hier_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      int local_rank, int local_size,
                                                      const ProcessGroupOptions& options);

}  // namespace gradmesh::comm
