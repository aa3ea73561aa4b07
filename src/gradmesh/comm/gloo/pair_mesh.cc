#include "gradmesh/comm/gloo/pair_mesh.h"

#include <vector>

#include "gradmesh/comm/gloo/store_adapter.h"

namespace gradmesh::comm::gloo_backend {

std::string pair_address_key(int from, int to) { return "pair/" + std::to_string(from) + "/" + std::to_string(to); }

void PairMeshContext::connect_pairs(const std::shared_ptr<Store>& store,
                                    std::shared_ptr<gloo::transport::Device>& device, Millis timeout) {
  GlooStoreAdapter addresses(store, timeout);
  std::shared_ptr<gloo::transport::Context> transport = device->createContext(rank, size);
  transport->setTimeout(getTimeout());
  // Every address first, so no rank waits on another that is still publishing.
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    auto& pair = transport->createPair(peer);
    addresses.set(pair_address_key(rank, peer), pair->address().bytes());
  }
  // Then connect in rank order, as Gloo's own full mesh does.
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    transport->getPair(peer)->connect(addresses.get(pair_address_key(peer, rank)));
  }
  device_ = device;
  transportContext_ = std::move(transport);
}

}  // namespace gradmesh::comm::gloo_backend
