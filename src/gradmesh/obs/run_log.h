// A run's metrics.jsonl read back: what report.html, `gradmesh report`, the
// dashboard's Prometheus endpoint and a resumed run's meter need from it.
// The file is the run's record; everything shown about a run is derived
// from it, so a report regenerated later shows what the live one did.
//
// Lines are read as they come (add_line), so the launcher can follow a
// file that is still growing. A line that is not a JSON object with a
// string "type", or whose fields have the wrong JSON type, is
// Error(kFormat) naming the file and line, except a line cut off before its
// object ends: a process killed mid-write leaves one (and the next process
// of the run starts a new line after it). Those are skipped and counted
// (cut_off_lines). Unknown types and missing fields are tolerated: older and
// newer runs stay readable.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gradmesh/obs/metering.h"

namespace gradmesh::obs {

struct StepRecord {
  int64_t step = 0, epoch = 0;
  double time = 0, loss = 0, samples_per_s = 0;
  std::vector<double> phase_ms;                    // mean over ranks, in RunLog::phases order
  std::vector<std::vector<double>> rank_phase_ms;  // [rank][phase]; empty in runs before per-rank lines
};

struct EpochRecord {
  int64_t epoch = 0, step = 0;
  double time = 0, test_loss = 0, test_accuracy = 0;
};

// Something that happened, for timelines: a restart, a checkpoint, a slow
// rank, a stop, the end.
struct RunEvent {
  enum class Kind { kRestart, kResume, kCheckpoint, kSlowRank, kStopped, kFinished };
  Kind kind = Kind::kCheckpoint;
  double time = 0;
  int64_t step = 0;
  std::string text;
};
const char* run_event_name(RunEvent::Kind kind);  // "restart", ...

// The last "usage" line: the run so far.
struct UsageRecord {
  double time = 0;
  int64_t step = 0;
  Prices prices;
  Cost cost;
  std::map<std::string, double> totals;                    // "cpu_seconds", "sent_bytes", ...
  std::map<std::string, std::vector<double>> ranks;        // the same names, per rank, this process
  std::vector<std::string> processes;                      // per rank: which process measured it
  std::map<std::string, std::map<std::string, double>> backends;  // backend -> "sent_bytes"/"received_bytes"
  double total(const std::string& name) const;             // 0 when absent
};

struct RunLog {
  std::string path;
  std::map<std::string, std::string> run;  // the "run" line's fields as text (model, world_size, ...)
  std::vector<std::string> phases;         // the step lines' phase names
  std::vector<StepRecord> steps;
  std::vector<EpochRecord> epochs;
  std::vector<RunEvent> events;
  std::optional<UsageRecord> usage;
  std::map<std::string, double> summary;   // the last "summary" line's numbers
  std::map<std::string, std::vector<double>> summary_lists;  // and its arrays of numbers (per rank)
  double first_time = 0;                   // of the first line with a time; 0 when none
  int64_t lines = 0;
  int64_t cut_off_lines = 0;
};

class RunLogReader {
 public:
  // `keep_steps` false: steps holds the latest step line only (a follower
  // that needs the current figures, not the curves, of a long run).
  explicit RunLogReader(std::string path, bool keep_steps = true) : keep_steps_(keep_steps) {
    log_.path = std::move(path);
  }
  // One line without its newline. Error(kFormat) "<path>:<line>: ..." when it is malformed.
  void add_line(const std::string& line);
  const RunLog& log() const { return log_; }

 private:
  void read_line(const std::string& line);
  bool keep_steps_;
  RunLog log_;
};

// The whole file. Error(kIo) when it cannot be read, kFormat as above.
RunLog read_run_log(const std::string& path);

}  // namespace gradmesh::obs
