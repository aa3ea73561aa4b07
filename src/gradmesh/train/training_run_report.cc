// The reporting half of a training run (training_run.h): progress, log
// intervals, straggler rebalancing, evaluation, the summary and the report.
#include "gradmesh/train/training_run.h"

namespace gradmesh::train::detail {
namespace {

// Mean over ranks of one phase's time per step, in milliseconds.
double mean_ms(const std::vector<PhaseTimes>& ranks, Phase phase) {
  double sum = 0;
  for (const PhaseTimes& t : ranks) sum += t.steps ? t[phase] / static_cast<double>(t.steps) : 0.0;
  return sum / static_cast<double>(ranks.size()) * 1e3;
}

}  // namespace

std::vector<RankUsage> TrainingRun::meter_usage() {
  const double start = now_seconds();
  std::vector<RankUsage> ranks = gather_rank_usage(world_, measure_rank_usage());
  if (!metrics_ || !usage_meter_) return ranks;
  obs::JsonObject line = usage_meter_->line(s_.step, ranks, now_seconds());
  // What metering itself costs the run: measured, not assumed negligible.
  line.add("metering_ms", (now_seconds() - start) * 1e3);
  metrics_->write(line);
  return ranks;
}

void TrainingRun::show_progress(int64_t epoch, int64_t step_in_epoch) {
  const int64_t total = prepared_.steps.total_steps;
  const double elapsed = now_seconds() - s_.start - s_.excluded;
  progress_.update({epoch, tc_.epochs, step_in_epoch, std::min(prepared_.steps.steps_per_epoch, total), s_.last_loss,
                    static_cast<double>(s_.samples) / std::max(elapsed, 1e-9),
                    elapsed / static_cast<double>(s_.step) * static_cast<double>(total - s_.step)});
}

// Summary lines of a log interval: global loss, per-phase means, spread, straggler.
void TrainingRun::log_interval(float lr, int64_t epoch) {
  const std::vector<PhaseTimes> ranks = parallel::gather_phase_times(world_, s_.window);
  double loss_sum = 0;
  for (const PhaseTimes& t : ranks) loss_sum += t.loss_sum;
  loss_sum /= prepared_.mesh.tp;  // the ranks of a tensor-parallel group each report the same loss
  if (pipeline_.forward) {
    // Ranks start a step together (the one before ended in collectives), so the
    // longest stage's window is the pipeline's: until stage 0's last backward.
    double window = 0;
    for (const PhaseTimes& t : ranks) window = std::max(window, t.pipeline_seconds);
    bubble_busy_.resize(ranks.size(), 0.0);
    for (size_t r = 0; r < ranks.size(); ++r) bubble_busy_[r] += ranks[r][Phase::kForward] + ranks[r][Phase::kBackward];
    bubble_window_ += window;
  }
  s_.last_loss = loss_sum / static_cast<double>(std::max<int64_t>(s_.window.steps, 1));
  const double now = now_seconds();
  const double rate = static_cast<double>(s_.window_samples) / std::max(now - s_.window_start, 1e-9);
  if (metrics_) {
    write_step_line(ranks, lr, epoch, rate, now);
    phase_totals_.add_window(ranks);
    if (const std::optional<int> slow = detector_.observe(ranks)) {
      const std::string note = "step " + std::to_string(s_.step) + ": " + detector_.describe(ranks, *slow);
      progress_.notice("warning: " + note, true);
      obs::JsonObject event;
      event.add("type", "slow_rank").add("step", s_.step).add("rank", *slow).add("message", note);
      if (const std::optional<Phase> phase = parallel::dominant_slow_phase(ranks, *slow))
        event.add("phase", parallel::phase_name(*phase));
      metrics_->write(event);
    }
  }
  meter_usage();  // every rank takes part
  s_.window = PhaseTimes{};
  s_.window_samples = 0;
  s_.window_start = now;
}

// Every parallel.rebalance_every steps: every rank sees the same gathered
// times, so every balancer picks the same shares; they apply from the next
// step on. Balancing more often than logging lets the split settle within a
// few dozen steps.
void TrainingRun::rebalance() {
  const std::vector<PhaseTimes> ranks = parallel::gather_phase_times(world_, s_.balance_window);
  s_.balance_window = PhaseTimes{};
  const std::optional<std::vector<int64_t>> shares = balancer_->observe(ranks);
  if (!shares) return;
  loader_->set_split(s_.step, *shares);
  const auto total = static_cast<double>(std::accumulate(shares->begin(), shares->end(), int64_t{0}));
  std::vector<double> fractions;
  for (int64_t share : *shares) fractions.push_back(static_cast<double>(share) / total);
  if (metrics_) metrics_->write(obs::JsonObject().add("type", "rebalance").add("step", s_.step).add("shares", fractions));
}

void TrainingRun::write_step_line(const std::vector<PhaseTimes>& ranks, float lr, int64_t epoch, double rate,
                                  double now) {
  double slowest = 0, fastest = 1e300;
  int slowest_rank = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const double ms = ranks[r].total() / static_cast<double>(std::max<int64_t>(ranks[r].steps, 1)) * 1e3;
    if (ms > slowest) slowest = ms, slowest_rank = static_cast<int>(r);
    fastest = std::min(fastest, ms);
  }
  obs::JsonObject line;
  line.add("type", "step").add("step", s_.step).add("epoch", epoch).add("loss", s_.last_loss)
      .add("lr", static_cast<double>(lr)).add("samples_per_s", rate).add("wall_time", now - s_.start);
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
  metrics_->write(line);
}

// Evaluation time and GEMM work stay out of the training throughput.
void TrainingRun::evaluate_epoch(int64_t epoch) {
  const double eval_start = now_seconds();
  const uint64_t eval_flops = kernels::gemm_flops();
  resilience_.touch();
  // Stage 3: ranks evaluate different numbers of batches, so the units'
  // gathers would not pair up; evaluation runs on the whole parameters.
  gather_full_parameters();
  nn::forward_context().unit_hooks = nullptr;
  const EvalResult r = evaluate_world(model(), *prepared_.data->test, dp_, pipeline_.forward, pipeline_.width);
  nn::forward_context().unit_hooks = param_shards_.get();
  release_full_parameters();
  resilience_.touch();
  flops_excluded_ += kernels::gemm_flops() - eval_flops;
  summary_.test_loss = r.loss;
  summary_.test_accuracy = r.accuracy;
  summary_.evaluated = true;
  if (metrics_)
    metrics_->write(obs::JsonObject()
                        .add("type", "epoch").add("epoch", epoch).add("step", s_.step)
                        .add("test_loss", r.loss).add("test_accuracy", r.accuracy)
                        .add("wall_time", now_seconds() - s_.start));
  progress_.finish();
  char line[160];
  std::snprintf(line, sizeof line, "epoch %lld: test loss %.4f, test accuracy %.4f",
                static_cast<long long>(epoch + 1), r.loss, r.accuracy);
  progress_.message(line);
  const double eval_end = now_seconds();
  if (s_.step <= config_.output.trace_steps) trace_->span("compute", "evaluate", eval_start, eval_end);
  s_.excluded += eval_end - eval_start;
  s_.window_start += eval_end - eval_start;
}

void TrainingRun::summarize(const std::vector<RankUsage>& usage) {
  summary_.peak_rss_bytes_per_rank.clear();
  for (const RankUsage& u : usage) summary_.peak_rss_bytes_per_rank.push_back(u.peak_rss_bytes);
  summary_.steps = s_.step;
  summary_.world_size = world_size_;  // after an in-process shrink: the ranks at the end
  summary_.samples = std::max<int64_t>(before_.samples, 0) + s_.samples;
  summary_.samples_this_process = s_.samples;
  summary_.restarts = resilience_.generation();
  summary_.checkpoints_saved = before_.checkpoints_saved;
  summary_.checkpoints_failed = before_.checkpoints_failed;
  summary_.final_train_loss = s_.last_loss;
  summary_.train_seconds = now_seconds() - s_.start - s_.excluded;
  summary_.samples_per_s = static_cast<double>(s_.samples) / std::max(summary_.train_seconds, 1e-9);
  if (config_.data.format == "tokens")
    summary_.tokens_per_s = summary_.samples_per_s * static_cast<double>(prepared_.data->train->targets_per_sample());
  summary_.gemm_gflops_per_s = static_cast<double>(kernels::gemm_flops() - flops_start_ - flops_excluded_) / 1e9 /
                               std::max(summary_.train_seconds, 1e-9);
  const obs::PhaseBreakdown phases = phase_totals_.breakdown();
  double comm_share = 0;
  for (const std::vector<double>& row : phases.ms_per_step) {
    double total = 0;
    for (double ms : row) total += ms;
    comm_share += total > 0 ? row[static_cast<size_t>(Phase::kComm)] / total : 0.0;
  }
  if (pipeline_.forward && bubble_window_ > 0) {
    for (double busy : bubble_busy_) summary_.pipeline_bubble_per_rank.push_back(1.0 - busy / bubble_window_);
    const double p = prepared_.mesh.pp, m = pipeline_.micro_batches;
    summary_.pipeline_bubble_textbook = (p - 1) / (m + p - 1);
  }
  summary_.exposed_comm_share =
      phases.ms_per_step.empty() ? 0 : comm_share / static_cast<double>(phases.ms_per_step.size());
  if (checkpointer_) {
    const checkpoint::CheckpointStats c = checkpointer_->stats();
    summary_.checkpoint_path = c.last_path;
    summary_.checkpoints_saved += c.saved;
    summary_.checkpoints_failed += c.failed;
    // Training went on without them, but a resume can only start from the ones that exist.
    if (summary_.checkpoints_failed > 0)
      log_warn(std::to_string(summary_.checkpoints_failed) + " of " +
               std::to_string(summary_.checkpoints_saved + summary_.checkpoints_failed) +
               " checkpoint saves of this run failed" +
               (c.failed > 0 ? "; the last failure: " + c.last_error : " (in the processes before this one)"));
  }
}

void TrainingRun::write_summary_line() {
  const TrainSummary& s = summary_;
  obs::JsonObject line;
  line.add("type", "summary").add("steps", s.steps).add("samples", s.samples)
      .add("samples_this_process", s.samples_this_process).add("world_size", world_size_).add("restarts", s.restarts)
      .add("train_seconds", s.train_seconds).add("samples_per_s", s.samples_per_s).add("tokens_per_s", s.tokens_per_s)
      .add("gemm_gflops_per_s", s.gemm_gflops_per_s).add("final_train_loss", s.final_train_loss)
      .add("exposed_comm_share", s.exposed_comm_share)
      .add("peak_rss_bytes", static_cast<int64_t>(*std::max_element(s.peak_rss_bytes_per_rank.begin(),
                                                                      s.peak_rss_bytes_per_rank.end())))
      .add("peak_rss_bytes_per_rank", s.peak_rss_bytes_per_rank);
  if (s.evaluated) line.add("test_loss", s.test_loss).add("test_accuracy", s.test_accuracy);
  if (!s.pipeline_bubble_per_rank.empty())
    line.add("pipeline_bubble_per_rank", s.pipeline_bubble_per_rank)
        .add("pipeline_bubble_textbook", s.pipeline_bubble_textbook);
  if (usage_meter_) {
    const obs::Cost& c = usage_meter_->cost();
    line.add("cost", obs::JsonObject().add("compute", c.compute).add("storage", c.storage).add("egress", c.egress)
                         .add("total", c.total()))
        .add("currency", usage_meter_->prices().currency).add("example_prices", usage_meter_->prices().examples);
  }
  if (s.checkpoints_saved + s.checkpoints_failed > 0)
    line.add("checkpoints_saved", s.checkpoints_saved).add("checkpoints_failed", s.checkpoints_failed);
  if (checkpointer_ && checkpointer_->saves() > 0) {  // this process's writes
    const checkpoint::CheckpointStats c = checkpointer_->stats();
    line.add("checkpoint_bytes", c.bytes).add("checkpoint_write_seconds", c.write_seconds)
        .add("checkpoint_stall_seconds", checkpointer_->stall_seconds());
  }
  metrics_->write(line);
}

// The page is built from metrics.jsonl, as `gradmesh report` rebuilds it.
void TrainingRun::write_report() {
  const std::string& dir = summary_.run_dir;
  write_file_atomically(dir + "/report.html",
                        obs::render_report_html(obs::report_content(obs::read_run_log(dir + "/metrics.jsonl"))));
}

}  // namespace gradmesh::train::detail
