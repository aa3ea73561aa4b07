// The reducer's bucket plan, and its sums over real shm groups whose ranks
// run as threads (the tape and forward context are per thread).
#include <gtest/gtest.h>

#include <cmath>

#include "comm/collective_reference.h"
#include "gradmesh/autograd/ops.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/core/error.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/nn/models.h"
#include "gradmesh/parallel/gradient_reducer.h"
#include "parallel/param_sizes.h"
#include "support/temp_dir.h"

namespace gradmesh::parallel {
namespace {

using testing::params_of_sizes;

TEST(BucketPlan, ReverseOrderSmallFirstBucketWholeParameters) {
  // 4-byte floats: budgets of 40 bytes = 10 floats, 100 bytes = 25 floats.
  const auto params = params_of_sizes({30, 5, 20, 4, 8});
  const std::vector<Bucket> b = plan_buckets(params, 40, 100);
  ASSERT_EQ(b.size(), 3u);
  // Bucket 0: the last parameters until >= 10 floats: p4 (8) + p3 (4).
  EXPECT_EQ(b[0].first_param, 3);
  EXPECT_EQ(b[0].end_param, 5);
  EXPECT_EQ(b[0].offset, 55);
  EXPECT_EQ(b[0].numel, 12);
  // Bucket 1: p2 (20) + p1 (5) reaches 25 floats.
  EXPECT_EQ(b[1].first_param, 1);
  EXPECT_EQ(b[1].end_param, 3);
  EXPECT_EQ(b[1].offset, 30);
  EXPECT_EQ(b[1].numel, 25);
  // Bucket 2: p0 alone; together the buckets cover the buffer exactly once.
  EXPECT_EQ(b[2].first_param, 0);
  EXPECT_EQ(b[2].numel, 30);
}

TEST(BucketPlan, OversizedParameterGetsItsOwnBucket) {
  const std::vector<Bucket> b = plan_buckets(params_of_sizes({1000, 2}), 4, 4);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].numel, 2);
  EXPECT_EQ(b[1].numel, 1000);
  EXPECT_TRUE(plan_buckets({}, 4, 4).empty());
}

TEST(BucketPlan, RejectsEmptyBudgets) {
  EXPECT_THROW(plan_buckets(params_of_sizes({3}), 0, 4), Error);
  EXPECT_THROW(plan_buckets(params_of_sizes({3}), 4, 0), Error);
}

// A small MLP whose rank-r gradient is known: each rank backpropagates its own
// inputs, and the reducer must leave the sum of all ranks' gradients.
struct ReducerRun {
  std::vector<std::vector<float>> reduced;  // per rank, the gradients after finish_step
  std::vector<std::vector<float>> local;    // per rank, before reduction
};

ReducerRun run_reducer(int world, ReducerOptions options, bool rank1_has_no_samples = false) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  ReducerRun run;
  run.reduced.resize(world);
  run.local.resize(world);
  const auto errors = comm::testing::run_rank_threads(world, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, world, comm::Millis(20'000));
    nn::MlpSpec spec;
    spec.in_features = 6;
    spec.hidden = {5, 4};
    spec.classes = 3;
    nn::Model model(nn::build_mlp(spec), 7);
    GradientReducer reducer(model, group, options);
    for (int step = 0; step < 2; ++step) {  // twice: the reducer resets between steps
      auto backprop = [&](const autograd::GradReadyHook& hook) {
        model.zero_grad();
        if (rank1_has_no_samples && rank == 1) {
          model.flat_grads().zero();
          if (hook) reducer.set_step_loss(0);
          return;
        }
        std::vector<float> x(12);
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i + 13 * rank + step));
        autograd::Variable input(Tensor::from_vector({2, 6}, x));
        auto loss = autograd::cross_entropy(model.forward(input), {rank % 3, (rank + step) % 3}, 4.0f);
        if (hook) reducer.set_step_loss(loss.value().item());
        model.backward(loss, hook);
      };
      // This rank's own gradients first, in a pass without the reducer: once a
      // bucket is handed over, its all-reduce rewrites it in place at any moment.
      backprop({});
      run.local[rank] = model.flat_grads().to_vector();
      backprop(reducer.begin_step());
      reducer.finish_step();
      EXPECT_TRUE(reducer.step_finite()) << "rank " << rank;
      run.reduced[rank] = model.flat_grads().to_vector();
    }
  });
  EXPECT_EQ(comm::testing::join_errors(errors), "");
  return run;
}

void expect_sums(const ReducerRun& run, double tolerance) {
  const size_t n = run.local[0].size();
  for (size_t r = 0; r < run.reduced.size(); ++r) {
    ASSERT_EQ(run.reduced[r].size(), n);
    for (size_t i = 0; i < n; ++i) {
      double sum = 0;
      for (const auto& local : run.local) sum += local[i];
      ASSERT_NEAR(run.reduced[r][i], sum, tolerance) << "rank " << r << " element " << i;
    }
  }
}

TEST(GradientReducer, SumsEveryRanksGradientsInSmallBuckets) {
  ReducerOptions options;
  options.first_bucket_bytes = 8;  // several buckets for a tiny model
  options.bucket_bytes = 64;
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    expect_sums(run_reducer(world, options), 1e-6);
  }
}

TEST(GradientReducer, WithoutOverlapTheResultIsTheSame) {
  ReducerOptions overlap, serial;
  overlap.first_bucket_bytes = serial.first_bucket_bytes = 16;
  overlap.bucket_bytes = serial.bucket_bytes = 64;
  serial.overlap = false;
  const ReducerRun a = run_reducer(2, overlap), b = run_reducer(2, serial);
  EXPECT_EQ(a.reduced, b.reduced);  // same buckets, same order: bit for bit
}

TEST(GradientReducer, Bf16TravelsRoundedAndSumsInFloat) {
  ReducerOptions options;
  options.bf16 = true;
  const ReducerRun run = run_reducer(2, options);
  expect_sums(run, 2e-2);  // bf16 keeps 8 bits of mantissa; gradients here are < 1
  // Rounded, not exact: at least one element differs from the float sum.
  bool any_rounded = false;
  for (size_t i = 0; i < run.local[0].size(); ++i)
    any_rounded |= run.reduced[0][i] != run.local[0][i] + run.local[1][i];
  EXPECT_TRUE(any_rounded);
}

TEST(GradientReducer, ARankWithoutSamplesContributesZero) {
  const ReducerRun run = run_reducer(2, ReducerOptions{}, /*rank1_has_no_samples=*/true);
  expect_sums(run, 1e-6);
  for (float g : run.local[1]) EXPECT_EQ(g, 0.0f);
}

// Losses that are not finite: one rank's verdict reaches every rank through
// the gradient sum, before anyone could apply the step, and the losses
// gathered afterwards name the rank.
struct VerdictRun {
  std::vector<std::vector<int>> finite;             // [step][rank]; not vector<bool>: ranks write concurrently
  std::vector<std::vector<std::vector<float>>> gathered;  // [step][rank]: gather_step_losses()
};

VerdictRun run_verdicts(ReducerOptions options, const std::vector<std::vector<double>>& losses_per_step) {
  const int world = static_cast<int>(losses_per_step[0].size());
  const size_t steps = losses_per_step.size();
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  VerdictRun run;
  run.finite.assign(steps, std::vector<int>(world));
  run.gathered.assign(steps, std::vector<std::vector<float>>(world));
  const auto errors = comm::testing::run_rank_threads(world, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, world, comm::Millis(20'000));
    nn::MlpSpec spec;
    spec.in_features = 4;
    spec.hidden = {3};
    spec.classes = 2;
    nn::Model model(nn::build_mlp(spec), 7);
    GradientReducer reducer(model, group, options);
    for (size_t step = 0; step < steps; ++step) {
      const autograd::GradReadyHook hook = reducer.begin_step();
      model.zero_grad();
      autograd::Variable input(Tensor::from_vector({1, 4}, {0.5f, -1.0f, 0.25f, static_cast<float>(rank)}));
      auto loss = autograd::cross_entropy(model.forward(input), {rank % 2}, 1.0f);
      reducer.set_step_loss(losses_per_step[step][static_cast<size_t>(rank)]);  // what the trainer measured
      model.backward(loss, hook);
      reducer.finish_step();
      run.finite[step][static_cast<size_t>(rank)] = reducer.step_finite() ? 1 : 0;
      if (!reducer.step_finite()) run.gathered[step][static_cast<size_t>(rank)] = reducer.gather_step_losses();
    }
  });
  EXPECT_EQ(comm::testing::join_errors(errors), "");
  return run;
}

TEST(GradientReducer, ANonFiniteLossOnOneRankIsSeenByEveryRank) {
  const double nan = std::nan(""), inf = INFINITY;
  ReducerOptions small_buckets;
  small_buckets.first_bucket_bytes = 8;
  small_buckets.bucket_bytes = 16;
  ReducerOptions serial = small_buckets;
  serial.overlap = false;
  ReducerOptions bf16;
  bf16.bf16 = true;
  for (const ReducerOptions& options : {small_buckets, serial, bf16}) {
    SCOPED_TRACE(std::string(options.bf16 ? "bf16" : "f32") + (options.overlap ? ", overlap" : ", serial"));
    // Step 0 fine, step 1 NaN on rank 1, step 2 fine again, step 3 inf on ranks 0 and 2.
    const VerdictRun run = run_verdicts(options, {{0.5, 0.7, 0.6}, {0.5, nan, 0.6}, {0.4, 0.3, 0.2}, {inf, 1.0, -inf}});
    for (int rank = 0; rank < 3; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      EXPECT_TRUE(run.finite[0][rank]);
      EXPECT_FALSE(run.finite[1][rank]);
      EXPECT_TRUE(run.finite[2][rank]);
      EXPECT_FALSE(run.finite[3][rank]);
      const std::vector<float>& step1 = run.gathered[1][rank];
      ASSERT_EQ(step1.size(), 3u);
      EXPECT_FLOAT_EQ(step1[0], 0.5f);
      EXPECT_TRUE(std::isnan(step1[1]));
      EXPECT_FLOAT_EQ(step1[2], 0.6f);
      const std::vector<float>& step3 = run.gathered[3][rank];
      ASSERT_EQ(step3.size(), 3u);
      EXPECT_EQ(step3[0], INFINITY);
      EXPECT_FLOAT_EQ(step3[1], 1.0f);
      EXPECT_EQ(step3[2], -INFINITY);
    }
  }
}

TEST(GradientReducer, TheStepLossMustBeKnownBeforeBucketZeroLeaves) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  const auto errors = comm::testing::run_rank_threads(1, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, 1, comm::Millis(20'000));
    nn::MlpSpec spec;
    spec.in_features = 2;
    spec.hidden = {};
    spec.classes = 2;
    nn::Model model(nn::build_mlp(spec), 7);
    GradientReducer reducer(model, group, ReducerOptions{});
    reducer.begin_step();
    model.flat_grads().zero();
    reducer.finish_step();  // no set_step_loss: a caller bug, not a silent "finite"
  });
  EXPECT_NE(errors[0].find("set_step_loss"), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace gradmesh::parallel
