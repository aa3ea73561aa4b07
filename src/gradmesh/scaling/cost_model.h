// The cost model behind gradmesh's scaling predictions: how long a
// data-parallel step takes on N workers, from a few short measurements.
//
// A step on N workers, with the global batch B split among them, is
//
//   step(N) = (data + compute(B / N) + optimizer) x sharing(N) + exposed(N)
//   compute(b) = fixed + per_sample * b                 (fitted from probes)
//   comm(N)    = sum over buckets of allreduce(bucket bytes, N)
//   exposed(N) = max(comm(N) - overlap * backward(B / N), 0)
//
// where backward is compute's backward share, `overlap` the fraction of
// backward that communication can hide behind (measured), and allreduce
// the alpha-beta time of the algorithm the backend runs for that size:
//
//   ring               2 (N - 1) alpha + 2 (N - 1) / N * bytes * beta
//   halving-doubling   2 ceil(log2 N) alpha + 2 (N - 1) / N * bytes * beta
//
// (alpha: seconds per message, latency and per-hop overhead; beta: seconds
// per byte on the slowest link). Both algorithms move the same bytes per
// rank; they differ in how many messages, which is what decides small
// buckets. The model ignores contention beyond one link per rank (a
// switch, full duplex), which the emulated-network validation checks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace gradmesh::scaling {

enum class Algorithm { kRing, kHalvingDoubling };
const char* algorithm_name(Algorithm a);

struct LinkCost {
  double alpha_s = 0;          // seconds per message
  double beta_s_per_byte = 0;  // seconds per byte
};

// A link of `bits_per_second` (as `tc` counts, 1 gbit = 1e9) and one-way
// `latency_s`: alpha = latency, beta = 8 / rate.
LinkCost link_of(double bits_per_second, double latency_s);

// "alpha 12.7 us, 1.05 Gbit/s"
std::string describe_link(const LinkCost& link);

// The alpha-beta time of one all-reduce of `bytes` on `ranks` ranks (0 on one rank).
double allreduce_seconds(Algorithm algorithm, double bytes, int ranks, const LinkCost& link);

// One measured all-reduce (gradmesh bench comm on the same transport).
struct AllreduceSample {
  Algorithm algorithm = Algorithm::kRing;
  double bytes = 0;
  int ranks = 2;
  double seconds = 0;
};

// Least-squares alpha and beta from the samples (each enters as its
// messages and bytes per rank, so samples of several algorithms and world
// sizes fit one link). Negative estimates (noise on a tiny size range) are
// clamped to 0. Error(kUsage) with fewer than two samples or samples that
// cannot separate the two terms (every one the same size and ranks).
LinkCost fit_link(const std::vector<AllreduceSample>& samples);

struct ComputeCost {
  double fixed_s = 0;       // per step, whatever the batch (kernel launches, small layers)
  double per_sample_s = 0;  // per sample of this worker's share
};

// Least-squares line through (samples per worker, compute seconds) points
// (probes at several worker counts). One point: all of it per sample.
// Error(kUsage) with no points or a non-positive time.
ComputeCost fit_compute(const std::vector<std::pair<double, double>>& batch_and_seconds);

// Everything a prediction needs, fitted or read from the job.
struct StepModel {
  ComputeCost compute;
  double backward_share = 2.0 / 3.0;  // of compute: backward, which communication may overlap
  double overlap = 0;                 // fraction of backward that hides communication, 0..1
  double data_s = 0;                  // per step, not divided among workers (a worker loads its share in parallel)
  double optimizer_s = 0;             // per step (every replica updates all parameters)
  LinkCost link;
  std::vector<double> bucket_bytes;   // gradients per all-reduce, in order
  // The all-reduces run once every this many steps (parallel.local_steps:
  // parameters every H steps), so a step pays 1/H of them.
  int64_t communicate_every = 1;
  // Whether communication can run during backward. The bucketed all-reduce
  // does; PowerSGD (which needs every gradient) and local SGD's
  // synchronisation run after the step, so their overlap stays 0.
  bool overlaps_backward = true;
  // The backend's choice per size: at or below this many bytes halving-doubling, above it ring.
  double halving_doubling_up_to = 0;
  // Cores the workers share (0: every worker has cores of its own). Workers
  // beyond them time-share, which stretches each one's compute, data and
  // optimizer time by workers / cores: probes and emulated hosts on one
  // machine do, a real cluster does not.
  int shared_cores = 0;
  double sharing(int workers) const {
    return shared_cores > 0 ? std::max(1.0, static_cast<double>(workers) / shared_cores) : 1.0;
  }
};

// One step's all-reduces of every gradient bucket on `workers` workers, each
// by the algorithm the backend runs for its size.
double communication_seconds(const StepModel& model, int workers);

struct Prediction {
  int workers = 1;
  double compute_s = 0, comm_s = 0, exposed_s = 0, step_s = 0;
  double samples_per_s = 0, speedup = 1, efficiency = 1;
};

// The step on `workers` workers with `global_batch` samples per step
// (train.batch_size: split among the workers, the last ones one sample
// fewer when it does not divide). REQUIRES: 1 <= workers <= global_batch.
Prediction predict(const StepModel& model, int64_t global_batch, int workers);

struct ScalingCurve {
  std::vector<Prediction> points;  // workers 1 .. max_workers (at most global_batch)
  int knee = 1;                    // the most workers still at efficiency >= 0.5
  int fastest = 1;                 // the workers with the highest samples/s
  int slower_from = 0;             // fastest + 1, when adding workers beyond it slows the job; 0 if never
};

ScalingCurve predict_curve(const StepModel& model, int64_t global_batch, int max_workers);

}  // namespace gradmesh::scaling
