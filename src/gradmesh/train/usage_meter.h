// Metering a training run (obs/metering.h): every log interval every rank
// measures what its process consumed, rank 0 gathers it and writes one
// "usage" line with the per-rank figures, the run's totals and their cost.
//
// Totals are the run so far, whatever processes it took. Each process's
// counters start from zero and only grow, so the meter adds what each
// process consumed since it was last seen, by process id. The ids and last
// figures are in every usage line, so a meter that starts later (a resumed
// run, or a new rank 0 after in-process recovery) continues from the file
// without counting anything twice. What a killed process consumed after
// the last usage line is not counted.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "gradmesh/obs/json_object.h"
#include "gradmesh/obs/metering.h"

namespace gradmesh::comm {
class ProcessGroup;
}

namespace gradmesh::train {

struct MeteringConfig;

// What one process consumed since it started.
struct RankUsage {
  std::string process;  // "<host>:<pid>:<start unix ms>": unique to the process
  double cpu_seconds = 0, wall_seconds = 0, peak_rss_bytes = 0;
  double sent_bytes = 0, received_bytes = 0, inter_host_bytes = 0, inter_host_received_bytes = 0;
  double dataset_read_bytes = 0, checkpoint_written_bytes = 0;
  std::map<std::string, std::pair<double, double>> backends;  // name -> (sent, received)
};

RankUsage measure_rank_usage();
// Every rank's usage, in rank order; collective over `group` (null: just this one).
std::vector<RankUsage> gather_rank_usage(comm::ProcessGroup* group, const RankUsage& mine);

obs::Prices prices_of(const MeteringConfig& config);

// Rank 0's side: turns gathered usage into usage lines.
class UsageMeter {
 public:
  // `checkpoint_dir`: whose size is the stored bytes; `metrics_path`: the
  // run's metrics.jsonl, whose last usage line it continues from (none: "").
  UsageMeter(obs::Prices prices, std::string checkpoint_dir, const std::string& metrics_path, double now);
  obs::JsonObject line(int64_t step, const std::vector<RankUsage>& ranks, double now);
  // The run's cost so far, as of the last line.
  const obs::Cost& cost() const { return cost_; }
  const obs::Prices& prices() const { return prices_; }

 private:
  obs::Prices prices_;
  std::string checkpoint_dir_;
  std::map<std::string, double> totals_;                            // the run's, by field name
  std::map<std::string, std::pair<double, double>> backend_totals_;  // the run's, by backend
  std::map<std::string, RankUsage> last_seen_;                      // by process id
  double last_time_ = 0;
  obs::Cost cost_;
};

// Bytes of the files under `dir` (0 when it does not exist).
double directory_bytes(const std::string& dir);

}  // namespace gradmesh::train
