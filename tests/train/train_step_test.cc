// One optimizer step, and what happens when a loss is not finite: on one
// process and on ranks running as threads over a real shm group, the step
// stops before the optimizer, every rank with the same message naming the
// step and the rank(s), and no weight changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "comm/collective_reference.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/core/error.h"
#include "gradmesh/train/model_factory.h"
#include "gradmesh/train/train_step.h"
#include "support/temp_dir.h"

namespace gradmesh::train {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int64_t kPerRank = 2;  // samples of each rank's slice
const InputGeometry kGeometry{1, 2, 2};

Config tiny_config() {
  Config c;
  c.model.hidden = {5};
  c.model.activation = "tanh";  // carries a NaN input on to the loss (this ReLU maps NaN to 0)
  c.model.classes = 3;
  c.optim.lr = 0.1;
  c.optim.weight_decay = 0;  // the optimizers below step without decay
  c.train.accum_steps = 1;
  return c;
}

// Rank `rank`'s slice of a global batch of `world * kPerRank` samples;
// `poisoned` puts a NaN pixel into its last sample (a corrupt input).
data::Batch slice(int rank, int world, int64_t step, bool poisoned) {
  std::vector<float> pixels(kPerRank * 4);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = std::cos(static_cast<float>(i + 7 * rank + 3 * step));
  if (poisoned) pixels.back() = kNaN;
  data::Batch b;
  b.images = Tensor::from_vector({kPerRank, 1, 2, 2}, pixels);
  b.labels = {static_cast<int32_t>(rank % 3), static_cast<int32_t>((rank + step + 1) % 3)};
  b.global_batch_len = world * kPerRank;
  b.offset_in_batch = rank * kPerRank;
  b.step_in_epoch = step;
  return b;
}

std::unique_ptr<optim::Optimizer> sgd(const nn::Model& model) {
  return optim::make_sgd({{0, model.num_parameters(), 0.0f}}, {0.9f, 0.0f, false});
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal) << e.what();
    return e.what();
  }
  return "";
}

TEST(StepRunner, ANonFiniteLossStopsTheStepBeforeTheWeightsChange) {
  const Config config = tiny_config();
  std::unique_ptr<nn::Model> model = build_model(config.model, kGeometry, 3);
  std::unique_ptr<optim::Optimizer> optimizer = sgd(*model);
  GradientSync one_rank;
  StepRunner runner(*model, *optimizer, config, one_rank);
  parallel::PhaseTimes times;
  const std::vector<float> initial = model->flat_params().to_vector();
  EXPECT_TRUE(std::isfinite(runner.run(slice(0, 1, 0, false), 0.1f, 0, times, nullptr)));
  const std::vector<float> after_good_step = model->flat_params().to_vector();
  EXPECT_NE(after_good_step, initial);  // a finite step does train
  const std::string message = message_of([&] { runner.run(slice(0, 1, 1, true), 0.1f, 1, times, nullptr); });
  EXPECT_EQ(message, "step 1: the loss is not finite (nan); lower optim.lr or enable optim.clip_grad_norm");
  const std::vector<float> after_bad_step = model->flat_params().to_vector();
  for (size_t i = 0; i < after_bad_step.size(); ++i) ASSERT_EQ(after_bad_step[i], after_good_step[i]) << i;
}

struct RankResult {
  std::string message;                    // what run() threw at the poisoned step
  std::vector<float> before, after;       // weights around it
};

// `world` ranks over shm train step 0 cleanly, then step 1 with NaN inputs on
// the ranks in `poisoned`.
std::vector<RankResult> run_ranks(int world, const std::vector<int>& poisoned, const Config& config) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  std::vector<RankResult> results(world);
  const auto errors = comm::testing::run_rank_threads(world, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, world, comm::Millis(20'000));
    std::unique_ptr<nn::Model> model = build_model(config.model, kGeometry, 3);
    // parallel.zero picks the strategy and the optimizer's groups as the trainer does.
    std::unique_ptr<GradientSync> sync = make_gradient_sync(config, *model, group);
    std::unique_ptr<optim::Optimizer> optimizer = optim::make_sgd(sync->param_groups(config, *model), {0.9f, 0.0f, false});
    StepRunner runner(*model, *optimizer, config, *sync);
    parallel::PhaseTimes times;
    runner.run(slice(rank, world, 0, false), 0.1f, 0, times, nullptr);
    RankResult& mine = results[static_cast<size_t>(rank)];
    mine.before = model->flat_params().to_vector();
    const bool bad = std::find(poisoned.begin(), poisoned.end(), rank) != poisoned.end();
    mine.message = message_of([&] { runner.run(slice(rank, world, 1, bad), 0.1f, 1, times, nullptr); });
    mine.after = model->flat_params().to_vector();
  });
  EXPECT_EQ(comm::testing::join_errors(errors), "");
  return results;
}

void expect_every_rank_stopped(const std::vector<RankResult>& results, const std::string& expected) {
  for (size_t r = 0; r < results.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(results[r].message, expected);
    ASSERT_EQ(results[r].after.size(), results[r].before.size());
    for (size_t i = 0; i < results[r].after.size(); ++i) ASSERT_EQ(results[r].after[i], results[r].before[i]) << i;
  }
}

TEST(StepRunner, EveryRankStopsWithTheSameMessageNamingTheRank) {
  Config overlap = tiny_config();
  overlap.parallel.first_bucket_mb = overlap.parallel.bucket_mb = 1e-5;  // several buckets
  Config serial = overlap;
  serial.parallel.overlap = false;
  Config bf16 = tiny_config();
  bf16.parallel.comm_dtype = "bf16";
  Config accumulated = overlap;
  accumulated.train.accum_steps = 2;  // the NaN sits in the last micro-batch
  for (const Config& config : {overlap, serial, bf16, accumulated}) {
    SCOPED_TRACE(config.parallel.comm_dtype + (config.parallel.overlap ? " overlap" : " serial") + ", accum " +
                 std::to_string(config.train.accum_steps));
    expect_every_rank_stopped(
        run_ranks(3, {1}, config),
        "step 1: the loss is not finite on rank 1 (nan); lower optim.lr or enable optim.clip_grad_norm");
  }
  expect_every_rank_stopped(
      run_ranks(4, {0, 3}, overlap),
      "step 1: the loss is not finite on ranks 0 (nan) and 3 (nan); lower optim.lr or enable optim.clip_grad_norm");
}

TEST(StepRunner, UnderZeroEveryRankStopsWithTheSameMessageAndTheCleanStepMatchesPlainDataParallelism) {
  Config plain = tiny_config();
  plain.parallel.first_bucket_mb = plain.parallel.bucket_mb = 1e-5;  // several buckets
  plain.optim.clip_grad_norm = 0.05;  // clipped: the norm comes from every rank's shard
  const std::vector<RankResult> reference = run_ranks(3, {1}, plain);
  for (int stage : {1, 2}) {
    Config zero = plain;
    zero.parallel.zero = stage;
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::vector<RankResult> results = run_ranks(3, {1}, zero);
    expect_every_rank_stopped(
        results, "step 1: the loss is not finite on rank 1 (nan); lower optim.lr or enable optim.clip_grad_norm");
    // After the clean step every rank holds the full parameters plain data parallelism trains.
    for (size_t r = 0; r < results.size(); ++r) EXPECT_EQ(results[r].before, reference[r].before) << r;
  }
}

}  // namespace
}  // namespace gradmesh::train
