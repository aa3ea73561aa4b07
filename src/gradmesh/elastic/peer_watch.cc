#include "gradmesh/elastic/peer_watch.h"

#include <string_view>

#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/core/text_format.h"
#include "gradmesh/elastic/rank_assignment.h"

namespace gradmesh::elastic {
namespace {

using Millis = std::chrono::milliseconds;
constexpr const char* kFailureKey = "failure";
constexpr const char* kRecordKey = "failure_record";

std::string node_lease_key(int node) { return "lease/" + std::to_string(node); }

}  // namespace

PeerWatch::PeerWatch(comm::Store& agent, int node_rank, int nnodes, Millis lost_after, Millis store_timeout,
                     std::function<void()> keep_published)
    : agent_(agent),
      node_rank_(node_rank),
      nnodes_(nnodes),
      lost_after_(lost_after),
      store_timeout_(store_timeout),
      keep_published_(std::move(keep_published)) {}

void PeerWatch::publish_failure(int exit_code, const std::string& reason, const std::string& record_json) {
  const std::string value = std::to_string(exit_code) + "\n" + reason;
  try {
    if (agent_.compare_set(kFailureKey, "", value) == value) agent_.set(kRecordKey, record_json);
  } catch (const Error& e) {
    log_warn(std::string("could not tell the other nodes to stop: ") + e.what());
  }
}

std::optional<PeerFailure> PeerWatch::published_failure() {
  if (!agent_.check({kFailureKey})) return std::nullopt;
  const std::string value = agent_.get(kFailureKey, Millis{1000});
  const size_t newline = value.find('\n');
  PeerFailure f;
  // Anything but an exit code 1..255 still means the peer failed: 1.
  f.exit_code = static_cast<int>(try_parse_int(std::string_view(value).substr(0, newline), 1, 255).value_or(1));
  f.reason = newline == std::string::npos ? value : value.substr(newline + 1);
  try {
    // Written right after the failure key; a short wait covers the gap.
    f.record = parse_restart_record(agent_.get(kRecordKey, Millis{2000}), kRecordKey);
  } catch (const Error& e) {
    log_warn(std::string("no restart record from the failed node: ") + e.what());
  }
  return f;
}

// With leases: a node whose lease key was there and is gone.
std::optional<PeerFailure> PeerWatch::lease_expired() {
  for (int node = 0; node < nnodes_; ++node) {
    if (node == node_rank_ || forgotten_.count(node)) continue;
    if (agent_.check({node_lease_key(node)})) {
      lease_seen_.insert(node);
      continue;
    }
    if (!lease_seen_.count(node)) continue;  // not supervising yet
    PeerFailure f;
    f.lost = true;
    f.node = node;
    f.reason = "node " + std::to_string(node) + "'s launcher stopped responding (its lease in the store expired: " +
               "not renewed for " + seconds_text(lost_after_) + ")";
    return f;
  }
  return std::nullopt;
}

std::optional<PeerFailure> PeerWatch::lost_node(Clock::time_point now) {
  if (lost_after_.count() <= 0) return std::nullopt;
  if (leases_) return lease_expired();
  for (int node = 0; node < nnodes_; ++node) {
    if (node == node_rank_ || forgotten_.count(node) || !agent_.check({node_alive_key(node)})) continue;  // not supervising yet
    const std::string value = agent_.get(node_alive_key(node), Millis{1000});
    auto [it, first] = seen_.try_emplace(node, Seen{value, now});
    if (!first && it->second.value != value) it->second = Seen{value, now};
    if (now - it->second.changed < lost_after_) continue;
    PeerFailure f;
    f.lost = true;
    f.node = node;
    f.reason = "node " + std::to_string(node) + "'s launcher stopped responding (no keep-alive in the store for " +
               seconds_text(lost_after_) + ")";
    return f;
  }
  return std::nullopt;
}

std::optional<PeerFailure> PeerWatch::poll(Clock::time_point now) {
  try {
    agent_.set(node_alive_key(node_rank_), std::to_string(++beats_));
    if (leases_ && lost_after_.count() > 0)
      leases_ = agent_.set_expiring(node_lease_key(node_rank_), std::to_string(beats_), lost_after_);
    if (outage_since_) store_back(now);
    if (keep_published_) keep_published_();
    if (std::optional<PeerFailure> f = published_failure()) return f;
    return lost_node(now);
  } catch (const Error& e) {
    return store_trouble(e.what(), now);
  }
}

std::optional<PeerFailure> PeerWatch::store_trouble(const std::string& why, Clock::time_point now) {
  if (!outage_since_) {
    outage_since_ = now;
    log_warn("cannot reach the store to watch the other nodes (" + why + "); retrying, and giving up after " +
             seconds_text(store_timeout_) + " (--store-timeout)");
  }
  const auto down = std::chrono::duration_cast<Millis>(now - *outage_since_);
  if (down < store_timeout_) return std::nullopt;
  PeerFailure f;
  f.store_lost = true;
  f.reason = "the store " + agent_.describe() + " was unreachable for " + seconds_text(down) +
             " (--store-timeout " + seconds_text(store_timeout_) + "); last error: " + why;
  return f;
}

void PeerWatch::store_back(Clock::time_point now) {
  log_warn("the store " + agent_.describe() + " answers again after " +
           seconds_text(std::chrono::duration_cast<Millis>(now - *outage_since_)) +
           "; watching the other nodes again");
  outage_since_.reset();
  // Nobody's silence during the outage counts: this node could not see it.
  for (auto& [node, seen] : seen_) seen.changed = now;
}

}  // namespace gradmesh::elastic
