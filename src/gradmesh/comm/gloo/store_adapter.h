// GlooStoreAdapter: Gloo's rendezvous store interface over our Store.
//
// Gloo's rendezvous publishes each rank's pair addresses under keys
// ("pair/<from>/<to>" from PairMeshContext; "<rank>" and "rank_<rank>" in
// Gloo's own full mesh) and waits for everyone else's. Routing those keys through our Store lets Gloo rendezvous
// over a FileStore directory or a Redis server like every other backend, and
// keeps one timeout rule: a rank that never publishes makes the wait fail
// with Error(kTimeout) naming that rank, instead of Gloo's own 30 s default.
//
// Values are Gloo's binary address blobs; our stores keep std::string values
// byte for byte (FileStore writes files, RedisStore sends lengths), so no
// encoding is needed.
//
// Thread-safety: as the underlying Store.
#pragma once

#include <gloo/rendezvous/store.h>

#include <memory>
#include <string>
#include <vector>

#include "gradmesh/comm/store.h"

namespace gradmesh::comm::gloo_backend {

class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  // `timeout` bounds every get/wait Gloo makes through this adapter.
  GlooStoreAdapter(std::shared_ptr<comm::Store> store, Millis timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<comm::Store> store_;
  Millis timeout_;
};

// The rank a Gloo rendezvous key belongs to ("3", "rank_3" or "pair/3/5" -> 3), or -1.
int rank_of_rendezvous_key(const std::string& key);

}  // namespace gradmesh::comm::gloo_backend
