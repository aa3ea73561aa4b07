// Exit codes a worker and its launcher agree on, beyond 0 (done), 1 (failed)
// and 2 (usage or config error). None of them claims success: each says why
// the run did not finish here.
#pragma once

namespace gradmesh {

// A worker that stopped cleanly because ANOTHER rank was asked to stop: its
// checkpoint is saved, but the run did not finish (EX_TEMPFAIL: continue it
// with --resume auto). A rank that received SIGTERM itself exits 0, as a
// preempted job expects.
inline constexpr int kStoppedByAnotherRankExitCode = 75;

// A worker whose collective or store call failed during training: a peer (or
// the link to it) may be the cause, not this worker. Before blaming its own
// worker, a launcher of a multi-node run waits up to --heartbeat-timeout for
// another node to be found lost or to report its own failure.
inline constexpr int kPeerTroubleExitCode = 76;

// A launcher whose worker hung (as timeout(1) reports one).
inline constexpr int kHangExitCode = 124;

}  // namespace gradmesh
