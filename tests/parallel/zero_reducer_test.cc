// ZeRO stages 1 and 2 over real shm groups whose ranks run as threads: the
// weights after a few steps match plain data parallelism and one process
// with the whole batch; clipping sees the same global norm; a non-finite
// step stops every rank before any update.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/collective_reference.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/core/error.h"
#include "parallel/trained_weights.h"
#include "parallel/zero_training.h"
#include "support/temp_dir.h"

namespace gradmesh::parallel {
namespace {

using gradmesh::testing::relative_difference;
using testing::Optim;
using testing::RankResult;
using testing::TrainSpec;

// Tolerances, relative to the largest weight. Plain data parallelism and
// ZeRO add the same per-rank gradients in the same rank order on shm, so
// they agree bit for bit today; 1e-6 leaves room for a backend that orders
// a reduce-scatter differently from an all-reduce. One process with the
// whole batch sums the samples inside one GEMM instead, which moves the
// weights by a few float32 roundings per step.
constexpr double kSameSums = 1e-6;
constexpr double kWholeBatch = 1e-5;

std::vector<RankResult> train_on_threads(int world, const TrainSpec& spec) {
  if (spec.stage < 0) return {testing::train_rank(spec, nullptr)};
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  std::vector<RankResult> results(static_cast<size_t>(world));
  const auto errors = comm::testing::run_rank_threads(world, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, world, comm::Millis(20'000));
    results[static_cast<size_t>(rank)] = testing::train_rank(spec, group);
  });
  EXPECT_EQ(comm::testing::join_errors(errors), "");
  return results;
}

void expect_ranks_identical(const std::vector<RankResult>& ranks) {
  for (size_t r = 1; r < ranks.size(); ++r) EXPECT_EQ(ranks[r].params, ranks[0].params) << "rank " << r;
}

TEST(ZeroReducer, MatchesPlainDataParallelAndOneProcess) {
  for (Optim optim : {Optim::kAdamW, Optim::kSgdMomentum}) {
    TrainSpec single;
    single.stage = -1;
    single.optim = optim;
    const std::vector<float> alone = train_on_threads(1, single)[0].params;
    for (int world = 1; world <= 4; ++world) {
      TrainSpec plain = single;
      plain.stage = 0;
      const std::vector<RankResult> dp = train_on_threads(world, plain);
      ASSERT_EQ(dp.size(), static_cast<size_t>(world));
      for (int stage : {1, 2}) {
        SCOPED_TRACE(std::string(testing::optim_name(optim)) + ", " + std::to_string(world) + " ranks, stage " +
                     std::to_string(stage));
        TrainSpec zero = plain;
        zero.stage = stage;
        const std::vector<RankResult> sharded = train_on_threads(world, zero);
        ASSERT_EQ(sharded.size(), static_cast<size_t>(world));
        expect_ranks_identical(sharded);
        EXPECT_LE(relative_difference(sharded[0].params, dp[0].params), kSameSums);
        EXPECT_LE(relative_difference(sharded[0].params, alone), kWholeBatch);
        EXPECT_NE(sharded[0].params, std::vector<float>{});
        // The optimizer state is sharded: each rank holds its shard's, all of them together the whole model's.
        int64_t state = 0;
        for (const RankResult& r : sharded) state += r.optimizer_state;
        EXPECT_EQ(state, static_cast<int64_t>(alone.size()));
        if (world > 1) {
          EXPECT_LT(sharded[0].optimizer_state, static_cast<int64_t>(alone.size()));
        }
      }
    }
  }
}

TEST(ZeroReducer, TrainingMovesTheWeights) {
  // The comparisons above mean something only if the steps change the weights.
  TrainSpec spec;
  spec.stage = 2;
  TrainSpec no_steps = spec;
  no_steps.steps = 0;
  const auto trained = train_on_threads(3, spec), initial = train_on_threads(3, no_steps);
  EXPECT_GT(relative_difference(trained[0].params, initial[0].params), 1e-3);
}

TEST(ZeroReducer, WithoutOverlapTheResultIsTheSame) {
  TrainSpec overlap;
  overlap.stage = 2;
  TrainSpec serial = overlap;
  serial.overlap = false;
  const auto a = train_on_threads(3, overlap), b = train_on_threads(3, serial);
  EXPECT_EQ(a[0].params, b[0].params);  // same buckets, same order: bit for bit
}

TEST(ZeroReducer, OneBucketPerModelAndOneBucketPerParameterAgree) {
  TrainSpec big;
  big.stage = 1;
  big.first_bucket_bytes = big.bucket_bytes = 1 << 20;
  TrainSpec tiny = big;
  tiny.first_bucket_bytes = tiny.bucket_bytes = 4;
  const auto a = train_on_threads(4, big), b = train_on_threads(4, tiny);
  EXPECT_LE(relative_difference(a[0].params, b[0].params), kSameSums);
}

TEST(ZeroReducer, ClippingUsesTheGlobalNorm) {
  TrainSpec plain;
  plain.stage = 0;
  plain.clip = 0.05f;  // below the norms here, so every step is scaled
  plain.optim = Optim::kSgdMomentum;
  const auto dp = train_on_threads(3, plain);
  ASSERT_EQ(dp[0].norms.size(), 4u);
  for (float n : dp[0].norms) EXPECT_GT(n, plain.clip);
  for (int stage : {1, 2}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    TrainSpec zero = plain;
    zero.stage = stage;
    const auto sharded = train_on_threads(3, zero);
    for (size_t r = 0; r < sharded.size(); ++r) {
      ASSERT_EQ(sharded[r].norms.size(), dp[0].norms.size());
      for (size_t s = 0; s < dp[0].norms.size(); ++s)
        EXPECT_NEAR(sharded[r].norms[s], dp[0].norms[s], 1e-6 * dp[0].norms[s]) << "rank " << r << " step " << s;
      EXPECT_EQ(sharded[r].norms, sharded[0].norms) << "every rank scales by the same norm";
    }
    expect_ranks_identical(sharded);
    EXPECT_LE(relative_difference(sharded[0].params, dp[0].params), kSameSums);
  }
  // Without clipping the weights end elsewhere: the clip did something.
  TrainSpec unclipped = plain;
  unclipped.clip = 0;
  EXPECT_GT(relative_difference(train_on_threads(3, unclipped)[0].params, dp[0].params), 1e-4);
}

// One step's verdict on every rank, given what each rank measured as its
// loss and, optionally, a gradient element that rank 0 poisons before the
// reduction.
struct Verdicts {
  std::vector<int> finite;                     // per rank; not vector<bool>: ranks write concurrently
  std::vector<std::vector<float>> gathered;    // per rank: gather_step_losses() after a failed step
  std::vector<std::vector<float>> params_before, params_after;
};

Verdicts run_failing_step(int stage, const std::vector<double>& losses, bool poison_another_ranks_shard) {
  const int world = static_cast<int>(losses.size());
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  Verdicts v;
  v.finite.assign(world, -1);
  v.gathered.resize(world);
  v.params_before.resize(world);
  v.params_after.resize(world);
  const auto errors = comm::testing::run_rank_threads(world, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, world, comm::Millis(20'000));
    TrainSpec spec;
    nn::Model model(nn::build_mlp(spec.mlp), 11);
    ZeroOptions options;
    options.stage = stage;
    options.first_bucket_bytes = spec.first_bucket_bytes;
    options.bucket_bytes = spec.bucket_bytes;
    options.overlap = !poison_another_ranks_shard;  // poison before any bucket leaves
    ZeroReducer reducer(model, group, options);
    auto optimizer = testing::make_optimizer(Optim::kAdamW, reducer.param_groups(testing::decay_weights_only));
    v.params_before[rank] = model.flat_params().to_vector();
    model.zero_grad();
    const autograd::GradReadyHook hook = reducer.begin_step();
    Tensor x;
    std::vector<int32_t> y;
    testing::batch_slice(spec, 0, 2 * rank, 2 * rank + 2, x, y);
    auto loss = autograd::cross_entropy(model.forward(autograd::Variable(x)), y, 2.0f * world);
    reducer.set_step_loss(losses[static_cast<size_t>(rank)]);  // what the trainer measured
    model.backward(loss, hook);
    if (poison_another_ranks_shard && rank == 0)
      model.flat_grads().data()[reducer.layout().owned_ranges(world - 1).front().begin] = INFINITY;
    reducer.finish_step();
    v.finite[rank] = reducer.step_finite() ? 1 : 0;
    if (reducer.step_finite()) {  // the trainer's rule: no update after a step that is not finite
      optimizer->step(model.flat_params().data(), model.flat_grads().data(), 0.01f);
      reducer.gather_params();
    } else {
      v.gathered[rank] = reducer.gather_step_losses();
    }
    v.params_after[rank] = model.flat_params().to_vector();
  });
  EXPECT_EQ(comm::testing::join_errors(errors), "");
  return v;
}

TEST(ZeroReducer, ANonFiniteLossOnOneRankStopsEveryRank) {
  for (int stage : {1, 2}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const Verdicts nan = run_failing_step(stage, {0.5, std::nan(""), 0.6}, false);
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_EQ(nan.finite[rank], 0) << "rank " << rank;
      ASSERT_EQ(nan.gathered[rank].size(), 3u);
      EXPECT_FLOAT_EQ(nan.gathered[rank][0], 0.5f);
      EXPECT_TRUE(std::isnan(nan.gathered[rank][1]));
      EXPECT_FLOAT_EQ(nan.gathered[rank][2], 0.6f);
      EXPECT_EQ(nan.params_after[rank], nan.params_before[rank]);
    }
    const Verdicts fine = run_failing_step(stage, {0.5, 0.7, 0.6}, false);
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_EQ(fine.finite[rank], 1) << "rank " << rank;
      EXPECT_NE(fine.params_after[rank], fine.params_before[rank]);
    }
  }
}

TEST(ZeroReducer, AnOverflowInOneRanksShardStopsEveryRank) {
  // Rank 0 poisons an element that rank 2 owns: only rank 2 sees the
  // non-finite sum, yet all three must agree not to step.
  for (int stage : {1, 2}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const Verdicts v = run_failing_step(stage, {0.5, 0.7, 0.6}, true);
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_EQ(v.finite[rank], 0) << "rank " << rank;
      EXPECT_EQ(v.params_after[rank], v.params_before[rank]);
    }
  }
}

TEST(ZeroReducer, RejectsStagesItDoesNotRun) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  const auto errors = comm::testing::run_rank_threads(1, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, 1, comm::Millis(20'000));
    nn::Model model(nn::build_mlp(TrainSpec{}.mlp), 11);
    for (int stage : {0, 4}) {
      ZeroOptions options;
      options.stage = stage;
      try {
        ZeroReducer reducer(model, group, options);
        ADD_FAILURE() << "stage " << stage << " accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kConfig);
        EXPECT_NE(std::string(e.what()).find("parallel.zero: "), std::string::npos) << e.what();  // the config key
      }
    }
    ZeroReducer reducer(model, group, ZeroOptions{});
    reducer.begin_step();
    model.flat_grads().zero();
    reducer.finish_step();  // no set_step_loss: a caller bug, not a silent "finite"
  });
  EXPECT_NE(errors[0].find("set_step_loss"), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace gradmesh::parallel
