#include "gradmesh/parallel/pipeline_schedule.h"

#include <algorithm>
#include <limits>

#include "gradmesh/core/error.h"

namespace gradmesh::parallel {

PipelineSchedule parse_pipeline_schedule(const std::string& name, const std::string& key) {
  if (name == "gpipe") return PipelineSchedule::kGpipe;
  if (name == "1f1b") return PipelineSchedule::k1F1B;
  throw_error(ErrorKind::kConfig, key, "expected \"gpipe\" or \"1f1b\", got \"" + name + "\"");
}

const char* pipeline_schedule_name(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::kGpipe ? "gpipe" : "1f1b";
}

std::vector<PipelineStep> stage_schedule(PipelineSchedule schedule, int stage, int stages, int micro_batches) {
  if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1)
    throw_error(ErrorKind::kUsage, "pipeline schedule",
                "stage " + std::to_string(stage) + " of " + std::to_string(stages) + " with " +
                    std::to_string(micro_batches) + " micro-batches");
  std::vector<PipelineStep> steps;
  if (schedule == PipelineSchedule::kGpipe) {
    for (int i = 0; i < micro_batches; ++i) steps.push_back({true, i});
    for (int i = micro_batches - 1; i >= 0; --i) steps.push_back({false, i});
    return steps;
  }
  // 1F1B: backwards go in micro-batch order, so the first one finished is the first freed.
  const int warmup = std::min(stages - stage, micro_batches);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) steps.push_back({true, next_forward});
  while (next_forward < micro_batches) {
    steps.push_back({false, next_backward++});
    steps.push_back({true, next_forward++});
  }
  while (next_backward < micro_batches) steps.push_back({false, next_backward++});
  return steps;
}

int peak_in_flight(const std::vector<PipelineStep>& steps) {
  int held = 0, peak = 0;
  for (const PipelineStep& s : steps) {
    held += s.forward ? 1 : -1;
    peak = std::max(peak, held);
  }
  return peak;
}

std::vector<double> simulated_bubble(PipelineSchedule schedule, int micro_batches,
                                     const std::vector<double>& forward_cost, const std::vector<double>& backward_cost) {
  const int p = static_cast<int>(forward_cost.size());
  GRADMESH_CHECK(p >= 1 && backward_cost.size() == forward_cost.size(), "one forward and backward cost per stage");
  std::vector<std::vector<PipelineStep>> plan;
  for (int s = 0; s < p; ++s) plan.push_back(stage_schedule(schedule, s, p, micro_batches));
  constexpr double kNotYet = std::numeric_limits<double>::infinity();
  // When each pass finished: fwd[s][i], bwd[s][i].
  std::vector<std::vector<double>> fwd(p, std::vector<double>(micro_batches, kNotYet)), bwd = fwd;
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0), busy(p, 0);
  // Each round runs every pass whose input exists; the plans always make progress.
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < plan[s].size()) {
        const PipelineStep step = plan[s][next[s]];
        const int i = step.micro_batch;
        const double ready = step.forward ? (s == 0 ? 0.0 : fwd[s - 1][i]) : (s == p - 1 ? fwd[s][i] : bwd[s + 1][i]);
        if (ready == kNotYet) break;
        const double cost = step.forward ? forward_cost[s] : backward_cost[s];
        const double start = std::max(ready, free_at[s]);
        free_at[s] = start + cost;
        busy[s] += cost;
        (step.forward ? fwd : bwd)[s][i] = free_at[s];
        ++next[s];
        progressed = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) GRADMESH_CHECK(next[s] == plan[s].size(), "a pipeline schedule deadlocked");
  const double total = *std::max_element(free_at.begin(), free_at.end());
  std::vector<double> idle(p);
  for (int s = 0; s < p; ++s) idle[s] = total > 0 ? 1.0 - busy[s] / total : 0.0;
  return idle;
}

std::vector<StageBlocks> balance_stages(const std::vector<double>& block_costs, int stages, double first_extra,
                                        double last_extra, const std::string& key) {
  const int n = static_cast<int>(block_costs.size());
  if (stages < 1 || n < stages)
    throw_error(ErrorKind::kConfig, key,
                std::to_string(stages) + " pipeline stages need at least as many blocks, the model has " +
                    std::to_string(n) + " (model.n_layer)");
  // best[k][j]: the smallest largest-stage cost splitting blocks [0, j) into k stages.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> prefix(n + 1, 0);
  for (int j = 0; j < n; ++j) prefix[j + 1] = prefix[j] + block_costs[j];
  auto cost = [&](int k, int begin, int end) {  // stage k (0-based) running blocks [begin, end)
    return prefix[end] - prefix[begin] + (k == 0 ? first_extra : 0) + (k == stages - 1 ? last_extra : 0);
  };
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int j = k; j <= n; ++j)
      for (int c = k - 1; c < j; ++c) {
        const double v = std::max(best[k - 1][c], cost(k - 1, c, j));
        if (v < best[k][j]) best[k][j] = v, cut[k][j] = c;  // strict: the earliest cut wins ties
      }
  std::vector<StageBlocks> split(stages);
  for (int k = stages, j = n; k >= 1; j = cut[k][j], --k) split[k - 1] = {cut[k][j], j};
  return split;
}

std::string describe_stages(const std::vector<StageBlocks>& split) {
  std::string out;
  for (size_t s = 0; s < split.size(); ++s) {
    out += (s ? ", stage " : "stage ") + std::to_string(s) + ": blocks " + std::to_string(split[s].begin) +
           (split[s].end - split[s].begin > 1 ? "-" + std::to_string(split[s].end - 1) : "");
    if (s == 0) out += " (+ embeddings)";
    if (s + 1 == split.size()) out += " (+ head)";
  }
  return out;
}

}  // namespace gradmesh::parallel
