// A full mesh of Gloo pairs whose addresses cross the store one pair at a time.
//
// Gloo's own connectFullMesh (the Debian version) has each rank publish the
// addresses of all its pairs under one key and read every other rank's whole
// list to find the one address meant for it: N - 1 reads of N addresses per
// rank, N^3 addresses through the store for the group (bench/control_plane.py
// measures it). Here rank r publishes its pair for peer p under
// "pair/<r>/<p>" and reads only "pair/<p>/<r>": N - 1 small writes and reads
// per rank, store traffic linear in the group size for each rank.
#pragma once

#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>

#include <memory>
#include <string>

#include "gradmesh/comm/store.h"

namespace gradmesh::comm::gloo_backend {

class PairMeshContext final : public gloo::rendezvous::Context {
 public:
  PairMeshContext(int this_rank, int ranks) : gloo::rendezvous::Context(this_rank, ranks) {}
  // Creates and connects a pair to every other rank through `store`; waits at
  // most `timeout` for a peer's address (Error(kTimeout) naming the ranks that
  // never published, as GlooStoreAdapter words it). Gloo's failures propagate.
  void connect_pairs(const std::shared_ptr<Store>& store, std::shared_ptr<gloo::transport::Device>& device,
                     Millis timeout);
};

// The store key under which rank `from` publishes its pair's address for rank `to`.
std::string pair_address_key(int from, int to);

}  // namespace gradmesh::comm::gloo_backend
