// What this process has consumed so far, for metering (obs/metering.h):
// CPU core-seconds and peak memory from the kernel (getrusage), wall time
// since the process started, and byte counters the layers above bump where
// the bytes move (dataset files read, checkpoint files written).
//
// The counters are process-wide and only grow, so a reader takes
// differences; a restarted worker starts again from zero, which the
// metrics file's readers account for (obs/run_log.h).
#pragma once

#include <cstdint>

namespace gradmesh {

struct ProcessUsage {
  double cpu_seconds = 0;     // user + system time of every thread (core-seconds)
  double wall_seconds = 0;    // since the process started
  int64_t peak_rss_bytes = 0; // the largest resident set so far
};

ProcessUsage process_usage();

enum class IoCounter { kDatasetRead, kCheckpointWritten };

// Thread-safe; cheap enough to call per file or per batch.
void count_io(IoCounter counter, uint64_t bytes);
uint64_t io_bytes(IoCounter counter);

}  // namespace gradmesh
