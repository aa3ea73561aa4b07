// How the launchers of one generation watch each other through the store
// (the generation's agent key space):
//   failure        "<exit code>\n<what happened>": the first node to stop
//                  writes it (compare-and-set, first writer wins); the others
//                  stop their workers when they see it
//   failure_record the restart record (JSON) of that failure, written by the
//                  same node, so every node restarts with the same record
//   alive/<node>   a counter each launcher bumps every poll (~0.5 s); a node
//                  whose counter stopped for the timeout lost its launcher
//                  (killed, or its machine is gone)
//   lease/<node>   on a store with expiring keys (etcd: a lease of the
//                  timeout, renewed every poll): the store itself deletes it
//                  when the launcher stops renewing it, and a node whose key
//                  was there and is gone is lost. The store judges, not each
//                  launcher's clock; the counters then only serve rank
//                  assignment (rank_assignment.h)
// Every "stopped for" is measured on this launcher's own steady clock.
//
// The store may be unreachable for a while (a dropped connection, a restarted
// server): watching never stops. A failed poll starts an outage; while it
// lasts nobody is judged (this node cannot see the others' keep-alives, nor
// they its own), and when the store answers again every node's silence is
// measured afresh. Every poll also runs `keep_published`, which re-publishes
// what this node owns when the store lost it (a restarted server without
// persistence; another client may have seen the reconnect first). An outage
// longer than `store_timeout` is a failure of this node, naming the store and
// how long.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <optional>
#include <string>

#include "gradmesh/comm/store.h"
#include "gradmesh/elastic/restart_record.h"

namespace gradmesh::elastic {

struct PeerFailure {
  int exit_code = 1;
  std::string reason;
  bool lost = false;  // the node's launcher stopped responding (nobody published anything)
  bool store_lost = false;  // the store was unreachable for longer than the store timeout
  int node = -1;      // the lost node
  std::optional<RestartRecord> record;
};

class PeerWatch {
 public:
  using Clock = std::chrono::steady_clock;

  // `lost_after` 0 = never declare a silent node lost. `keep_published` (may
  // be empty) runs at every poll that reaches the store.
  PeerWatch(comm::Store& agent, int node_rank, int nnodes, std::chrono::milliseconds lost_after,
            std::chrono::milliseconds store_timeout = std::chrono::milliseconds{60'000},
            std::function<void()> keep_published = {});

  // First writer wins; store errors are logged (the other nodes then notice
  // this node's workers failing on their own).
  void publish_failure(int exit_code, const std::string& reason, const std::string& record_json);
  // Bumps this node's keep-alive, then returns another node's failure or loss,
  // or the store's loss, if any.
  std::optional<PeerFailure> poll(Clock::time_point now);
  // Whether the last poll could not reach the store.
  bool in_outage() const { return outage_since_.has_value(); }
  // Stops watching a lost node the job went on without (in-process shrink).
  void forget(int node) { forgotten_.insert(node); }

 private:
  std::optional<PeerFailure> published_failure();
  std::optional<PeerFailure> lost_node(Clock::time_point now);
  std::optional<PeerFailure> lease_expired();
  std::optional<PeerFailure> store_trouble(const std::string& why, Clock::time_point now);
  void store_back(Clock::time_point now);

  struct Seen {
    std::string value;
    Clock::time_point changed{};
  };
  comm::Store& agent_;
  int node_rank_;
  int nnodes_;
  std::chrono::milliseconds lost_after_;
  std::chrono::milliseconds store_timeout_;
  std::function<void()> keep_published_;
  int64_t beats_ = 0;
  std::optional<Clock::time_point> outage_since_;  // the first failed poll of the current outage
  std::map<int, Seen> seen_;
  std::set<int> forgotten_;
  bool leases_ = true;         // the store keeps expiring keys (until it says it does not)
  std::set<int> lease_seen_;   // nodes whose lease key was there once
};

}  // namespace gradmesh::elastic
