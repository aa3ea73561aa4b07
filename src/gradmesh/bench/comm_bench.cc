#include "gradmesh/bench/comm_bench.h"

#include <algorithm>
#include <cstdio>

#include "gradmesh/core/clock.h"

namespace gradmesh::bench {

std::vector<CommBenchRow> bench_allreduce(comm::ProcessGroup& group, const CommBenchOptions& options) {
  std::vector<CommBenchRow> rows;
  const int n = group.size();
  Tensor slowest = Tensor::empty({1});
  comm::AllreduceOptions max_op;
  max_op.op = comm::ReduceOp::kMax;
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
    Tensor t = Tensor::full({bytes / 4}, 1.0f);
    const int iters = options.iters > 0 ? options.iters : (bytes <= (256 << 10) ? 200 : bytes <= (4 << 20) ? 50 : 10);
    for (int i = 0; i < options.warmup; ++i) group.allreduce(t)->wait();
    group.barrier()->wait();
    const double start = now_seconds();
    for (int i = 0; i < iters; ++i) group.allreduce(t)->wait();
    slowest.data()[0] = static_cast<float>((now_seconds() - start) / iters);
    group.allreduce(slowest, max_op)->wait();  // report the slowest rank, as nccl-tests does
    const double seconds = slowest.data()[0];
    const double algbw = static_cast<double>(bytes) / seconds / 1e9;
    rows.push_back({bytes, seconds, algbw, algbw * 2.0 * (n - 1) / std::max(n, 1)});
  }
  return rows;
}

std::string format_comm_table(const std::vector<CommBenchRow>& rows, const std::string& backend, int world) {
  std::string out = "# allreduce, backend " + backend + ", " + std::to_string(world) + " ranks, float32 sum\n";
  out += "#        bytes      time(us)   algbw(GB/s)   busbw(GB/s)\n";
  char line[128];
  for (const CommBenchRow& r : rows) {
    std::snprintf(line, sizeof line, "%14lld %13.1f %13.3f %13.3f\n", static_cast<long long>(r.bytes), r.seconds * 1e6,
                  r.algbw_gbps, r.busbw_gbps);
    out += line;
  }
  return out;
}

std::string format_comm_json(const std::vector<CommBenchRow>& rows, const std::string& backend, int world) {
  std::string out;
  char line[256];
  for (const CommBenchRow& r : rows) {
    std::snprintf(line, sizeof line,
                  "{\"op\":\"allreduce\",\"backend\":\"%s\",\"ranks\":%d,\"bytes\":%lld,\"time_us\":%.3f,"
                  "\"algbw_gbps\":%.4f,\"busbw_gbps\":%.4f}\n",
                  backend.c_str(), world, static_cast<long long>(r.bytes), r.seconds * 1e6, r.algbw_gbps, r.busbw_gbps);
    out += line;
  }
  return out;
}

}  // namespace gradmesh::bench
