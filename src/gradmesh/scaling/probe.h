// What the scaling probes measured, read back from their files: a short
// training run's metrics.jsonl (per-phase times of its step events) and
// `gradmesh bench comm --json` output (all-reduce times by size); and the
// cost model fitted from them (cost_model.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gradmesh/scaling/cost_model.h"

namespace gradmesh::scaling {

// One probe: `workers` ranks training the same config for a few steps.
// Times are per step, averaged over the step events after the warm-up.
struct ProbeMeasurement {
  int workers = 1;
  int64_t global_batch = 0;
  int64_t steps = 0;  // measured (after the warm-up)
  double data_s = 0, forward_s = 0, backward_s = 0, exposed_s = 0, optimizer_s = 0;
  double step_s = 0;  // global_batch / samples per second
  double compute_s() const { return forward_s + backward_s; }
};

// Reads the step events of `metrics_path` whose step is past `warmup_steps`.
// Error(kFormat) naming the file and line for a line that is not JSON or a
// step event without its numeric fields; Error(kUsage) when no step event
// is past the warm-up (the probe ran too few steps).
ProbeMeasurement read_probe(const std::string& metrics_path, int workers, int64_t global_batch, int64_t warmup_steps);

// The all-reduces of `gradmesh bench comm --json` output (one object per
// line; other lines, such as a launcher's, are skipped). Gloo names the
// algorithm it ran; a backend that does not is taken as a ring.
// Error(kFormat) naming `what` and the line for a JSON object with missing
// or non-numeric fields.
std::vector<AllreduceSample> read_comm_samples(const std::string& text, const std::string& what);

// The largest size run as halving-doubling in `samples` (0 when none was).
double halving_doubling_limit(const std::vector<AllreduceSample>& samples);

// The step model from the probes: compute fitted against each probe's share
// of the batch, the backward share and the fixed parts averaged, and the
// overlap that makes the model's exposed communication match the probes
// with several workers (0 when there is none). `link`, `buckets` and
// `hd_limit` come from the communication probe or the user.
// `shared_cores`: the cores the probes' workers shared (0: a core or more
// each); each probe's times are divided by its sharing before the fit.
// `shape` gives communicate_every and overlaps_backward (StepModel), which
// the overlap's fit needs; its other fields are ignored.
StepModel fit_step_model(const std::vector<ProbeMeasurement>& probes, const LinkCost& link,
                         const std::vector<double>& bucket_bytes, double hd_limit, int shared_cores = 0,
                         const StepModel& shape = {});

}  // namespace gradmesh::scaling
