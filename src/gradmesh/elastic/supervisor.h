// The launcher's event loop over one running WorkerGroup: output, exits,
// signals and (on multi-node jobs) the other nodes' failures, until every
// worker of the group has exited.
//
// Policy, in order of what happens first:
//   - a worker exits non-zero or is killed: it is the group's failure; the
//     others get SIGTERM, then SIGKILL after the grace period;
//   - the launcher gets SIGINT/SIGTERM/SIGHUP/SIGQUIT: the same signal goes
//     to every worker, then SIGKILL after the grace period; a second such
//     signal sends SIGKILL at once;
//   - another node published a failure in the store, or stopped updating its
//     launcher's keep-alive key for --heartbeat-timeout: SIGTERM, grace, SIGKILL;
//   - the store stayed unreachable for --store-timeout: the same, exit 1 (a
//     shorter outage is waited out: it neither stops nor restarts anything);
//   - a worker's heartbeat stopped, or its progress did, for --heartbeat-timeout
//     (elastic/heartbeat_monitor.h): it counts as that worker's failure;
//   - with in-process recovery announced (elastic/restart_record.h) on one
//     node, a failed worker is replaced alone while the others keep running,
//     as long as the job-wide restart budget allows.
// Every stop signal is followed by SIGCONT, so a stopped worker can act on it.
// Whatever stops the group first is its outcome; later exits (the workers
// being stopped) do not change it. A node that stops for its own reason
// publishes it (store key "failure", first writer wins) so the other nodes
// follow within about a second.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "gradmesh/comm/store.h"
#include "gradmesh/core/exit_codes.h"
#include "gradmesh/elastic/restart_budget.h"
#include "gradmesh/elastic/signal_relay.h"
#include "gradmesh/elastic/worker_group.h"

namespace gradmesh::elastic {

struct GroupOutcome {
  int exit_code = 0;           // see launcher.h
  bool worker_failed = false;  // a local worker failed or hung: the case a restart can help
  bool peer_failed = false;    // another node failed or was lost: a restart can help too
  std::string message;         // one line for the user; empty when every worker succeeded
  int generation = 0;          // the newest generation reached (in-process replacements advance it)
  RestartRecord record;        // the failure, for the next generation's restart record
};

struct SupervisorSettings {
  int node_rank = 0;
  int nnodes = 1;
  int min_nnodes = 0;  // elastic MIN (0 = nnodes): the fewest nodes an in-process shrink may leave
  std::chrono::milliseconds grace_period{10'000};
  // The generation's agent key space shared by all nodes; nullptr on one node.
  // The supervisor's stores must fail fast (no retry window): a call that
  // blocked while the store is down would stop output, signals and exits.
  comm::Store* peers = nullptr;
  // How long the store may stay unreachable before this node gives up (exit 1).
  std::chrono::milliseconds store_timeout{60'000};
  // Re-publishes this node's rendezvous keys when the store lost them (a
  // restarted server without persistence); run at every peer poll; may be empty.
  std::function<void()> republish;
  // The run's store (heartbeats, recovery keys); nullptr = no heartbeat checks, no replacements.
  comm::Store* store = nullptr;
  std::string run_id;
  int generation = 0;
  std::chrono::milliseconds heartbeat_timeout{0};  // 0 = hang detection off
  // In-process replacement (the failed worker's node replaces it alone); the budget it draws
  // from, and the command of a replacement for (local rank, generation).
  bool in_process_allowed = false;
  RestartBudget* budget = nullptr;
  std::function<WorkerCommand(int local_rank, int generation)> replacement_command;
  // A stop signal every worker answered by exiting 0 ends the job with 0, not
  // 128 + the signal: for workers whose planned stop is a signal (a server
  // drains on SIGTERM).
  bool clean_signal_stop_succeeds = false;
};


// Runs until every worker of `group` has exited. REQUIRES: group.start() succeeded.
GroupOutcome supervise(WorkerGroup& group, SignalRelay& relay, const SupervisorSettings& settings);

// Writes "gradmesh launch: <line>\n" to stderr in one write.
void say(const std::string& line);

}  // namespace gradmesh::elastic
