#include "gradmesh/comm/gloo/pair_mesh.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "gradmesh/comm/gloo/store_adapter.h"
#include "gradmesh/comm/gloo/transport_access.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/text_format.h"

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

void PairMeshContext::start_lazy(const std::shared_ptr<Store>& store,
                                 std::shared_ptr<gloo::transport::Device>& device, Millis timeout) {
  std::shared_ptr<gloo::transport::Context> transport = make_lazy_tcp_context(device, rank, size);
  transport->setTimeout(getTimeout());
  store_ = store;
  timeout_ = timeout;
  links_.assign(static_cast<size_t>(size), Link::kNone);
  links_[static_cast<size_t>(rank)] = Link::kConnected;
  device_ = device;
  transportContext_ = std::move(transport);
}

void PairMeshContext::abort_connecting() {
  std::lock_guard<std::mutex> lock(links_mutex_);
  aborted_ = true;
  links_changed_.notify_all();
}

void PairMeshContext::wait_for_address(int peer, const std::string& key) {
  // In slices, so that destroying the group need not wait out the timeout.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(links_mutex_);
      if (aborted_)
        throw_error(ErrorKind::kComm, "gloo rank " + std::to_string(rank),
                    "cancelled while connecting to rank " + std::to_string(peer) + ": the group is being destroyed");
    }
    const auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left <= Millis(0))
      throw_error(ErrorKind::kTimeout, "gloo rank " + std::to_string(rank),
                  "rank " + std::to_string(peer) + " did not connect within " + duration_text(timeout_) +
                      ": it has not reached an operation that uses the pair between them (lazy connections)");
    try {
      store_->wait({key}, std::min(left, kAbortSlice));
      return;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kTimeout) throw;
    }
  }
}

void PairMeshContext::connect_peers(const std::vector<int>& peers,
                                    const std::function<void(const std::vector<int>&)>& added) {
  std::vector<int> wanted = peers;
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  std::vector<int> mine, others;  // pairs this call connects (ascending); pairs another call is connecting
  {
    std::lock_guard<std::mutex> lock(links_mutex_);
    for (int peer : wanted) {
      Link& link = links_.at(static_cast<size_t>(peer));
      if (link == Link::kNone) {
        link = Link::kConnecting;
        mine.push_back(peer);
      } else if (link == Link::kConnecting) {
        others.push_back(peer);
      } else if (link == Link::kFailed) {
        throw_error(ErrorKind::kComm, "gloo rank " + std::to_string(rank),
                    "the connection to rank " + std::to_string(peer) + " failed earlier");
      }
    }
  }
  const auto settle = [&](Link state) {
    std::lock_guard<std::mutex> lock(links_mutex_);
    for (int peer : mine) links_[static_cast<size_t>(peer)] = state;
    links_changed_.notify_all();
  };
  if (!mine.empty()) {
    try {
      GlooStoreAdapter addresses(store_, timeout_);
      // Every address first, so a peer that lists several of ours finds them all.
      for (int peer : mine) {
        auto& pair = transportContext_->createPair(peer);
        addresses.set(pair_address_key(rank, peer), pair->address().bytes());
      }
      for (int peer : mine) {
        const std::string key = pair_address_key(peer, rank);
        wait_for_address(peer, key);
        transportContext_->getPair(peer)->connect(addresses.get(key));
      }
      added(mine);
    } catch (...) {
      settle(Link::kFailed);
      throw;
    }
    settle(Link::kConnected);
  }
  if (others.empty()) return;
  std::unique_lock<std::mutex> lock(links_mutex_);
  const auto settled = [&] {
    for (int peer : others)
      if (links_[static_cast<size_t>(peer)] == Link::kConnecting) return false;
    return true;
  };
  if (!links_changed_.wait_for(lock, timeout_, [&] { return aborted_ || settled(); }))
    throw_error(ErrorKind::kTimeout, "gloo rank " + std::to_string(rank),
                "another operation's connection to one of ranks " + std::to_string(others.front()) + ".. did not " +
                    "finish within the timeout");
  if (aborted_)
    throw_error(ErrorKind::kComm, "gloo rank " + std::to_string(rank), "cancelled: the group is being destroyed");
  for (int peer : others)
    if (links_[static_cast<size_t>(peer)] == Link::kFailed)
      throw_error(ErrorKind::kComm, "gloo rank " + std::to_string(rank),
                  "the connection to rank " + std::to_string(peer) + " failed");
}

}  // namespace gradmesh::comm::gloo_backend
