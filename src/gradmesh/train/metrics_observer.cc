// Rank 0's RunObserver: every report of the loop as a line of metrics.jsonl
// (docs/observability.md lists the line types), usage and cost through the
// UsageMeter, and at the end the summary line and report.html, which is a
// view of metrics.jsonl as `gradmesh report` rebuilds it.
#include <algorithm>
#include <memory>
#include <utility>

#include "gradmesh/core/atomic_file.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/log.h"
#include "gradmesh/obs/jsonl_writer.h"
#include "gradmesh/obs/report_html.h"
#include "gradmesh/obs/run_log.h"
#include "gradmesh/obs/run_report_page.h"
#include "gradmesh/train/run_observer.h"

namespace gradmesh::train {
namespace {

using parallel::Phase;
using parallel::PhaseTimes;

// Mean over ranks of one phase's time per step, in milliseconds.
double mean_ms(const std::vector<PhaseTimes>& ranks, Phase phase) {
  double sum = 0;
  for (const PhaseTimes& t : ranks) sum += t.steps ? t[phase] / static_cast<double>(t.steps) : 0.0;
  return sum / static_cast<double>(ranks.size()) * 1e3;
}

class MetricsObserver final : public RunObserver {
 public:
  MetricsObserver(const std::string& path, bool append, const MeteringConfig& metering,
                  const std::string& checkpoints_dir, double now)
      : meter_(prices_of(metering), checkpoints_dir, append ? path : std::string(), now), out_(path, append) {}

  bool records() const override { return true; }

  void started(const RunStart& run) override {
    out_.write(run.memory);
    out_.write(obs::JsonObject()
                   .add("type", "run").add("run_id", run.run_id).add("model", run.model)
                   .add("parameters", run.parameters).add("world_size", run.world_size).add("backend", run.backend)
                   .add("batch_size", run.batch_size).add("epochs", run.epochs)
                   .add("steps_per_epoch", run.steps_per_epoch).add("generation", run.generation));
  }

  void resumed(const checkpoint::TrainerState& state, const std::string& from, int world_size, int generation,
               const std::vector<std::string>& skipped_checkpoints) override {
    out_.write(obs::JsonObject().add("type", "resume").add("step", state.step).add("epoch", state.epoch)
                   .add("from", from).add("checkpoint_world_size", state.world_size)
                   .add("checkpoint_zero_stage", state.zero_stage).add("world_size", world_size)
                   .add("generation", generation).add("skipped_checkpoints", skipped_checkpoints));
  }

  void restarted(const elastic::RestartRecord& r, bool in_process, int64_t resumed_at_step) override {
    obs::JsonObject line;
    line.add("type", "restart").add("generation", r.generation).add("failed_rank", r.failed_rank)
        .add("failed_node", r.failed_node).add("cause", r.cause).add("exit_code", r.exit_code)
        .add("recovery", in_process ? "in-process" : "restart").add("resumed_at_step", resumed_at_step)
        .add("seconds_to_first_step", static_cast<double>(unix_millis() - r.failure_unix_ms) / 1e3);
    // Steps trained before the failure that had to be trained again.
    if (r.last_step >= 0) line.add("steps_lost", std::max<int64_t>(0, r.last_step - resumed_at_step));
    out_.write(line);
  }

  void interval(const IntervalRecord& r) override;

  void slow_rank(int64_t step, int rank, const std::string& message, const std::optional<std::string>& phase) override {
    obs::JsonObject event;
    event.add("type", "slow_rank").add("step", step).add("rank", rank).add("message", message);
    if (phase) event.add("phase", *phase);
    out_.write(event);
  }

  void rebalanced(int64_t step, const std::vector<double>& shares) override {
    out_.write(obs::JsonObject().add("type", "rebalance").add("step", step).add("shares", shares));
  }

  void usage(int64_t step, const std::vector<RankUsage>& ranks, double metering_ms) override {
    obs::JsonObject line = meter_.line(step, ranks, now_seconds());
    // What metering itself costs the run: measured, not assumed negligible.
    line.add("metering_ms", metering_ms);
    out_.write(line);
  }

  void evaluated(int64_t epoch, int64_t step, double test_loss, double test_accuracy, double wall_time) override {
    out_.write(obs::JsonObject().add("type", "epoch").add("epoch", epoch).add("step", step)
                   .add("test_loss", test_loss).add("test_accuracy", test_accuracy).add("wall_time", wall_time));
  }

  void checkpoint_saved(int64_t step, bool sync, double stall_seconds) override {
    out_.write(obs::JsonObject().add("type", "checkpoint").add("step", step).add("sync", sync)
                   .add("stall_ms", stall_seconds * 1e3));
  }

  void stopped(int64_t step) override {
    out_.write(obs::JsonObject().add("type", "stopped").add("step", step).add("signal", "SIGTERM"));
  }

  void finished(const TrainSummary& summary, const CheckpointFigures& checkpoints, bool report) override;

 private:
  UsageMeter meter_;
  obs::JsonlWriter out_;
};

void MetricsObserver::interval(const IntervalRecord& r) {
  const std::vector<PhaseTimes>& ranks = *r.ranks;
  double slowest = 0, fastest = 1e300;
  int slowest_rank = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const double ms = ranks[i].total() / static_cast<double>(std::max<int64_t>(ranks[i].steps, 1)) * 1e3;
    if (ms > slowest) slowest = ms, slowest_rank = static_cast<int>(i);
    fastest = std::min(fastest, ms);
  }
  obs::JsonObject line;
  line.add("type", "step").add("step", r.step).add("epoch", r.epoch).add("loss", r.loss).add("lr", r.lr)
      .add("samples_per_s", r.samples_per_s).add("wall_time", r.wall_time);
  for (int p = 0; p < parallel::kPhaseCount; ++p)
    line.add(std::string(parallel::phase_name(static_cast<Phase>(p))) + "_ms", mean_ms(ranks, static_cast<Phase>(p)));
  line.add("world_size", static_cast<int64_t>(ranks.size())).add("step_ms_min", fastest)
      .add("step_ms_max", slowest).add("slowest_rank", slowest_rank);
  // Every rank's phases, for the dashboard's and the report's heatmaps.
  std::vector<std::string> phases;
  obs::JsonObject::Table rank_phase_ms;
  for (int p = 0; p < parallel::kPhaseCount; ++p) phases.emplace_back(parallel::phase_name(static_cast<Phase>(p)));
  for (const PhaseTimes& t : ranks) {
    std::vector<double> row;
    const double steps = static_cast<double>(std::max<int64_t>(t.steps, 1));
    for (int p = 0; p < parallel::kPhaseCount; ++p) row.push_back(t[static_cast<Phase>(p)] / steps * 1e3);
    rank_phase_ms.push_back(std::move(row));
  }
  line.add("phases", std::move(phases)).add("rank_phase_ms", std::move(rank_phase_ms));
  out_.write(line);
}

void MetricsObserver::finished(const TrainSummary& s, const CheckpointFigures& checkpoints, bool report) {
  obs::JsonObject line;
  line.add("type", "summary").add("steps", s.steps).add("samples", s.samples)
      .add("samples_this_process", s.samples_this_process).add("world_size", s.world_size).add("restarts", s.restarts)
      .add("train_seconds", s.train_seconds).add("samples_per_s", s.samples_per_s).add("tokens_per_s", s.tokens_per_s)
      .add("gemm_gflops_per_s", s.gemm_gflops_per_s).add("gemm_roof_gflops", s.gemm_roof_gflops)
      .add("final_train_loss", s.final_train_loss)
      .add("exposed_comm_share", s.exposed_comm_share)
      .add("peak_rss_bytes", static_cast<int64_t>(*std::max_element(s.peak_rss_bytes_per_rank.begin(),
                                                                      s.peak_rss_bytes_per_rank.end())))
      .add("peak_rss_bytes_per_rank", s.peak_rss_bytes_per_rank);
  if (s.evaluated) line.add("test_loss", s.test_loss).add("test_accuracy", s.test_accuracy);
  if (!s.pipeline_bubble_per_rank.empty())
    line.add("pipeline_bubble_per_rank", s.pipeline_bubble_per_rank)
        .add("pipeline_bubble_textbook", s.pipeline_bubble_textbook);
  const obs::Cost& c = meter_.cost();
  line.add("cost", obs::JsonObject().add("compute", c.compute).add("storage", c.storage).add("egress", c.egress)
                       .add("total", c.total()))
      .add("currency", meter_.prices().currency).add("example_prices", meter_.prices().examples);
  if (s.checkpoints_saved + s.checkpoints_failed > 0)
    line.add("checkpoints_saved", s.checkpoints_saved).add("checkpoints_failed", s.checkpoints_failed);
  if (checkpoints.saves > 0)
    line.add("checkpoint_bytes", checkpoints.bytes).add("checkpoint_write_seconds", checkpoints.write_seconds)
        .add("checkpoint_stall_seconds", checkpoints.stall_seconds);
  out_.write(line);
  if (!report) return;
  // The page is a view of metrics.jsonl: failing to draw it fails nothing.
  try {
    const std::string& dir = s.run_dir;
    write_file_atomically(dir + "/report.html",
                          obs::render_report_html(obs::report_content(obs::read_run_log(dir + "/metrics.jsonl"))));
  } catch (const std::exception& e) {
    log_warn(std::string("report.html was not written: ") + e.what() + " (`gradmesh report " + s.run_dir +
             "` draws it from metrics.jsonl)");
  }
}

}  // namespace

std::unique_ptr<RunObserver> make_metrics_observer(const std::string& path, bool append,
                                                   const MeteringConfig& metering, const std::string& checkpoints_dir,
                                                   double now) {
  return std::make_unique<MetricsObserver>(path, append, metering, checkpoints_dir, now);
}

}  // namespace gradmesh::train
