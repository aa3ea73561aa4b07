#include "gradmesh/bench/comm_bench.h"

#include "gradmesh/core/error.h"

#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <vector>

#include "gradmesh/core/clock.h"
#include "gradmesh/obs/json_object.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh::bench {
namespace {

// Binds every thread of this process to the `index`-th CPU it may run on,
// as mpirun does for each rank by default (--bind-to core for up to 2 ranks),
// so the shm backend is measured under the same policy as the Open MPI anchor.
// Why it matters: on a 2-core machine with one other busy process, unbound
// ranks sometimes share a core with it while the other core idles, and then
// every handshake waits out a time slice. Measured (2 ranks, 5 alternating
// runs each, kernel 6.18): 4 KB all-reduce 3.8-740 us unbound (three runs of
// five over 250 us), 3.7-4.1 us bound. Returns false (and binds nothing)
// when the `ranks` ranks on this host outnumber the CPUs.
bool bind_to_core(int index, int ranks) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  if (index < 0 || index >= ranks || ranks > static_cast<int>(cpus.size())) return false;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus[static_cast<size_t>(index)], &one);
  // sched_setaffinity binds one thread; the group's threads already exist.
  DIR* tasks = ::opendir("/proc/self/task");
  if (!tasks) return sched_setaffinity(0, sizeof one, &one) == 0;
  while (const dirent* entry = ::readdir(tasks))
    if (const std::optional<int64_t> tid = try_parse_int(entry->d_name, 0, std::numeric_limits<pid_t>::max()))
      sched_setaffinity(static_cast<pid_t>(*tid), sizeof one, &one);
  ::closedir(tasks);
  return true;
}

}  // namespace

std::vector<CommBenchRow> bench_allreduce(comm::ProcessGroup& group, const CommBenchOptions& options) {
  std::vector<CommBenchRow> rows;
  const int n = group.size();
  Tensor slowest = Tensor::empty({1});
  comm::AllreduceOptions max_op;
  max_op.op = comm::ReduceOp::kMax;
  const bool bound = options.bind_shm_ranks && group.backend() == "shm" && bind_to_core(group.rank(), n);
  group.barrier()->wait();
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
    Tensor t = Tensor::full({bytes / 4}, 1.0f);
    // The anchors' counts (../shared/anchors: 200 below 1 MB, 20 from 1 MB),
    // so both sides of a comparison time windows of the same length.
    const int iters = options.iters > 0 ? options.iters : (bytes < (1 << 20) ? 200 : 20);
    for (int i = 0; i < options.warmup; ++i) group.allreduce(t)->wait();
    group.barrier()->wait();
    const double start = now_seconds();
    for (int i = 0; i < iters; ++i) group.allreduce(t)->wait();
    slowest.data()[0] = static_cast<float>((now_seconds() - start) / iters);
    group.allreduce(slowest, max_op)->wait();  // report the slowest rank, as nccl-tests does
    const double seconds = slowest.data()[0];
    const double algbw = static_cast<double>(bytes) / seconds / 1e9;
    // Named so a comparison can pair ours with the same algorithm of raw Gloo.
    const std::string algorithm = group.allreduce_algorithm(static_cast<size_t>(bytes));
    rows.push_back({bytes, seconds, algbw, algbw * 2.0 * (n - 1) / std::max(n, 1), bound, algorithm});
  }
  return rows;
}

std::vector<CommBenchRow> bench_p2p(comm::ProcessGroup& group, const CommBenchOptions& options) {
  if (group.size() < 2) throw_error(ErrorKind::kUsage, "bench comm --op p2p", "needs at least 2 ranks");
  std::vector<CommBenchRow> rows;
  const int rank = group.rank();
  Tensor slowest = Tensor::empty({1});
  comm::AllreduceOptions max_op;
  max_op.op = comm::ReduceOp::kMax;
  const bool bound = options.bind_shm_ranks && group.backend() == "shm" && bind_to_core(rank, group.size());
  group.barrier()->wait();
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
    Tensor t = Tensor::full({std::max<int64_t>(1, bytes / 4)}, 1.0f);
    const int iters = options.iters > 0 ? options.iters : (bytes < (1 << 20) ? 200 : 20);
    auto round_trips = [&](int n) {
      for (int i = 0; i < n; ++i) {
        if (rank == 0) {
          group.send(t, 1, i)->wait_or_throw();
          group.recv(t, 1, i)->wait_or_throw();
        } else if (rank == 1) {
          group.recv(t, 0, i)->wait_or_throw();
          group.send(t, 0, i)->wait_or_throw();
        }
      }
    };
    round_trips(options.warmup);
    group.barrier()->wait();
    const double start = now_seconds();
    round_trips(iters);
    slowest.data()[0] = rank <= 1 ? static_cast<float>((now_seconds() - start) / iters / 2) : 0.0f;
    group.allreduce(slowest, max_op)->wait();
    const double seconds = slowest.data()[0];
    const double bw = static_cast<double>(t.nbytes()) / seconds / 1e9;
    CommBenchRow row{static_cast<int64_t>(t.nbytes()), seconds, bw, bw, bound, ""};
    row.op = "p2p";
    rows.push_back(row);
  }
  return rows;
}

std::string format_comm_table(const std::vector<CommBenchRow>& rows, const std::string& backend, int world) {
  const bool p2p = !rows.empty() && rows.front().op == "p2p";
  std::string out = p2p ? "# p2p ping-pong between ranks 0 and 1, backend " + backend + ", " + std::to_string(world) +
                              " ranks, time = half the round trip"
                        : "# allreduce, backend " + backend + ", " + std::to_string(world) + " ranks, float32 sum";
  out += std::string(!rows.empty() && rows.front().bound ? ", each rank bound to one core" : "") + "\n";
  out += p2p ? "#        bytes      time(us)  bandwidth(GB/s)\n" : "#        bytes      time(us)   algbw(GB/s)   busbw(GB/s)\n";
  char line[128];
  for (const CommBenchRow& r : rows) {
    if (p2p)
      std::snprintf(line, sizeof line, "%14lld %13.1f %16.3f\n", static_cast<long long>(r.bytes), r.seconds * 1e6,
                    r.algbw_gbps);
    else
      std::snprintf(line, sizeof line, "%14lld %13.1f %13.3f %13.3f\n", static_cast<long long>(r.bytes),
                    r.seconds * 1e6, r.algbw_gbps, r.busbw_gbps);
    out += line;
  }
  return out;
}

std::string format_comm_json(const std::vector<CommBenchRow>& rows, const std::string& backend, int world) {
  std::string out;
  for (const CommBenchRow& r : rows) {
    obs::JsonObject line;
    line.add("op", r.op).add("backend", backend).add("ranks", world).add("bytes", r.bytes)
        .add("time_us", r.seconds * 1e6).add("algbw_gbps", r.algbw_gbps).add("busbw_gbps", r.busbw_gbps)
        .add("bound", r.bound);
    if (!r.algorithm.empty()) line.add("algorithm", r.algorithm);
    out += line.str() + "\n";
  }
  return out;
}

}  // namespace gradmesh::bench
