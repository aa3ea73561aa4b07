// Rendezvous of the launchers of one job: which node is which, and which
// global ranks each node's workers get.
//
// Every launcher (one per node) joins through the store, in a key space that
// the caller has already namespaced by run id and generation (PrefixStore
// "<run_id>/<generation>/agent"). The protocol, in store keys:
//   node_counter        add(+1) hands out node ranks in join order when a
//                       launcher has no --node-rank
//   node/<r>/owner      compare_set("" -> "<host> pid <pid>") claims rank r, so
//                       two launchers can never both be node r
//   master              "<addr>:<port>", written by node 0 before node/0/nproc
//   node/<r>/nproc      that node's worker count, written last: its presence
//                       means node r has fully joined
//   begun               set by every launcher as it starts to join, so a
//                       launcher started later finds the newest generation
//                       even when ranks are explicit (no node_counter)
//   alive/<r>           bumped by node r while it waits (and, by its peer
//                       watch, while its workers run): how a returning node
//                       tells its dead predecessor from a live duplicate
// Each node then waits until all node/<r>/nproc exist. Global ranks are
// contiguous per node in node order: node r's local rank l is
// sum(nproc of nodes < r) + l, so nodes may run different worker counts.
//
// A node that comes back with an explicit --node-rank after it was lost finds
// its rank owned by its dead predecessor. Dead means: the owner's process is
// gone (same host), or its alive/<r> did not change for kOwnerSilence. Then,
// if the generation's rendezvous is still open, the returning node takes the
// rank over (compare-and-set from the dead owner's label); if it closed (the
// dead node's workers ran), the node waits for the survivors' next generation.
// A live owner is a genuine duplicate: refused, naming both.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "gradmesh/comm/store.h"

namespace gradmesh::elastic {

// How long a rank's owner must stay silent before a returning node with the
// same --node-rank counts it as dead (keep-alives come every 0.2-0.5 s).
inline constexpr comm::Millis kOwnerSilence{3000};

struct RankAssignment {
  int node_rank = 0;
  int nnodes = 1;
  int local_world_size = 1;  // this node's workers
  int rank_base = 0;         // global rank of this node's local rank 0
  int world_size = 1;        // workers on all nodes
  std::string master_addr;   // where global rank 0 listens (torch's TCPStore, our TCP backends)
  int master_port = 0;

  int global_rank(int local_rank) const { return rank_base + local_rank; }
};

struct RendezvousRequest {
  int nnodes = 1;            // the most nodes (MAX of --nnodes MIN:MAX)
  int min_nnodes = 0;        // the fewest nodes; 0 = nnodes (a fixed node count)
  comm::Millis last_call{5000};  // elastic: close once MIN joined and no node came for this long
  int node_rank = -1;        // -1 = take the next rank from node_counter
  int nproc_per_node = 1;
  std::string master_addr;   // published if this launcher becomes node 0 (never empty)
  int master_port = 0;       // published by node 0; 0 = pick a free port now
  std::string node_label;    // "<host> pid <pid>", for other nodes' messages
  std::string run_label;     // "run 'ID' at <endpoint>", for messages
  comm::Millis join_timeout{300'000};
  // Called between store polls while waiting; may throw to abandon the
  // rendezvous (the launcher throws when it receives SIGINT or SIGTERM).
  std::function<void()> check_interrupt;
};

// Elastic membership (min_nnodes < nnodes): every node polls the join
// counter; the rendezvous closes when nnodes joined, or when at least
// min_nnodes joined and no new node came for last_call (measured by each
// node's own clock; the first to decide writes "closed" = the node count with
// a compare-and-set, and every node uses that value). A node that joins after
// the close is not part of this generation.
//
// Returns nullopt for such a late node (elastic only), and for a node whose
// explicit rank's dead owner belongs to a generation that already runs: it
// should wait for the next generation's rendezvous. Errors as join_rendezvous.
std::optional<RankAssignment> try_join_rendezvous(comm::Store& store, const RendezvousRequest& request);

// Sets again, where the store lost them (a restarted server without
// persistence), the keys this node wrote in the rendezvous it joined. Never
// overwrites a value that is there. Returns whether anything was lost.
bool republish_membership(comm::Store& store, const RendezvousRequest& request, const RankAssignment& joined);

// The key node `node`'s launcher bumps while it lives (the peer watch's too).
std::string node_alive_key(int node);

// Whether a generation's rendezvous has begun (some launcher started to join it).
bool rendezvous_begun(comm::Store& agent_store);

// Joins, waits for all nodes and returns this node's assignment.
// Errors: Error(kUsage) when the rank is taken or out of range (a stale store
// or mismatched flags); Error(kTimeout) naming the node ranks that did not
// join within join_timeout and the nodes that did.
RankAssignment join_rendezvous(comm::Store& store, const RendezvousRequest& request);

// A TCP port that is free now on every local address (bind to port 0). The
// port can be taken by someone else before rank 0 binds it; torchrun accepts
// the same race.
int find_free_port();

}  // namespace gradmesh::elastic
