// `gradmesh bench comm`: all-reduce time, algorithm bandwidth and bus
// bandwidth over a sweep of message sizes, nccl-tests style:
//   algbw = bytes / time;  busbw = algbw x 2(n-1)/n
// (busbw is comparable across world sizes: it is what each link carries).
// `--op p2p`: point-to-point ping-pong between ranks 0 and 1 (what pipeline
// stages exchange): time = half the round trip, bandwidth = bytes / time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gradmesh/comm/process_group.h"

namespace gradmesh::bench {

struct CommBenchOptions {
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 64 << 20;
  int iters = 0;    // 0: chosen per size (more for small messages)
  int warmup = 5;
  // The shm backend only: bind each rank's threads to its own core first, as
  // mpirun binds the Open MPI anchor's ranks (see comm_bench.cc). Gloo's
  // anchor runs unbound, and so does the gloo backend here.
  bool bind_shm_ranks = true;
};

struct CommBenchRow {
  int64_t bytes;
  double seconds;  // per all-reduce, slowest rank
  double algbw_gbps, busbw_gbps;
  bool bound = false;  // the ranks were bound to cores (bind_shm_ranks)
  std::string algorithm;  // the gloo backend only: which of Gloo's all-reduces ran ("" otherwise)
  std::string op = "allreduce";  // or "p2p"
};

// Collective: every rank of `group` calls it with the same options.
std::vector<CommBenchRow> bench_allreduce(comm::ProcessGroup& group, const CommBenchOptions& options);

// Collective: ranks 0 and 1 ping-pong each size (send, then receive the echo);
// the other ranks wait at a barrier. REQUIRES: group.size() >= 2.
std::vector<CommBenchRow> bench_p2p(comm::ProcessGroup& group, const CommBenchOptions& options);

// The table rank 0 prints, and one JSON object per row.
std::string format_comm_table(const std::vector<CommBenchRow>& rows, const std::string& backend, int world);
std::string format_comm_json(const std::vector<CommBenchRow>& rows, const std::string& backend, int world);

}  // namespace gradmesh::bench
