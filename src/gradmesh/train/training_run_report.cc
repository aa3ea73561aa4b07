// The reporting half of a training run (training_run.h): progress, log
// intervals, straggler rebalancing, evaluation and the summary; the observer
// (run_observer.h) writes them down.
#include "gradmesh/train/training_run.h"

namespace gradmesh::train::detail {

std::vector<RankUsage> TrainingRun::meter_usage() {
  const double start = now_seconds();
  std::vector<RankUsage> ranks = gather_rank_usage(world_, measure_rank_usage());
  observer_->usage(s_.step, ranks, (now_seconds() - start) * 1e3);
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
  // Rank 0 reports the interval (every rank gathered the same figures).
  if (leader_) {
    observer_->interval({s_.step, epoch, s_.last_loss, static_cast<double>(lr), rate, now - s_.start, &ranks});
    phase_totals_.add_window(ranks);
    if (const std::optional<int> slow = detector_.observe(ranks)) {
      const std::string note = "step " + std::to_string(s_.step) + ": " + detector_.describe(ranks, *slow);
      progress_.notice("warning: " + note, true);
      std::optional<std::string> phase;
      if (const std::optional<Phase> p = parallel::dominant_slow_phase(ranks, *slow)) phase = parallel::phase_name(*p);
      observer_->slow_rank(s_.step, *slow, note, phase);
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
  observer_->rebalanced(s_.step, fractions);
}

// Evaluation time and GEMM work stay out of the training throughput.
void TrainingRun::evaluate_epoch(int64_t epoch) {
  const double eval_start = now_seconds();
  const uint64_t eval_flops = kernels::gemm_flops();
  resilience_.touch();
  // Stage 3: ranks evaluate different numbers of batches, so the units'
  // gathers would not pair up; evaluation runs on the whole parameters.
  sync_->gather_full_parameters();
  const EvalResult r = evaluate_world(model(), *prepared_.data->test, dp_, pipeline_.forward, pipeline_.width);
  sync_->release_full_parameters();
  resilience_.touch();
  flops_excluded_ += kernels::gemm_flops() - eval_flops;
  summary_.test_loss = r.loss;
  summary_.test_accuracy = r.accuracy;
  summary_.evaluated = true;
  observer_->evaluated(epoch, s_.step, r.loss, r.accuracy, now_seconds() - s_.start);
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

}  // namespace gradmesh::train::detail
