#include "gradmesh/train/trainer.h"

#include "gradmesh/kernels/gemm_bf16.h"
#include "gradmesh/kernels/isa.h"
#include "gradmesh/train/gemm_roofs.h"
#include "gradmesh/train/training_run.h"

namespace gradmesh::train {
namespace detail {
namespace {

void save_weights(const std::vector<std::pair<std::string, Tensor>>& named, const std::string& path,
                  const Config& config, int64_t step, int64_t epoch) {
  std::vector<checkpoint::NamedTensor> tensors;
  for (auto& [name, t] : named) tensors.push_back({name, t});
  const std::map<std::string, std::string> metadata{
      {"format", "pt"}, {"producer", "gradmesh " GRADMESH_VERSION}, {"model.kind", config.model.kind},
      {"step", std::to_string(step)}, {"epoch", std::to_string(epoch)}};
  checkpoint::write_safetensors(path, tensors, metadata,
                                config.output.weights_dtype == "BF16" ? DType::kBF16 : DType::kF32);
}

data::BatchLoaderOptions loader_options(const Config& config, const data::SampleSource& source, int rank,
                                        int world_size) {
  data::BatchLoaderOptions o;
  // A sharded set's shuffle blocks: data.shuffle_block_shards shards' worth of samples.
  const std::vector<int64_t> shards = source.shard_sizes();
  if (!shards.empty() && config.data.shuffle_block_shards > 0) {
    const auto count = static_cast<int64_t>(shards.size());
    o.shuffle_block = config.data.shuffle_block_shards * ((source.count() + count - 1) / count);
  }
  o.global_batch = config.train.batch_size;
  o.seed = config.train.seed;
  o.shuffle = config.data.shuffle;
  o.drop_last = config.data.drop_last;
  o.prefetch = static_cast<int>(config.data.prefetch);
  o.workers = static_cast<int>(config.data.workers);
  o.rank = rank;
  o.world = world_size;
  return o;
}

optim::ScheduleOptions schedule_options(const Config& config, int64_t total_steps) {
  const ScheduleConfig& c = config.schedule;
  return {c.kind, c.warmup_steps, c.step_size, static_cast<float>(c.gamma), total_steps, static_cast<float>(c.min_lr)};
}

// into += after - before, for the counters a step adds to.
void add_difference(PhaseTimes& into, const PhaseTimes& before, const PhaseTimes& after) {
  for (size_t p = 0; p < into.seconds.size(); ++p) into.seconds[p] += after.seconds[p] - before.seconds[p];
  into.steps += after.steps - before.steps;
  into.samples += after.samples - before.samples;
  into.loss_sum += after.loss_sum - before.loss_sum;
}

}  // namespace

TrainingRun::TrainingRun(const Config& config, std::FILE* progress_stream, std::shared_ptr<comm::ProcessGroup> group,
                         RunOptions options)
    : config_(config), tc_(config.train), options_(std::move(options)), group_(std::move(group)), world_(group_.get()),
      rank_(world_ ? world_->rank() : 0), world_size_(world_ ? world_->size() : 1), leader_(rank_ == 0),
      resilience_(config, options_),
      progress_(leader_ ? obs::progress_mode_from_env(progress_stream) : obs::ProgressMode::kOff, progress_stream,
                tc_.log_every),
      detector_(config.parallel.slow_rank_factor, 3) {
  kernels::set_num_threads(static_cast<int>(tc_.threads));
  kernels::set_matmul_precision(tc_.precision == "bf16" ? kernels::MatmulPrecision::kBf16
                                                        : kernels::MatmulPrecision::kFp32);
  kernels::set_portable_numerics(tc_.portable_numerics);
  // A replacement gets its state from the survivors, who do not repeat the start-up collectives.
  prepared_ = options_.replacement ? prepare_replacement(config_, world_size_) : prepare_rank(config_, group_);
  adopt_dp_group(prepared_.dp_group ? prepared_.dp_group : group_);
  set_up_pipeline();
  // The strategy decides which elements this rank's optimizer owns (ZeRO's layout), so it comes first.
  sync_ = make_gradient_sync(config_, model(), dp_group_);
  if (prepared_.deferred_init) sync_->initialize_owned(model());
  optimizer_ = make_optimizer(config_, sync_->param_groups(config_, model()));
  schedule_ = schedule_options(config_, prepared_.steps.total_steps);
  base_lr_ = static_cast<float>(config_.optim.lr);
  optim::validate_schedule(schedule_, base_lr_);
  build_step_machinery();
}

void TrainingRun::set_up_pipeline() {
  if (!prepared_.pp_forward) return;
  pipeline_.forward = prepared_.pp_forward.get();
  pipeline_.backward = prepared_.pp_backward.get();
  pipeline_.tied = prepared_.pp_tied.get();
  pipeline_.schedule = parallel::parse_pipeline_schedule(config_.parallel.pipeline_schedule, "parallel.pipeline_schedule");
  pipeline_.micro_batches = static_cast<int>(config_.parallel.micro_batches);
  pipeline_.width = config_.model.n_embd;
  for (const nn::ParameterInfo& p : model().parameters())
    if (p.name == "transformer.wte.weight" && pipeline_.tied) {
      pipeline_.tied_offset = p.offset;
      pipeline_.tied_numel = p.numel;
    }
}

void TrainingRun::adopt_dp_group(std::shared_ptr<comm::ProcessGroup> dp) {
  dp_group_ = std::move(dp);
  dp_ = dp_group_.get();
  dp_rank_ = dp_ ? dp_->rank() : 0;
  dp_size_ = dp_ ? dp_->size() : 1;
}

// What depends on the group: rebuilt after an in-process recovery.
void TrainingRun::build_step_machinery() {
  const data::SampleSource& train = *prepared_.data->train;
  loader_ = std::make_unique<data::BatchLoader>(train, loader_options(config_, train, dp_rank_, dp_size_));
  runner_ = std::make_unique<StepRunner>(model(), *optimizer_, config_, *sync_, prepared_.whole.get(),
                                         pipeline_.forward ? &pipeline_ : nullptr);
  stop_vote_ = std::make_unique<StopVote>(world_);
  balancer_.reset();
  if (multi_rank(dp_) && config_.parallel.straggler == "rebalance")
    balancer_ = std::make_unique<parallel::SplitBalancer>(dp_size_);
}

TrainSummary TrainingRun::run() {
  open_outputs();
  // Stage 3: the parameters are whole now (broadcast, or loaded from a
  // checkpoint on every rank); from here on a rank keeps only its pieces and
  // the model gathers each unit around its use.
  sync_->shard_parameters(config_);
  struct HooksOff {
    ~HooksOff() { nn::forward_context().unit_hooks = nullptr; }
  } hooks_off;
  announce();
  s_.start = s_.window_start = now_seconds();
  trace_ = std::make_unique<obs::ChromeTrace>(rank_, s_.start);
  flops_start_ = kernels::gemm_flops();
  nn::forward_context().seed = tc_.seed;
  // A failure during a recovery (another peer lost while re-forming) is
  // recovered from the same way, under the generation after.
  std::optional<std::string> failure;
  for (;;) {
    try {
      if (failure) recover(*std::exchange(failure, std::nullopt));
      run_epochs();
      break;
    } catch (const Error& e) {
      if (!resilience_.can_recover(e)) throw;
      failure = e.what();
    }
  }
  progress_.finish();
  if (checkpointer_) checkpointer_->finish();
  resilience_.finished();
  // The whole run's consumption, before the summary line quotes its cost and peak memory.
  summarize(meter_usage());
  if (config_.output.trace_steps > 0) trace_->write(summary_.run_dir + "/trace.rank" + std::to_string(rank_) + ".json");
  if (config_.output.save_weights && !summary_.stopped) sync_->gather_full_parameters();
  // A split model's weights are assembled on every rank of its group; rank 0 writes them.
  const std::vector<std::pair<std::string, Tensor>> weights =
      !config_.output.save_weights || summary_.stopped ? std::vector<std::pair<std::string, Tensor>>{}
      : prepared_.whole                                ? whole_named_parameters(*prepared_.whole, model())
                                                       : model().named_parameters();
  if (!leader_ || summary_.stopped) return summary_;
  if (config_.output.save_weights) {
    summary_.weights_path = summary_.run_dir + "/model.safetensors";
    save_weights(weights, summary_.weights_path, config_, s_.step, epochs_run_);
  }
  CheckpointFigures written;
  if (checkpointer_ && checkpointer_->saves() > 0) {  // this process's writes
    const checkpoint::CheckpointStats c = checkpointer_->stats();
    written = {checkpointer_->saves(), c.bytes, c.write_seconds, checkpointer_->stall_seconds()};
  }
  observer_->finished(summary_, written, config_.output.report);
  return summary_;
}

void TrainingRun::open_outputs() {
  summary_.world_size = world_size_;
  checkpoint::TrainerState state;
  bool resumed = false;
  std::vector<std::string> notes, skipped;  // skipped: checkpoints that did not verify, and why
  if (options_.replacement) {
    // The survivors hold the run directory and the state; the replacement joins them.
    resilience_.hand_over(*group_, false, model(), *optimizer_, state, summary_.run_dir);
    resumed = true;
  } else {
    std::optional<checkpoint::LoadedCheckpoint> loaded;
    summary_.run_dir = on_leader(world_, [&] {
      RunPlan plan = plan_run(config_, options_);
      notes = plan.notes;
      if (plan.checkpoint) skipped = plan.checkpoint->skipped;
      loaded = std::move(plan.checkpoint);
      return create_run_dir(plan.parent, plan.id, plan.reuse);
    }, "run directory");
    if (!leader_) {
      std::error_code ignored;  // the writes that follow report a directory that could not be made
      create_private_directories(summary_.run_dir, ignored);
    }
    resumed = prepared_.whole ? resume_split_ranks(world_, loaded, *prepared_.whole, model(), *optimizer_, state)
                              : resume_ranks(world_, loaded, model(), *optimizer_, sync_->shards_optimizer(), state);
    if (sync_->has_state()) {
      if (resumed) {
        const std::string fresh = sync_->restore_state(loaded);
        if (!fresh.empty()) notes.push_back(fresh);
      } else {
        sync_->start_fresh();
      }
    }
  }
  if (leader_) {
    write_file_atomically(summary_.run_dir + "/config.toml", config_to_toml(config_));
    open_metrics(resumed || options_.generation > 0);
    progress_.notice(kernels::describe_numerics(), false);
    const GemmRoofs roofs = gemm_roofs();
    if (roofs.known) {
      progress_.notice(describe(roofs), false);
      summary_.gemm_roof_gflops = tc_.precision == "bf16" ? roofs.bf16_gflops : roofs.f32_gflops;
    }
    if (tc_.precision == "bf16") {
      const kernels::Bf16Support bf16 = kernels::bf16_support();
      progress_.notice(bf16.describe(), !bf16.native);
    }
    for (const std::string& note : notes) progress_.notice(note, is_warning_note(note));
  }
  // Under ZeRO every rank writes its optimizer shard, a split model's writers
  // their pieces, and rank 0 commits the checkpoint.
  if (prepared_.whole) {
    const checkpoint::SavedLayout layout{prepared_.mesh.dp, prepared_.mesh.pp, prepared_.mesh.tp,
                                         sync_->zero_stage()};
    splits_.writes = writes_split_checkpoint(layout, dp_rank_);
    splits_.save = SplitSave{rank_, split_checkpoint_writers(layout), layout};
  }
  checkpointer_ = std::make_unique<RunCheckpointer>(config_.checkpoint, checkpoints_dir_of(config_, summary_.run_dir),
                                                    leader_ || sync_->shards_optimizer() || splits_.writes, now_seconds(), leader_,
                                                    parts_timeout_s());
  if (resumed) start_from(state, options_.replacement ? "replica" : "checkpoint", skipped);
  resilience_.started(s_.step, *observer_);
}

void TrainingRun::open_metrics(bool append) {
  const std::string path = summary_.run_dir + "/metrics.jsonl";
  observer_ = make_metrics_observer(path, append, config_.metering, checkpoints_dir_of(config_, summary_.run_dir),
                                    now_seconds());
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  resilience_.publish_metrics_path(ec ? path : absolute.string());
}

// Continue where `state` says: the same step, the same place in the global sample order.
void TrainingRun::start_from(const checkpoint::TrainerState& state, const std::string& how,
                             const std::vector<std::string>& skipped) {
  s_.step = state.step;
  s_.epoch = state.epoch;
  s_.step_in_epoch = state.step_in_epoch;
  epochs_run_ = state.epoch + (state.step_in_epoch > 0 ? 1 : 0);  // the weights' metadata counts epochs begun
  summary_.resumed_from_step = state.step;
  before_.samples = state.samples >= 0 ? state.samples : state.step * tc_.batch_size;  // older files: every step full
  // The checkpoint resumed from verified, so it was saved; a replica's state was not.
  before_.checkpoints_saved = state.checkpoints_saved + (how == "checkpoint" ? 1 : 0);
  before_.checkpoints_failed = state.checkpoints_failed;
  observer_->resumed(state, how, world_size_, resilience_.generation(), skipped);
}

checkpoint::TrainerState TrainingRun::current_state() const {
  checkpoint::TrainerState t;
  t.step = s_.step;
  t.epoch = s_.epoch;
  t.step_in_epoch = s_.step_in_epoch;
  t.epoch_position = std::min(s_.step_in_epoch * tc_.batch_size, prepared_.data->train->count());
  t.seed = tc_.seed;
  t.rng_step = static_cast<uint64_t>(s_.step);
  t.config_hash = training_config_hash(config_);
  t.world_size = world_size_;
  t.generation = resilience_.generation();
  t.optimizer = optimizer_->name();
  t.zero_stage = sync_->zero_stage();
  t.samples = std::max<int64_t>(before_.samples, 0) + s_.samples;
  const checkpoint::CheckpointStats c = checkpointer_ ? checkpointer_->stats() : checkpoint::CheckpointStats{};
  // Saves this process began before this one, less the ones known to have failed.
  t.checkpoints_saved = before_.checkpoints_saved + (checkpointer_ ? checkpointer_->saves() - c.failed : 0);
  t.checkpoints_failed = before_.checkpoints_failed + c.failed;
  return t;
}

void TrainingRun::announce() {
  const std::string backend = world_ ? world_->backend() : "none";
  progress_.message("run " + summary_.run_dir + ": " + config_.model.kind + " with " +
                    std::to_string(model().num_parameters()) + " parameters, " +
                    std::to_string(prepared_.data->train->count()) + " training samples, " +
                    std::to_string(prepared_.steps.total_steps) + " steps" +
                    (multi_rank(world_) ? ", " + std::to_string(world_size_) + " ranks over " + backend : "") +
                    sync_->describe());
  if (multi_rank(world_)) progress_.message("mesh: " + parallel::DeviceMesh(prepared_.mesh).describe());
  if (pipeline_.forward)
    progress_.message("pipeline: " + prepared_.stage_split + "; " + config_.parallel.pipeline_schedule + ", " +
                      std::to_string(pipeline_.micro_batches) + " micro-batches per step");
  progress_.message(memory_message(prepared_.memory, prepared_.memory_limit));
  if (!observer_->records()) return;  // the run line's figures are rank 0's to gather
  RunStart start;
  start.run_id = std::filesystem::path(summary_.run_dir).filename().string();
  start.model = config_.model.kind;
  start.backend = backend;
  start.parameters = model().num_parameters();
  start.batch_size = tc_.batch_size;
  start.epochs = tc_.epochs;
  start.steps_per_epoch = prepared_.steps.steps_per_epoch;
  start.world_size = world_size_;
  start.generation = resilience_.generation();
  start.memory = memory_metrics(prepared_.memory, prepared_.memory_limit);
  observer_->started(start);
}

void TrainingRun::run_epochs() {
  for (; s_.epoch < tc_.epochs && !stopping_; ++s_.epoch, s_.step_in_epoch = 0) {
    // A run resumed after its last step still owes that epoch's evaluation.
    if (s_.step >= prepared_.steps.total_steps && s_.step_in_epoch == 0) break;
    run_epoch(s_.epoch);
    if (stopping_) return;
    epochs_run_ = s_.epoch + 1;
    if (tc_.eval_every_epoch) evaluate_epoch(s_.epoch);
  }
}

// A peer died: re-form the group with its replacement, take the most advanced replica's state, go on.
void TrainingRun::recover(const std::string& failure) {
  progress_.finish();
  progress_.notice("a peer failed (" + failure + "); recovering in process", true);
  runner_.reset();
  sync_ = std::make_unique<GradientSync>();  // the exchange over the old group goes with it
  stop_vote_.reset();
  world_ = nullptr;
  group_ = resilience_.rejoin();
  world_ = group_.get();
  adopt_dp_group(group_);  // in-process recovery runs plain data parallelism (a mesh is refused with it)
  rank_ = world_->rank();
  world_size_ = world_->size();
  leader_ = rank_ == 0;
  checkpoint::TrainerState state = current_state();
  resilience_.hand_over(*group_, true, model(), *optimizer_, state, summary_.run_dir);
  sync_ = make_gradient_sync(config_, model(), dp_group_);  // plain data parallelism: recovery refuses the rest
  if (leader_ && !observer_->records()) open_metrics(true);
  if (leader_ && !checkpointer_->writer())
    checkpointer_ = std::make_unique<RunCheckpointer>(config_.checkpoint, checkpoints_dir_of(config_, summary_.run_dir),
                                                      true, now_seconds());
  build_step_machinery();
  start_from(state, "replica");
  ++summary_.recoveries;
  s_.window = PhaseTimes{};
  s_.window_samples = 0;
  s_.window_start = now_seconds();
  resilience_.started(s_.step, *observer_);
}

void TrainingRun::run_epoch(int64_t epoch) {
  loader_->skip_to(epoch, s_.step_in_epoch);
  data::Batch batch;
  while (s_.step < prepared_.steps.total_steps && !stopping_) {
    const double data_start = now_seconds();
    if (!loader_->next(batch)) break;
    train_step(batch, epoch, data_start, now_seconds());
    show_progress(epoch, s_.step_in_epoch);
  }
}

void TrainingRun::save_checkpoint(bool sync) {
  // Every rank restarts the interval its time-based votes count from.
  checkpointer_->note_save(now_seconds());
  // A split model: the writers save their pieces (split_checkpoint.h); the others hold copies.
  if (prepared_.whole && !splits_.writes) return;
  std::optional<checkpoint::TensorFile> communication;
  if (sync_->has_state()) {
    communication = sync_->gather_state();
    if (!checkpointer_->writer()) return;  // replicated state otherwise: rank 0 writes it
  }
  const double stalled = checkpointer_->save(
      [&] {
        if (prepared_.whole) return take_split_snapshot(*prepared_.whole, model(), *optimizer_, current_state(), splits_.save);
        sync_->gather_full_parameters();  // stage 3: rank 0 writes the whole model
        struct Release {
          GradientSync& sync;
          ~Release() { sync.release_full_parameters(); }
        } release{*sync_};
        checkpoint::Snapshot snapshot = sync_->shards_optimizer() ? take_sharded_snapshot(model(), *optimizer_, current_state(), rank_, world_size_)
                                              : take_snapshot(model(), *optimizer_, current_state());
        if (communication) snapshot.tensor_files.push_back(std::move(*communication));
        return snapshot;
      },
      sync, now_seconds());
  // The stall stays in the training time: it is what the loop paid for the checkpoint.
  observer_->checkpoint_saved(s_.step, sync || !config_.checkpoint.async, stalled);
}

// Every rank agreed to stop after this step (SIGTERM somewhere): save synchronously and leave.
void TrainingRun::stop_here() {
  stopping_ = true;
  summary_.stopped = true;
  if (checkpointer_->writer() || prepared_.whole || sync_->has_state()) save_checkpoint(true);
  progress_.finish();
  progress_.notice("stopping after step " + std::to_string(s_.step) + " on SIGTERM" +
                       (checkpointer_->writer() ? "; checkpoint saved in " + checkpointer_->dir() : ""),
                   false);
  observer_->stopped(s_.step);
}

void TrainingRun::train_step(const data::Batch& batch, int64_t epoch, double data_start, double data_end) {
  const PhaseTimes window_before = s_.window;
  s_.window[Phase::kData] += data_end - data_start;
  const bool traced = s_.step < config_.output.trace_steps;
  if (traced) trace_->span("compute", "data", data_start, data_end);
  const float lr = optim::lr_at(schedule_, base_lr_, s_.step);
  nn::forward_context().step = static_cast<uint64_t>(s_.step);
  // Sharded checkpoints need every rank at the same step: a time-based save is voted on.
  stop_vote_->begin_step(collective_checkpoints() && checkpointer_->due_by_time(now_seconds()));
  const double loss = runner_->run(batch, lr, s_.step, s_.window, traced ? trace_.get() : nullptr);
  const bool stop = stop_vote_->finish_step();
  if (traced) trace_->span("compute", "step " + std::to_string(s_.step), data_start, now_seconds());
  ++s_.step;
  ++s_.step_in_epoch;
  resilience_.stepped(s_.step);
  s_.samples += batch.global_batch_len;
  s_.window_samples += batch.global_batch_len;
  s_.window.samples += static_cast<int64_t>(batch.labels.size());
  if (balancer_) {
    add_difference(s_.balance_window, window_before, s_.window);
    if (s_.step % config_.parallel.rebalance_every == 0) rebalance();
  }
  // With several ranks the global loss is known at log steps; until the
  // first one, this rank's share scaled by the world size estimates it.
  if (!multi_rank(world_) || s_.step <= tc_.log_every) s_.last_loss = loss * dp_size_;
  const bool due = !stop && (collective_checkpoints() ? checkpointer_->due_by_steps(s_.step) || stop_vote_->save_agreed()
                                                     : checkpointer_->writer() && checkpointer_->due(s_.step, now_seconds()));
  // Before the log: the interval that ends with a synchronisation counts its time.
  const StepEnd end{s_.step,
                    s_.step_in_epoch >= prepared_.steps.steps_per_epoch || s_.step >= prepared_.steps.total_steps,
                    stop || due, s_.step <= config_.output.trace_steps};
  sync_->after_step(end, *optimizer_, s_.window, trace_.get());
  if (s_.step % tc_.log_every == 0 || s_.step == prepared_.steps.total_steps) log_interval(lr, epoch);
  if (stop) return stop_here();
  if (due) save_checkpoint(false);
}

}  // namespace detail

TrainSummary run_training(const Config& config, std::FILE* progress_stream, std::shared_ptr<comm::ProcessGroup> group,
                          const RunOptions& options) {
  return detail::TrainingRun(config, progress_stream, std::move(group), options).run();
}

}  // namespace gradmesh::train
