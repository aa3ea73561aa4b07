#include "gradmesh/obs/run_exposition.h"

#include <algorithm>

#include "gradmesh/obs/prometheus.h"

namespace gradmesh::obs {
namespace {

// The usage line's per-rank fields and how they are exported.
struct RankMetric {
  const char* field;
  const char* name;
  const char* help;
  bool counter;
};

constexpr RankMetric kRankMetrics[] = {
    {"cpu_seconds", "gradmesh_rank_cpu_seconds_total", "CPU time the rank's process used (user + system), in core-seconds.", true},
    {"wall_seconds", "gradmesh_rank_wall_seconds_total", "Seconds since the rank's process started.", true},
    {"peak_rss_bytes", "gradmesh_rank_peak_rss_bytes", "Largest resident set of the rank's process.", false},
    {"sent_bytes", "gradmesh_rank_sent_bytes_total", "Bytes the rank sent through its process groups (all backends).", true},
    {"received_bytes", "gradmesh_rank_received_bytes_total", "Bytes the rank received through its process groups.", true},
    {"inter_host_bytes", "gradmesh_rank_inter_host_sent_bytes_total", "Bytes the rank sent to processes on other hosts.", true},
    {"dataset_read_bytes", "gradmesh_rank_dataset_read_bytes_total", "Bytes the rank read from dataset files.", true},
    {"checkpoint_written_bytes", "gradmesh_rank_checkpoint_written_bytes_total", "Checkpoint bytes the rank wrote.", true},
};

}  // namespace

std::string render_run_exposition(const RunLog& log, const std::string& run_id, int generation, int restarts,
                                  int workers, const std::string& agent_phase) {
  MetricsRegistry registry;
  const Labels run{{"run_id", run_id}};
  registry.gauge("gradmesh_agent_generation", "The launcher's current generation (0, then one per restart).")
      .set(run, generation);
  registry.counter("gradmesh_agent_restarts_total", "Generations started after the first.").add(run, restarts);
  registry.gauge("gradmesh_agent_workers", "Worker processes this launcher runs in the current generation.")
      .set(run, workers);
  registry.gauge("gradmesh_agent_phase", "1 for the phase the launcher is in.")
      .set({{"run_id", run_id}, {"phase", agent_phase}}, 1);
  if (!log.steps.empty()) {
    const StepRecord& s = log.steps.back();
    registry.gauge("gradmesh_train_step", "Optimizer steps completed.").set(run, static_cast<double>(s.step));
    registry.gauge("gradmesh_train_epoch", "The epoch being trained (0-based).").set(run, static_cast<double>(s.epoch));
    registry.gauge("gradmesh_train_loss", "Mean training loss over the latest log interval.").set(run, s.loss);
    registry.gauge("gradmesh_train_samples_per_second", "Training throughput over the latest log interval.")
        .set(run, s.samples_per_s);
    GaugeFamily& phases = registry.gauge("gradmesh_rank_phase_seconds_per_step",
                                         "Seconds per step each rank spent in each phase over the latest log interval.");
    for (size_t r = 0; r < s.rank_phase_ms.size(); ++r)
      for (size_t p = 0; p < log.phases.size() && p < s.rank_phase_ms[r].size(); ++p)
        phases.set({{"run_id", run_id}, {"rank", std::to_string(r)}, {"phase", log.phases[p]}},
                   s.rank_phase_ms[r][p] / 1e3);
  }
  if (!log.epochs.empty()) {
    registry.gauge("gradmesh_test_accuracy", "Test accuracy after the latest evaluated epoch.")
        .set(run, log.epochs.back().test_accuracy);
    registry.gauge("gradmesh_test_loss", "Test loss after the latest evaluated epoch.").set(run, log.epochs.back().test_loss);
  }
  int64_t checkpoints = 0;
  for (const RunEvent& e : log.events) checkpoints += e.kind == RunEvent::Kind::kCheckpoint;
  registry.counter("gradmesh_checkpoints_total", "Checkpoints the run committed.").add(run, static_cast<double>(checkpoints));
  if (log.usage) {
    const UsageRecord& u = *log.usage;
    for (const RankMetric& m : kRankMetrics) {
      const auto it = u.ranks.find(m.field);
      if (it == u.ranks.end()) continue;
      // One family per metric, a series per rank (one HELP and TYPE line each).
      CounterFamily* counter = m.counter ? &registry.counter(m.name, m.help) : nullptr;
      GaugeFamily* gauge = m.counter ? nullptr : &registry.gauge(m.name, m.help);
      for (size_t r = 0; r < it->second.size(); ++r) {
        const Labels labels{{"run_id", run_id}, {"rank", std::to_string(r)}};
        if (counter)
          counter->add(labels, std::max(0.0, it->second[r]));
        else
          gauge->set(labels, it->second[r]);
      }
    }
    CounterFamily& sent = registry.counter("gradmesh_backend_sent_bytes_total", "Bytes sent, all ranks, by backend.");
    CounterFamily& received =
        registry.counter("gradmesh_backend_received_bytes_total", "Bytes received, all ranks, by backend.");
    for (const auto& [backend, figures] : u.backends) {
      const Labels labels{{"run_id", run_id}, {"backend", backend}};
      if (const auto it = figures.find("sent_bytes"); it != figures.end()) sent.add(labels, std::max(0.0, it->second));
      if (const auto it = figures.find("received_bytes"); it != figures.end())
        received.add(labels, std::max(0.0, it->second));
    }
    registry.gauge("gradmesh_checkpoint_stored_bytes", "Bytes the run's checkpoints occupy on disk.")
        .set(run, u.total("checkpoint_stored_bytes"));
    CounterFamily& cost = registry.counter(
        "gradmesh_run_cost_total", "The run's cost so far by kind, in the currency label; example=\"true\" while the "
                                   "prices are the built-in examples ([metering] in the config).");
    const std::string example = u.prices.examples ? "true" : "false";
    const auto add_cost = [&](const char* kind, double value) {
      cost.add({{"run_id", run_id}, {"kind", kind}, {"currency", u.prices.currency}, {"example", example}},
               std::max(0.0, value));
    };
    add_cost("compute", u.cost.compute);
    add_cost("storage", u.cost.storage);
    add_cost("egress", u.cost.egress);
  }
  return registry.render();
}

}  // namespace gradmesh::obs
