// A full mesh of Gloo pairs whose addresses cross the store one pair at a time.
//
// Gloo's own connectFullMesh (the Debian version) has each rank publish the
// addresses of all its pairs under one key and read every other rank's whole
// list to find the one address meant for it: N - 1 reads of N addresses per
// rank, N^3 addresses through the store for the group (bench/control_plane.py
// measures it). Here rank r publishes its pair for peer p under
// "pair/<r>/<p>" and reads only "pair/<p>/<r>": N - 1 small writes and reads
// per rank, store traffic linear in the group size for each rank.
//
// Lazy connections (as PyTorch's TORCH_GLOO_LAZY_INIT): a pair is created and
// connected only when an operation first needs it. Debian's Gloo gives every
// pair a listening socket of its own, so a full mesh of N ranks on one host
// holds N (N - 1) listening ports plus N (N - 1) / 2 connections, and 256
// ranks need more local ports than the host has. With lazy connections a rank
// connects the few peers its algorithms address (peer_sets.h): 2 for a ring,
// about log2 N for halving-doubling, the barrier and the broadcast tree.
//
// Both ends of a pair must ask for it: connect_peers() publishes this rank's
// new pair addresses first, then reads each peer's and connects in rank
// order, so two ranks meet whenever each lists the other, whatever else they
// list. Collectives call it on every rank before the operation, each rank
// with its own peer set for it (the sets are symmetric); a send or recv calls
// it for its one peer on its waiter thread (point_to_point.h), so the pair
// connects once the other side has posted a message for this rank. Gloo's connect
// itself cannot deadlock: of two ranks, the one with the larger address waits
// for the other to connect, and the other only needs the first's published
// address, which a total order on addresses keeps free of cycles.
#pragma once

#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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

  // Lazy connections: creates the transport context with no pair yet;
  // connect_peers() adds them through `store`.
  void start_lazy(const std::shared_ptr<Store>& store, std::shared_ptr<gloo::transport::Device>& device,
                  Millis timeout);
  // Connects a pair to each of `peers` that has none yet. Every peer listed
  // must list this rank in a call of its own (see above). `added` runs on the
  // pairs this call connected, before any other thread may use them. A peer
  // that does not publish within the timeout is Error(kTimeout) naming it; a
  // pair whose connection failed before fails again (Error(kComm)); Gloo's
  // failures propagate.
  // Thread-safety: any thread. Calls that need the same peer share one
  // connection: the later waits for the earlier. No lock is held while a call
  // waits for a peer, so calls for different peers never wait on each other.
  // REQUIRES: start_lazy() returned.
  void connect_peers(const std::vector<int>& peers, const std::function<void(const std::vector<int>&)>& added);
  // Makes every connect_peers() call that waits for a peer, now or later,
  // fail with Error(kComm) within kAbortSlice: for destroying the group.
  void abort_connecting();
  static constexpr Millis kAbortSlice{100};

 private:
  // Waits until `key`, the address `peer` publishes for this rank, is in the store.
  void wait_for_address(int peer, const std::string& key);
  enum class Link { kNone, kConnecting, kConnected, kFailed };
  std::shared_ptr<Store> store_;  // lazy only
  Millis timeout_{0};
  std::mutex links_mutex_;
  std::condition_variable links_changed_;
  std::vector<Link> links_;  // by rank; guarded by links_mutex_
  bool aborted_ = false;     // guarded by links_mutex_
};

// The store key under which rank `from` publishes its pair's address for rank `to`.
std::string pair_address_key(int from, int to);

}  // namespace gradmesh::comm::gloo_backend
