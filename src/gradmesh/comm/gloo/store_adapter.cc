#include "gradmesh/comm/gloo/store_adapter.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::comm::gloo_backend {
int rank_of_rendezvous_key(const std::string& key) {
  std::string_view digits = key;
  if (digits.rfind("rank_", 0) == 0) digits.remove_prefix(5);
  // A pair's address, "pair/<from>/<to>", belongs to the rank that publishes it.
  if (digits.rfind("pair/", 0) == 0) {
    digits.remove_prefix(5);
    const size_t slash = digits.find('/');
    if (slash == std::string_view::npos) return -1;
    digits = digits.substr(0, slash);
  }
  return static_cast<int>(try_parse_int(digits, 0, std::numeric_limits<int>::max()).value_or(-1));
}

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<comm::Store> store, Millis timeout)
    : store_(std::move(store)), timeout_(timeout) {}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, std::string(data.begin(), data.end()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  wait({key}, timeout_);
  std::string value = store_->get(key, timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  // Gloo passes its context timeout here; ours is the group's and wins when shorter.
  const Millis limit = std::min<Millis>(timeout_, timeout);
  try {
    store_->wait(keys, limit);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kTimeout) throw;
    std::vector<int> missing;
    for (const std::string& key : keys) {
      int rank = rank_of_rendezvous_key(key);
      if (rank >= 0 && !store_->check({key}) && std::find(missing.begin(), missing.end(), rank) == missing.end())
        missing.push_back(rank);
    }
    if (missing.empty()) throw;
    std::string ranks;
    for (size_t i = 0; i < missing.size(); ++i) ranks += (i ? ", " : "") + std::to_string(missing[i]);
    throw_error(ErrorKind::kTimeout, "gloo rendezvous in " + store_->describe(),
                "timed out after " + seconds_text(limit) + ": rank" + (missing.size() == 1 ? " " : "s ") + ranks +
                    " did not arrive (never published its address); check that every rank was started with the same "
                    "store and world size, or raise GRADMESH_COMM_TIMEOUT");
  }
}

}  // namespace gradmesh::comm::gloo_backend
