// Pipeline parallelism's two plans: which blocks each stage runs, and in what
// order each stage runs its micro-batches' forward and backward passes.
//
// Stages. A GPT's blocks are split into `pp` contiguous stages so that the
// slowest stage is as fast as possible; the first stage also runs the
// embeddings and the last the head and the loss, so their costs count there.
//
// Schedules, over m micro-batches on p stages (stage s = 0 .. p-1):
//   GPipe: every forward, then every backward (in reverse order). Simple, but
//     a stage holds the activations of all m micro-batches at once.
//   1F1B (PipeDream-flush): stage s runs min(p - s, m) forwards (warm-up),
//     then alternates one backward and one forward (steady state), then
//     finishes the remaining backwards (cool-down). Same bubble as GPipe,
//     (p - 1) / (m + p - 1) of the step with equal stage times, but stage s
//     never holds more than p - s micro-batches' activations.
// Both end with the same gradients: every micro-batch runs forward and
// backward once on every stage, and gradients accumulate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradmesh::parallel {

enum class PipelineSchedule { kGpipe, k1F1B };
// "gpipe" | "1f1b"; anything else is Error(kConfig) naming `key`.
PipelineSchedule parse_pipeline_schedule(const std::string& name, const std::string& key);
const char* pipeline_schedule_name(PipelineSchedule schedule);

struct PipelineStep {
  bool forward;    // false: backward
  int micro_batch;
  bool operator==(const PipelineStep&) const = default;
};

// What stage `stage` of `stages` runs, in order, for `micro_batches`.
// REQUIRES: 0 <= stage < stages, micro_batches >= 1 (else Error(kUsage)).
std::vector<PipelineStep> stage_schedule(PipelineSchedule schedule, int stage, int stages, int micro_batches);

// The most micro-batches whose activations a stage holds at once under `steps`.
int peak_in_flight(const std::vector<PipelineStep>& steps);

// Runs every stage's schedule with a forward taking `forward_cost[s]` and a
// backward `backward_cost[s]` on stage s and free, instant transfers; a pass
// starts when its stage is free and its input exists (the previous stage's
// forward, the next stage's backward). Returns each stage's idle fraction of
// the whole step (the bubble). With equal costs it is (p - 1) / (m + p - 1).
std::vector<double> simulated_bubble(PipelineSchedule schedule, int micro_batches,
                                     const std::vector<double>& forward_cost, const std::vector<double>& backward_cost);

// The blocks [begin, end) of each of `stages` stages: contiguous, at least one
// block each, minimising the largest stage cost, where stage 0 also pays
// `first_extra` (the embeddings) and the last stage `last_extra` (the head
// and the loss). Ties go to the split with earlier cuts. Error(kConfig)
// naming `key` when there are fewer blocks than stages.
struct StageBlocks {
  int64_t begin, end;
  bool operator==(const StageBlocks&) const = default;
};
std::vector<StageBlocks> balance_stages(const std::vector<double>& block_costs, int stages, double first_extra,
                                        double last_extra, const std::string& key);

// "stage 0: blocks 0-3 (+ embeddings), stage 1: blocks 4-7 (+ head)".
std::string describe_stages(const std::vector<StageBlocks>& split);

}  // namespace gradmesh::parallel
