// A training run's figures in Prometheus's text format, for the agent's
// /metrics: the latest log interval's progress and per-rank phase times, the
// per-rank consumption counters of the current processes, and the run's cost
// so far, from the run's metrics.jsonl (run_log.h).
//
// Counters are per process: a restarted worker starts again from zero, which
// Prometheus reads as a counter reset (rate() and increase() handle it).
// The cost is the whole run's.
#pragma once

#include <string>

#include "gradmesh/obs/run_log.h"

namespace gradmesh::obs {

std::string render_run_exposition(const RunLog& log, const std::string& run_id, int generation, int restarts,
                                  int workers, const std::string& agent_phase);

}  // namespace gradmesh::obs
