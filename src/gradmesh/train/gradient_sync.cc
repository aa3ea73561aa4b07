#include "gradmesh/train/gradient_sync.h"

#include <cmath>
#include <utility>

#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/optim/clip.h"
#include "gradmesh/parallel/gradient_reducer.h"
#include "gradmesh/parallel/local_sgd.h"
#include "gradmesh/parallel/zero_param_shards.h"
#include "gradmesh/parallel/zero_reducer.h"
#include "gradmesh/train/communication_state.h"
#include "gradmesh/train/optimizer_setup.h"
#include "gradmesh/train/rank_setup.h"

namespace gradmesh::train {

std::vector<optim::ParamGroup> GradientSync::param_groups(const Config& config, const nn::Model& model) const {
  return whole_model_param_groups(config, model);
}

void GradientSync::initialize_owned(nn::Model& /*model*/) const {
  GRADMESH_CHECK(false, "deferred initialisation without ZeRO stage 3");
}

bool GradientSync::step_finite() const { return std::isfinite(loss_); }

void GradientSync::clip_grad_norm(float max_norm, nn::Model& model, const parallel::WholeModelView* whole) {
  if (whole) whole->clip_grad_norm(max_norm);
  else optim::clip_grad_norm(model.flat_grads().data(), model.num_parameters(), max_norm);
}

namespace {

// A reducer's wait and its buckets' spans, the same for all-reduce and reduce-scatter buckets.
template <typename Reducer>
void finish_buckets(Reducer& reducer, const char* bucket_name, parallel::PhaseTimes& times, obs::ChromeTrace* trace) {
  const double t0 = now_seconds();
  const double waited = reducer.finish_step();
  times[parallel::Phase::kComm] += waited;
  if (!trace) return;
  trace->span("compute", "wait for gradients", t0, t0 + waited);
  for (const parallel::BucketSpan& b : reducer.last_spans())
    trace->span("comm", bucket_name + std::to_string(b.bucket), b.start_s, b.end_s,
                obs::JsonObject().add("bytes", b.bytes).add("queued_ms", (b.start_s - b.launch_s) * 1e3));
}

// Plain data parallelism: every rank gets the whole summed gradient (DDP's
// buckets, all-reduced as backward finishes them) and updates every parameter.
// With parallel.compression = "powersgd" the buckets travel as low-rank
// factors, and the error feedback is state every checkpoint must hold.
class BucketSync final : public GradientSync {
 public:
  BucketSync(const Config& config, nn::Model& model, std::shared_ptr<comm::ProcessGroup> dp)
      : dp_(dp), reducer_(model, std::move(dp), reducer_options(config)), compressed_(reducer_.powersgd() != nullptr) {}

  autograd::GradReadyHook begin_step(int64_t step) override { return reducer_.begin_step(step); }
  void set_step_loss(double loss) override { reducer_.set_step_loss(loss); }
  void finish(parallel::PhaseTimes& times, obs::ChromeTrace* trace) override {
    finish_buckets(reducer_, "allreduce bucket ", times, trace);
  }
  bool step_finite() const override { return reducer_.step_finite(); }
  std::vector<float> gather_step_losses() override { return reducer_.gather_step_losses(); }

  bool has_state() const override { return compressed_; }
  std::optional<checkpoint::TensorFile> gather_state() override {
    return gather_communication_state(*dp_, reducer_.powersgd(), nullptr);
  }
  std::string restore_state(const std::optional<checkpoint::LoadedCheckpoint>& loaded) override {
    return restore_communication_state(*dp_, loaded, reducer_.powersgd(), nullptr);
  }

 private:
  std::shared_ptr<comm::ProcessGroup> dp_;
  parallel::GradientReducer reducer_;
  bool compressed_;  // parallel.compression = "powersgd"
};

// ZeRO stages 1-3: every rank gets its shard of the sum, clips with the
// global norm, updates its shard, and the shards are all-gathered so every
// rank holds the full parameters again (stage 3: only around each use).
class ZeroSync final : public GradientSync {
 public:
  ZeroSync(const Config& config, nn::Model& model, std::shared_ptr<comm::ProcessGroup> dp)
      : model_(model), dp_(dp), zero_(model, std::move(dp), zero_options(config.parallel)),
        timeout_(collective_timeout(config.parallel)) {}
  ~ZeroSync() override {
    if (nn::forward_context().unit_hooks == shards_.get()) nn::forward_context().unit_hooks = nullptr;
  }

  std::string describe() const override { return ", ZeRO stage " + std::to_string(zero_.stage()); }
  std::vector<optim::ParamGroup> param_groups(const Config& config, const nn::Model& /*model*/) const override {
    return zero_.param_groups([&config](const nn::ParameterInfo& p) { return weight_decay_of(config, p); });
  }
  void initialize_owned(nn::Model& model) const override {
    GRADMESH_CHECK(zero_.stage() == 3, "deferred initialisation without ZeRO stage 3");
    const parallel::ShardLayout& layout = zero_.layout();
    for (size_t b = 0; b < layout.buckets().size(); ++b) {
      const parallel::FlatRange mine = layout.owned(b, dp_->rank());
      model.initialize_range(mine.begin, mine.end);
    }
  }
  int zero_stage() const override { return zero_.stage(); }

  autograd::GradReadyHook begin_step(int64_t /*step*/) override { return zero_.begin_step(); }
  void set_step_loss(double loss) override { zero_.set_step_loss(loss); }
  void finish(parallel::PhaseTimes& times, obs::ChromeTrace* trace) override {
    finish_buckets(zero_, "reduce-scatter bucket ", times, trace);
  }
  bool step_finite() const override { return zero_.step_finite(); }
  std::vector<float> gather_step_losses() override { return zero_.gather_step_losses(); }
  // No rank holds the whole summed gradient: the norm comes from every rank's shard.
  void clip_grad_norm(float max_norm, nn::Model& /*model*/, const parallel::WholeModelView* whole) override {
    if (whole) whole->clip_grad_norm(max_norm, &zero_.owned_ranges(), &zero_.group());
    else zero_.clip_grad_norm(max_norm);
  }
  void after_update(parallel::PhaseTimes& times, obs::ChromeTrace* trace) override {
    const double t0 = now_seconds();
    const double gathered = zero_.gather_params();
    times[parallel::Phase::kComm] += gathered;
    if (trace) trace->span("comm", "all-gather parameters", t0, t0 + gathered);
  }

  void shard_parameters(const Config& config) override {
    if (zero_.stage() != 3) return;
    // Every rank must run every micro-batch's units: no rank may get an empty one.
    const TrainConfig& tc = config.train;
    if (tc.batch_size / dp_->size() < tc.accum_steps)
      throw_error(ErrorKind::kConfig, "train.batch_size",
                  std::to_string(tc.batch_size) + " over " + std::to_string(dp_->size()) +
                      " ranks leaves a rank fewer samples than train.accum_steps = " + std::to_string(tc.accum_steps) +
                      ", which parallel.zero = 3 needs (every rank runs every micro-batch's parameter gathers)");
    shards_ = std::make_unique<parallel::ZeroParamShards>(model_, dp_, zero_.layout(), timeout_);
    nn::forward_context().unit_hooks = shards_.get();
  }
  // The units' hooks are off meanwhile: ranks may run different numbers of
  // forwards (evaluation), so their gathers would not pair up.
  void gather_full_parameters() override {
    if (!shards_) return;
    shards_->gather_all();
    nn::forward_context().unit_hooks = nullptr;
  }
  void release_full_parameters() override {
    if (!shards_) return;
    nn::forward_context().unit_hooks = shards_.get();
    shards_->release_all();
  }

 private:
  nn::Model& model_;
  std::shared_ptr<comm::ProcessGroup> dp_;
  parallel::ZeroReducer zero_;
  std::optional<comm::Millis> timeout_;
  std::unique_ptr<parallel::ZeroParamShards> shards_;  // stage 3, from shard_parameters() on
};

// Local SGD and DiLoCo: each rank steps on the mean over its own samples
// with no per-step exchange; the parameters are averaged when a period, an
// epoch or the run ends, and before a checkpoint (the inner optimizer state
// too then, so one state holds for every rank).
class LocalSgdSync final : public GradientSync {
 public:
  LocalSgdSync(const Config& config, nn::Model& model, std::shared_ptr<comm::ProcessGroup> dp)
      : dp_(dp), local_(model, std::move(dp), local_sgd_options(config.parallel)) {}

  bool averages_locally() const override { return true; }
  void after_step(const StepEnd& end, optim::Optimizer& optimizer, parallel::PhaseTimes& times,
                  obs::ChromeTrace* trace) override {
    if (!local_.due(end.step) && !end.epoch_ends && !end.checkpoint_follows) return;
    const double t0 = now_seconds();
    const double seconds = local_.synchronize(end.checkpoint_follows ? &optimizer : nullptr);
    times[parallel::Phase::kComm] += seconds;
    if (trace && end.traced)
      trace->span("comm", "local-SGD synchronisation", t0, t0 + seconds,
                  obs::JsonObject().add("bytes", local_.last_bytes()));
  }

  bool has_state() const override { return true; }
  std::optional<checkpoint::TensorFile> gather_state() override {
    return gather_communication_state(*dp_, nullptr, &local_);
  }
  std::string restore_state(const std::optional<checkpoint::LoadedCheckpoint>& loaded) override {
    return restore_communication_state(*dp_, loaded, nullptr, &local_);
  }
  void start_fresh() override { local_.reset_outer(); }

 private:
  static parallel::LocalSgdOptions local_sgd_options(const ParallelConfig& c) {
    parallel::LocalSgdOptions o;
    o.local_steps = c.local_steps;
    o.outer_lr = static_cast<float>(c.outer_lr);
    o.outer_momentum = static_cast<float>(c.outer_momentum);
    o.timeout = collective_timeout(c);
    return o;
  }

  std::shared_ptr<comm::ProcessGroup> dp_;
  parallel::LocalSgd local_;
};

}  // namespace

std::unique_ptr<GradientSync> make_gradient_sync(const Config& config, nn::Model& model,
                                                 const std::shared_ptr<comm::ProcessGroup>& dp) {
  if (!multi_rank(dp.get())) return std::make_unique<GradientSync>();  // one rank: nothing to exchange
  if (config.parallel.zero >= 1) return std::make_unique<ZeroSync>(config, model, dp);
  if (config.parallel.local_steps > 1) return std::make_unique<LocalSgdSync>(config, model, dp);
  return std::make_unique<BucketSync>(config, model, dp);
}

}  // namespace gradmesh::train
