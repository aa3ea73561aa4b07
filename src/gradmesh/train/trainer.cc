#include "gradmesh/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/config.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/data/batch_loader.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/obs/chrome_trace.h"
#include "gradmesh/obs/jsonl_writer.h"
#include "gradmesh/obs/progress.h"
#include "gradmesh/optim/schedule.h"
#include "gradmesh/train/run_report.h"
#include "gradmesh/train/train_step.h"

namespace gradmesh::train {
namespace {

using parallel::Phase;
using parallel::PhaseTimes;

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimConfig& c, int64_t num_params) {
  std::vector<optim::ParamGroup> groups{{0, num_params, static_cast<float>(c.weight_decay)}};
  if (c.name == "adamw")
    return optim::make_adamw(groups, {static_cast<float>(c.beta1), static_cast<float>(c.beta2), static_cast<float>(c.eps)});
  return optim::make_sgd(groups, {static_cast<float>(c.momentum), static_cast<float>(c.dampening), c.nesterov});
}

void save_weights(nn::Model& model, const std::string& path, const Config& config, int64_t step, int64_t epoch) {
  std::vector<checkpoint::NamedTensor> tensors;
  for (auto& [name, t] : model.named_parameters()) tensors.push_back({name, t});
  const std::map<std::string, std::string> metadata{
      {"format", "pt"}, {"producer", "gradmesh " GRADMESH_VERSION}, {"model.kind", config.model.kind},
      {"step", std::to_string(step)}, {"epoch", std::to_string(epoch)}};
  checkpoint::write_safetensors(path, tensors, metadata,
                                config.output.weights_dtype == "BF16" ? DType::kBF16 : DType::kF32);
}

// Mean over ranks of one phase's time per step, in milliseconds.
double mean_ms(const std::vector<PhaseTimes>& ranks, Phase phase) {
  double sum = 0;
  for (const PhaseTimes& t : ranks) sum += t.steps ? t[phase] / static_cast<double>(t.steps) : 0.0;
  return sum / static_cast<double>(ranks.size()) * 1e3;
}

std::string rank_label(const comm::ProcessGroup* group) {
  return multi_rank(group) ? "rank " + std::to_string(group->rank()) + ": " : "";
}

// What a rank knows about the step loop so far; rank 0 turns it into metrics,
// progress and the report.
struct LoopState {
  int64_t step = 0, samples = 0;
  double start = 0, excluded = 0;  // evaluation time is kept out of the throughput
  PhaseTimes window;               // this rank's times since the last log line
  int64_t window_samples = 0;
  double window_start = 0;
  double last_loss = 0;            // global mean loss of the last log interval
};

// Summary lines of a log interval: global loss, per-phase means, spread, straggler.
void log_interval(LoopState& s, comm::ProcessGroup* group, float lr, int64_t epoch,
                  obs::JsonlWriter* metrics, RunReport* report, parallel::SlowRankDetector& detector,
                  obs::Progress& progress) {
  const std::vector<PhaseTimes> ranks = parallel::gather_phase_times(group, s.window);
  double loss_sum = 0;
  for (const PhaseTimes& t : ranks) loss_sum += t.loss_sum;
  s.last_loss = loss_sum / static_cast<double>(std::max<int64_t>(s.window.steps, 1));
  const double now = now_seconds();
  const double rate = static_cast<double>(s.window_samples) / std::max(now - s.window_start, 1e-9);
  if (metrics) {
    double slowest = 0, fastest = 1e300;
    int slowest_rank = 0;
    for (size_t r = 0; r < ranks.size(); ++r) {
      const double ms = ranks[r].total() / static_cast<double>(std::max<int64_t>(ranks[r].steps, 1)) * 1e3;
      if (ms > slowest) slowest = ms, slowest_rank = static_cast<int>(r);
      fastest = std::min(fastest, ms);
    }
    obs::JsonObject line;
    line.add("type", "step").add("step", s.step).add("epoch", epoch).add("loss", s.last_loss)
        .add("lr", static_cast<double>(lr)).add("samples_per_s", rate).add("wall_time", now - s.start);
    for (int p = 0; p < parallel::kPhaseCount; ++p)
      line.add(std::string(parallel::phase_name(static_cast<Phase>(p))) + "_ms", mean_ms(ranks, static_cast<Phase>(p)));
    line.add("world_size", static_cast<int64_t>(ranks.size())).add("step_ms_min", fastest)
        .add("step_ms_max", slowest).add("slowest_rank", slowest_rank);
    metrics->write(line);
    report->add_step(s.step, s.last_loss, rate);
    report->add_phase_window(ranks);
    if (const std::optional<int> slow = detector.observe(ranks)) {
      const std::string note = "step " + std::to_string(s.step) + ": " + detector.describe(ranks, *slow);
      progress.message("warning: " + note);
      report->add_note(note);
      metrics->write(obs::JsonObject().add("type", "slow_rank").add("step", s.step).add("rank", *slow).add("message", note));
    }
  }
  s.window = PhaseTimes{};
  s.window_samples = 0;
  s.window_start = now;
}

}  // namespace

TrainSummary run_training(const Config& config, std::FILE* progress_stream, std::shared_ptr<comm::ProcessGroup> group) {
  const TrainConfig& tc = config.train;
  comm::ProcessGroup* world = group.get();
  const int rank = world ? world->rank() : 0, world_size = world ? world->size() : 1;
  const bool leader = rank == 0;
  kernels::set_num_threads(static_cast<int>(tc.threads));
  PreparedRank prepared = prepare_rank(config, world);
  nn::Model& model = *prepared.model;
  std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(config.optim, model.num_parameters());
  std::unique_ptr<parallel::GradientReducer> reducer;
  if (multi_rank(world)) reducer = std::make_unique<parallel::GradientReducer>(model, group, reducer_options(config.parallel));

  data::BatchLoaderOptions loader_options;
  loader_options.global_batch = tc.batch_size;
  loader_options.seed = tc.seed;
  loader_options.shuffle = config.data.shuffle;
  loader_options.drop_last = config.data.drop_last;
  loader_options.prefetch = static_cast<int>(config.data.prefetch);
  loader_options.rank = rank;
  loader_options.world = world_size;
  data::BatchLoader loader(prepared.train_set, loader_options);
  const int64_t steps_per_epoch = prepared.steps.steps_per_epoch;
  const int64_t total_steps = prepared.steps.total_steps;

  optim::ScheduleOptions schedule{config.schedule.kind, config.schedule.warmup_steps, config.schedule.step_size,
                                  static_cast<float>(config.schedule.gamma), total_steps,
                                  static_cast<float>(config.schedule.min_lr)};
  const auto base_lr = static_cast<float>(config.optim.lr);
  optim::validate_schedule(schedule, base_lr);

  TrainSummary summary;
  summary.world_size = world_size;
  summary.run_dir = open_run_dir(config.output, world);
  std::unique_ptr<obs::JsonlWriter> metrics;
  RunReport report;
  if (leader) {
    std::ofstream(summary.run_dir + "/config.toml") << config_to_toml(config);
    metrics = std::make_unique<obs::JsonlWriter>(summary.run_dir + "/metrics.jsonl");
  }
  obs::Progress progress(leader ? obs::progress_mode_from_env(progress_stream) : obs::ProgressMode::kOff,
                         progress_stream, tc.log_every);
  std::string backend = world ? world->backend() : "none";
  progress.message("run " + summary.run_dir + ": " + config.model.kind + " with " +
                   std::to_string(model.num_parameters()) + " parameters, " +
                   std::to_string(prepared.train_set.count) + " training samples, " + std::to_string(total_steps) +
                   " steps" + (multi_rank(world) ? ", " + std::to_string(world_size) + " ranks over " + backend : ""));
  parallel::SlowRankDetector detector(config.parallel.slow_rank_factor, 3);

  LoopState s;
  s.start = s.window_start = now_seconds();
  obs::ChromeTrace trace(rank, s.start);
  const uint64_t flops_start = kernels::gemm_flops();
  uint64_t flops_excluded = 0;
  StepRunner runner(model, *optimizer, config, reducer.get());
  nn::forward_context().seed = tc.seed;
  int64_t epochs_run = 0;
  for (int64_t epoch = 0; epoch < tc.epochs && s.step < total_steps; ++epoch) {
    loader.start_epoch(epoch);
    data::Batch batch;
    int64_t step_in_epoch = 0;
    while (s.step < total_steps) {
      const double t0 = now_seconds();
      if (!loader.next(batch)) break;
      const double t1 = now_seconds();
      s.window[Phase::kData] += t1 - t0;
      const bool traced = s.step < config.output.trace_steps;
      if (traced) trace.span("compute", "data", t0, t1);
      const float lr = optim::lr_at(schedule, base_lr, s.step);
      nn::forward_context().step = static_cast<uint64_t>(s.step);
      const double loss = runner.run(batch, lr, s.window, traced ? &trace : nullptr);
      if (traced) trace.span("compute", "step " + std::to_string(s.step), t0, now_seconds());
      if (!std::isfinite(loss))
        throw_error(ErrorKind::kInternal, rank_label(world) + "step " + std::to_string(s.step),
                    "the loss is not finite; lower optim.lr or enable optim.clip_grad_norm");
      ++s.step;
      ++step_in_epoch;
      s.samples += batch.global_batch_len;
      s.window_samples += batch.global_batch_len;
      // With several ranks the global loss is known at log steps; until the
      // first one, this rank's share scaled by the world size estimates it.
      if (!multi_rank(world) || s.step <= tc.log_every) s.last_loss = loss * world_size;
      if (s.step % tc.log_every == 0 || s.step == total_steps)
        log_interval(s, world, lr, epoch, metrics.get(), &report, detector, progress);
      const double elapsed = now_seconds() - s.start - s.excluded;
      progress.update({epoch, tc.epochs, step_in_epoch, std::min(steps_per_epoch, total_steps), s.last_loss,
                       static_cast<double>(s.samples) / std::max(elapsed, 1e-9),
                       elapsed / static_cast<double>(s.step) * static_cast<double>(total_steps - s.step)});
    }
    epochs_run = epoch + 1;
    if (tc.eval_every_epoch) {
      const double eval_start = now_seconds();
      const uint64_t eval_flops = kernels::gemm_flops();
      const EvalResult r = evaluate_world(model, prepared.test_set, world);
      flops_excluded += kernels::gemm_flops() - eval_flops;
      summary.test_loss = r.loss;
      summary.test_accuracy = r.accuracy;
      summary.evaluated = true;
      if (metrics)
        metrics->write(obs::JsonObject()
                           .add("type", "epoch").add("epoch", epoch).add("step", s.step)
                           .add("test_loss", r.loss).add("test_accuracy", r.accuracy)
                           .add("wall_time", now_seconds() - s.start));
      report.add_epoch(epoch, r.loss, r.accuracy);
      progress.finish();
      char line[160];
      std::snprintf(line, sizeof line, "epoch %lld: test loss %.4f, test accuracy %.4f",
                    static_cast<long long>(epoch + 1), r.loss, r.accuracy);
      progress.message(line);
      const double eval_end = now_seconds();
      if (s.step <= config.output.trace_steps) trace.span("compute", "evaluate", eval_start, eval_end);
      s.excluded += eval_end - eval_start;
      s.window_start += eval_end - eval_start;
    }
  }
  progress.finish();
  summary.steps = s.step;
  summary.samples = s.samples;
  summary.final_train_loss = s.last_loss;
  summary.train_seconds = now_seconds() - s.start - s.excluded;
  summary.samples_per_s = static_cast<double>(s.samples) / std::max(summary.train_seconds, 1e-9);
  summary.gemm_gflops_per_s = static_cast<double>(kernels::gemm_flops() - flops_start - flops_excluded) / 1e9 /
                              std::max(summary.train_seconds, 1e-9);
  const obs::PhaseBreakdown phases = report.phase_breakdown();
  double comm_share = 0;
  for (const std::vector<double>& row : phases.ms_per_step) {
    double total = 0;
    for (double ms : row) total += ms;
    comm_share += total > 0 ? row[static_cast<size_t>(Phase::kComm)] / total : 0.0;
  }
  summary.exposed_comm_share = phases.ms_per_step.empty() ? 0 : comm_share / static_cast<double>(phases.ms_per_step.size());
  if (config.output.trace_steps > 0) trace.write(summary.run_dir + "/trace.rank" + std::to_string(rank) + ".json");
  if (!leader) return summary;
  if (config.output.save_weights) {
    summary.weights_path = summary.run_dir + "/model.safetensors";
    save_weights(model, summary.weights_path, config, s.step, epochs_run);
  }
  obs::JsonObject final_line;
  final_line.add("type", "summary").add("steps", s.step).add("samples", s.samples).add("world_size", world_size)
      .add("train_seconds", summary.train_seconds).add("samples_per_s", summary.samples_per_s)
      .add("gemm_gflops_per_s", summary.gemm_gflops_per_s).add("final_train_loss", summary.final_train_loss)
      .add("exposed_comm_share", summary.exposed_comm_share);
  if (summary.evaluated) final_line.add("test_loss", summary.test_loss).add("test_accuracy", summary.test_accuracy);
  metrics->write(final_line);
  if (config.output.report) {
    char rate[64];
    std::snprintf(rate, sizeof rate, "%.0f samples/s", summary.samples_per_s);
    report.add_fact("model", config.model.kind + ", " + std::to_string(model.num_parameters()) + " parameters");
    report.add_fact("ranks", std::to_string(world_size) + (multi_rank(world) ? " (" + backend + ")" : ""));
    report.add_fact("steps", std::to_string(s.step) + " of global batch " + std::to_string(tc.batch_size));
    report.add_fact("throughput", rate);
    if (summary.evaluated) report.add_fact("final test accuracy", std::to_string(summary.test_accuracy));
    report.add_fact("exposed communication", std::to_string(summary.exposed_comm_share * 100).substr(0, 5) + "% of step time");
    report.write(summary.run_dir + "/report.html", "gradmesh run " + summary.run_dir);
  }
  return summary;
}

}  // namespace gradmesh::train
