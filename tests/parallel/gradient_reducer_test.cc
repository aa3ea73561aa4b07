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
#include "support/temp_dir.h"

namespace gradmesh::parallel {
namespace {

std::vector<nn::ParameterInfo> params_of_sizes(const std::vector<int64_t>& numels) {
  std::vector<nn::ParameterInfo> out;
  int64_t offset = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    out.push_back({"p" + std::to_string(i), {numels[i]}, offset, numels[i]});
    offset += numels[i];
  }
  return out;
}

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
          return;
        }
        std::vector<float> x(12);
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i + 13 * rank + step));
        autograd::Variable input(Tensor::from_vector({2, 6}, x));
        auto loss = autograd::cross_entropy(model.forward(input), {rank % 3, (rank + step) % 3}, 4.0f);
        model.backward(loss, hook);
      };
      // This rank's own gradients first, in a pass without the reducer: once a
      // bucket is handed over, its all-reduce rewrites it in place at any moment.
      backprop({});
      run.local[rank] = model.flat_grads().to_vector();
      backprop(reducer.begin_step());
      reducer.finish_step();
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

}  // namespace
}  // namespace gradmesh::parallel
