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
//   - another node published a failure in the store: SIGTERM, grace, SIGKILL.
// Whatever stops the group first is its outcome; later exits (the workers
// being stopped) do not change it. A node that stops for its own reason
// publishes it (store key "failure", first writer wins) so the other nodes
// follow within about a second.
#pragma once

#include <chrono>
#include <string>

#include "gradmesh/comm/store.h"
#include "gradmesh/elastic/signal_relay.h"
#include "gradmesh/elastic/worker_group.h"

namespace gradmesh::elastic {

struct GroupOutcome {
  int exit_code = 0;         // see launcher.h
  bool worker_failed = false;  // a local worker failed: the case a restart can help
  std::string message;       // one line for the user; empty when every worker succeeded
};

struct SupervisorSettings {
  int node_rank = 0;
  int nnodes = 1;
  std::chrono::milliseconds grace_period{10'000};
  // The generation's agent key space shared by all nodes; nullptr on one node.
  comm::Store* peers = nullptr;
};

// Runs until every worker of `group` has exited. REQUIRES: group.start() succeeded.
GroupOutcome supervise(WorkerGroup& group, SignalRelay& relay, const SupervisorSettings& settings);

// Writes "gradmesh launch: <line>\n" to stderr in one write.
void say(const std::string& line);

}  // namespace gradmesh::elastic
