// `gradmesh bench scaling CONFIG`: short training probes at a few worker
// counts and a communication probe on the same transport, the cost model
// fitted from them (scaling/cost_model.h), and its predictions for 1 ..
// --max-workers workers on this network or one given by --bandwidth and
// --latency: a table on stdout, and JSON and an SVG chart when asked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradmesh::cli {

struct BenchScalingArgs {
  std::string config;
  std::vector<std::string> overrides;  // --set, applied to every probe
  std::string workers = "1,2,4";
  int64_t steps = 30;   // measured steps per probe
  int64_t warmup = 10;  // steps before them
  std::string bandwidth, latency;  // both or neither: the network to predict for
  int max_workers = 1024;
  std::string json_path, svg_path, report_path;
  // "netns:K": probe on K emulated hosts (network namespaces, root only),
  // one worker per host over gloo, every link limited to `link_rate`.
  std::string hosts;
  std::string link_rate = "1gbit";
  // Non-empty: the probes run in this directory, which is kept (each
  // probe's run directory with its metrics.jsonl, and the logs); else in a
  // temporary one, removed at the end.
  std::string keep_dir;
};

int run_bench_scaling(const BenchScalingArgs& args);

}  // namespace gradmesh::cli
