// `gradmesh launch`: the agent that runs one node's share of a job.
//
// One launcher per node: it joins the rendezvous through the store (which
// node am I, which global ranks are mine, where does rank 0 listen), starts
// its workers with the torchrun environment (elastic/worker_env.h), forwards
// their output line by line with a rank prefix, and supervises them:
//   - a worker that exits non-zero or dies from a signal stops the others
//     (SIGTERM, then SIGKILL after the grace period); with --max-restarts the
//     group is then started again as the next generation;
//   - SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every worker's
//     process group, then SIGKILL after the grace period (a second signal
//     kills at once);
//   - on a multi-node job, the first node to stop publishes why in the store
//     and the other nodes stop their workers too and exit with the same code.
//
// Exit codes (docs/launch.md):
//   0        every worker exited with status 0
//   S        the first worker to fail exited with status S (1..255)
//   128 + N  the first worker to fail was killed by signal N (SIGKILL: 137)
//   128 + N  the launcher received signal N (SIGINT 130, SIGTERM 143)
//   1        the launcher itself failed: rendezvous timeout, store unreachable
//   2        usage error: bad flags, no command, command not found
#pragma once

#include "gradmesh/elastic/launch_options.h"

namespace gradmesh::elastic {

// Runs the job's local part to the end and returns the exit code above.
// Usage errors and launcher failures are thrown as gradmesh::Error (the CLI
// maps them to 2 and 1); any workers started are stopped before it throws.
int run_launcher(const LaunchOptions& options);

}  // namespace gradmesh::elastic
