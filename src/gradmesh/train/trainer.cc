#include "gradmesh/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/config.h"
#include "gradmesh/core/atomic_file.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/data/batch_loader.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/obs/chrome_trace.h"
#include "gradmesh/obs/jsonl_writer.h"
#include "gradmesh/obs/progress.h"
#include "gradmesh/optim/schedule.h"
#include "gradmesh/parallel/split_balancer.h"
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

data::BatchLoaderOptions loader_options(const Config& config, int rank, int world_size) {
  data::BatchLoaderOptions o;
  o.global_batch = config.train.batch_size;
  o.seed = config.train.seed;
  o.shuffle = config.data.shuffle;
  o.drop_last = config.data.drop_last;
  o.prefetch = static_cast<int>(config.data.prefetch);
  o.rank = rank;
  o.world = world_size;
  return o;
}

optim::ScheduleOptions schedule_options(const Config& config, int64_t total_steps) {
  const ScheduleConfig& c = config.schedule;
  return {c.kind, c.warmup_steps, c.step_size, static_cast<float>(c.gamma), total_steps, static_cast<float>(c.min_lr)};
}

// Mean over ranks of one phase's time per step, in milliseconds.
double mean_ms(const std::vector<PhaseTimes>& ranks, Phase phase) {
  double sum = 0;
  for (const PhaseTimes& t : ranks) sum += t.steps ? t[phase] / static_cast<double>(t.steps) : 0.0;
  return sum / static_cast<double>(ranks.size()) * 1e3;
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

// One training run on this rank, in the order it happens: setup (constructor:
// data, model, optimizer, reducer, step plan; nothing written yet), then
// run(): outputs opened, epochs of steps with an evaluation after each, the
// summary, and rank 0's final files.
class TrainingRun {
 public:
  TrainingRun(const Config& config, std::FILE* progress_stream, std::shared_ptr<comm::ProcessGroup> group);
  TrainSummary run();

 private:
  nn::Model& model() { return *prepared_.model; }
  void open_outputs();
  void announce();
  void run_epoch(int64_t epoch);
  void train_step(const data::Batch& batch, int64_t epoch, double data_start, double data_end);
  void show_progress(int64_t epoch, int64_t step_in_epoch);
  void log_interval(float lr, int64_t epoch);
  void write_step_line(const std::vector<PhaseTimes>& ranks, float lr, int64_t epoch, double rate, double now);
  void evaluate_epoch(int64_t epoch);
  void summarize();
  void write_summary_line();
  void write_report();

  const Config& config_;
  const TrainConfig& tc_;
  std::shared_ptr<comm::ProcessGroup> group_;
  comm::ProcessGroup* world_;  // null on a single process
  const int rank_, world_size_;
  const bool leader_;
  PreparedRank prepared_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<parallel::GradientReducer> reducer_;
  std::unique_ptr<data::BatchLoader> loader_;
  optim::ScheduleOptions schedule_;
  float base_lr_ = 0;
  std::unique_ptr<StepRunner> runner_;

  TrainSummary summary_;
  std::unique_ptr<obs::JsonlWriter> metrics_;  // rank 0 only
  RunReport report_;
  obs::Progress progress_;
  parallel::SlowRankDetector detector_;
  std::unique_ptr<parallel::SplitBalancer> balancer_;  // parallel.straggler = "rebalance" with several ranks
  LoopState s_;
  std::unique_ptr<obs::ChromeTrace> trace_;
  uint64_t flops_start_ = 0, flops_excluded_ = 0;
  int64_t epochs_run_ = 0;
};

TrainingRun::TrainingRun(const Config& config, std::FILE* progress_stream, std::shared_ptr<comm::ProcessGroup> group)
    : config_(config), tc_(config.train), group_(std::move(group)), world_(group_.get()),
      rank_(world_ ? world_->rank() : 0), world_size_(world_ ? world_->size() : 1), leader_(rank_ == 0),
      progress_(leader_ ? obs::progress_mode_from_env(progress_stream) : obs::ProgressMode::kOff, progress_stream,
                tc_.log_every),
      detector_(config.parallel.slow_rank_factor, 3) {
  kernels::set_num_threads(static_cast<int>(tc_.threads));
  prepared_ = prepare_rank(config_, world_);
  optimizer_ = make_optimizer(config_.optim, model().num_parameters());
  if (multi_rank(world_))
    reducer_ = std::make_unique<parallel::GradientReducer>(model(), group_, reducer_options(config_.parallel));
  loader_ = std::make_unique<data::BatchLoader>(prepared_.train_set, loader_options(config_, rank_, world_size_));
  if (multi_rank(world_) && config_.parallel.straggler == "rebalance")
    balancer_ = std::make_unique<parallel::SplitBalancer>(world_size_);
  schedule_ = schedule_options(config_, prepared_.steps.total_steps);
  base_lr_ = static_cast<float>(config_.optim.lr);
  optim::validate_schedule(schedule_, base_lr_);
  runner_ = std::make_unique<StepRunner>(model(), *optimizer_, config_, reducer_.get());
}

TrainSummary TrainingRun::run() {
  open_outputs();
  announce();
  s_.start = s_.window_start = now_seconds();
  trace_ = std::make_unique<obs::ChromeTrace>(rank_, s_.start);
  flops_start_ = kernels::gemm_flops();
  nn::forward_context().seed = tc_.seed;
  for (int64_t epoch = 0; epoch < tc_.epochs && s_.step < prepared_.steps.total_steps; ++epoch) {
    run_epoch(epoch);
    epochs_run_ = epoch + 1;
    if (tc_.eval_every_epoch) evaluate_epoch(epoch);
  }
  progress_.finish();
  summarize();
  if (config_.output.trace_steps > 0) trace_->write(summary_.run_dir + "/trace.rank" + std::to_string(rank_) + ".json");
  if (!leader_) return summary_;
  if (config_.output.save_weights) {
    summary_.weights_path = summary_.run_dir + "/model.safetensors";
    save_weights(model(), summary_.weights_path, config_, s_.step, epochs_run_);
  }
  write_summary_line();
  if (config_.output.report) write_report();
  return summary_;
}

void TrainingRun::open_outputs() {
  const Config& config = config_;
  TrainSummary& summary = summary_;
  summary.world_size = world_size_;
  summary.run_dir = open_run_dir(config.output, world_);
  if (leader_) {
    write_file_atomically(summary.run_dir + "/config.toml", config_to_toml(config));
    metrics_ = std::make_unique<obs::JsonlWriter>(summary.run_dir + "/metrics.jsonl");
  }
}

void TrainingRun::announce() {
  const std::string backend = world_ ? world_->backend() : "none";
  progress_.message("run " + summary_.run_dir + ": " + config_.model.kind + " with " +
                    std::to_string(model().num_parameters()) + " parameters, " +
                    std::to_string(prepared_.train_set.count) + " training samples, " +
                    std::to_string(prepared_.steps.total_steps) + " steps" +
                    (multi_rank(world_) ? ", " + std::to_string(world_size_) + " ranks over " + backend : ""));
}

void TrainingRun::run_epoch(int64_t epoch) {
  loader_->start_epoch(epoch);
  data::Batch batch;
  for (int64_t step_in_epoch = 1; s_.step < prepared_.steps.total_steps; ++step_in_epoch) {
    const double data_start = now_seconds();
    if (!loader_->next(batch)) break;
    train_step(batch, epoch, data_start, now_seconds());
    show_progress(epoch, step_in_epoch);
  }
}

void TrainingRun::train_step(const data::Batch& batch, int64_t epoch, double data_start, double data_end) {
  s_.window[Phase::kData] += data_end - data_start;
  const bool traced = s_.step < config_.output.trace_steps;
  if (traced) trace_->span("compute", "data", data_start, data_end);
  const float lr = optim::lr_at(schedule_, base_lr_, s_.step);
  nn::forward_context().step = static_cast<uint64_t>(s_.step);
  const double loss = runner_->run(batch, lr, s_.step, s_.window, traced ? trace_.get() : nullptr);
  if (traced) trace_->span("compute", "step " + std::to_string(s_.step), data_start, now_seconds());
  ++s_.step;
  s_.samples += batch.global_batch_len;
  s_.window_samples += batch.global_batch_len;
  s_.window.samples += static_cast<int64_t>(batch.labels.size());
  // With several ranks the global loss is known at log steps; until the
  // first one, this rank's share scaled by the world size estimates it.
  if (!multi_rank(world_) || s_.step <= tc_.log_every) s_.last_loss = loss * world_size_;
  if (s_.step % tc_.log_every == 0 || s_.step == prepared_.steps.total_steps) log_interval(lr, epoch);
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
  s_.last_loss = loss_sum / static_cast<double>(std::max<int64_t>(s_.window.steps, 1));
  const double now = now_seconds();
  const double rate = static_cast<double>(s_.window_samples) / std::max(now - s_.window_start, 1e-9);
  if (metrics_) {
    write_step_line(ranks, lr, epoch, rate, now);
    report_.add_step(s_.step, s_.last_loss, rate);
    report_.add_phase_window(ranks);
    if (const std::optional<int> slow = detector_.observe(ranks)) {
      const std::string note = "step " + std::to_string(s_.step) + ": " + detector_.describe(ranks, *slow);
      progress_.message("warning: " + note);
      report_.add_note(note);
      obs::JsonObject event;
      event.add("type", "slow_rank").add("step", s_.step).add("rank", *slow).add("message", note);
      if (const std::optional<Phase> phase = parallel::dominant_slow_phase(ranks, *slow))
        event.add("phase", parallel::phase_name(*phase));
      metrics_->write(event);
    }
  }
  // Every rank sees the same gathered times, so every balancer picks the
  // same shares; they apply from the next step on.
  if (const auto shares = balancer_ ? balancer_->observe(ranks) : std::nullopt) {
    loader_->set_split(s_.step, *shares);
    const auto total = static_cast<double>(std::accumulate(shares->begin(), shares->end(), int64_t{0}));
    std::vector<double> fractions;
    for (int64_t share : *shares) fractions.push_back(static_cast<double>(share) / total);
    if (metrics_) metrics_->write(obs::JsonObject().add("type", "rebalance").add("step", s_.step).add("shares", fractions));
  }
  s_.window = PhaseTimes{};
  s_.window_samples = 0;
  s_.window_start = now;
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
  metrics_->write(line);
}

// Evaluation time and GEMM work stay out of the training throughput.
void TrainingRun::evaluate_epoch(int64_t epoch) {
  const double eval_start = now_seconds();
  const uint64_t eval_flops = kernels::gemm_flops();
  const EvalResult r = evaluate_world(model(), prepared_.test_set, world_);
  flops_excluded_ += kernels::gemm_flops() - eval_flops;
  summary_.test_loss = r.loss;
  summary_.test_accuracy = r.accuracy;
  summary_.evaluated = true;
  if (metrics_)
    metrics_->write(obs::JsonObject()
                        .add("type", "epoch").add("epoch", epoch).add("step", s_.step)
                        .add("test_loss", r.loss).add("test_accuracy", r.accuracy)
                        .add("wall_time", now_seconds() - s_.start));
  report_.add_epoch(epoch, r.loss, r.accuracy);
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

void TrainingRun::summarize() {
  summary_.steps = s_.step;
  summary_.samples = s_.samples;
  summary_.final_train_loss = s_.last_loss;
  summary_.train_seconds = now_seconds() - s_.start - s_.excluded;
  summary_.samples_per_s = static_cast<double>(s_.samples) / std::max(summary_.train_seconds, 1e-9);
  summary_.gemm_gflops_per_s = static_cast<double>(kernels::gemm_flops() - flops_start_ - flops_excluded_) / 1e9 /
                               std::max(summary_.train_seconds, 1e-9);
  const obs::PhaseBreakdown phases = report_.phase_breakdown();
  double comm_share = 0;
  for (const std::vector<double>& row : phases.ms_per_step) {
    double total = 0;
    for (double ms : row) total += ms;
    comm_share += total > 0 ? row[static_cast<size_t>(Phase::kComm)] / total : 0.0;
  }
  summary_.exposed_comm_share =
      phases.ms_per_step.empty() ? 0 : comm_share / static_cast<double>(phases.ms_per_step.size());
}

void TrainingRun::write_summary_line() {
  const TrainSummary& s = summary_;
  obs::JsonObject line;
  line.add("type", "summary").add("steps", s.steps).add("samples", s.samples).add("world_size", world_size_)
      .add("train_seconds", s.train_seconds).add("samples_per_s", s.samples_per_s)
      .add("gemm_gflops_per_s", s.gemm_gflops_per_s).add("final_train_loss", s.final_train_loss)
      .add("exposed_comm_share", s.exposed_comm_share);
  if (s.evaluated) line.add("test_loss", s.test_loss).add("test_accuracy", s.test_accuracy);
  metrics_->write(line);
}

void TrainingRun::write_report() {
  const TrainSummary& s = summary_;
  const std::string backend = world_ ? world_->backend() : "none";
  char rate[64];
  std::snprintf(rate, sizeof rate, "%.0f samples/s", s.samples_per_s);
  report_.add_fact("model", config_.model.kind + ", " + std::to_string(model().num_parameters()) + " parameters");
  report_.add_fact("ranks", std::to_string(world_size_) + (multi_rank(world_) ? " (" + backend + ")" : ""));
  report_.add_fact("steps", std::to_string(s.steps) + " of global batch " + std::to_string(tc_.batch_size));
  report_.add_fact("throughput", rate);
  if (s.evaluated) report_.add_fact("final test accuracy", std::to_string(s.test_accuracy));
  report_.add_fact("exposed communication", std::to_string(s.exposed_comm_share * 100).substr(0, 5) + "% of step time");
  report_.write(s.run_dir + "/report.html", "gradmesh run " + s.run_dir);
}

}  // namespace

TrainSummary run_training(const Config& config, std::FILE* progress_stream, std::shared_ptr<comm::ProcessGroup> group) {
  return TrainingRun(config, progress_stream, std::move(group)).run();
}

}  // namespace gradmesh::train
