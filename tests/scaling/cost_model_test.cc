// The scaling cost model's maths and its fits, on synthetic measurements
// whose true parameters are known.
#include "gradmesh/scaling/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"

namespace gradmesh::scaling {
namespace {

TEST(AllreduceSeconds, RingAndHalvingDoublingSendTheSameBytesInDifferentlyManyMessages) {
  const LinkCost link{1e-4, 1e-9};
  // 4 ranks, 1 MB: each rank sends 2 * 3/4 MB; ring in 6 messages, halving-doubling in 4.
  EXPECT_NEAR(allreduce_seconds(Algorithm::kRing, 1e6, 4, link), 6e-4 + 1.5e-3, 1e-12);
  EXPECT_NEAR(allreduce_seconds(Algorithm::kHalvingDoubling, 1e6, 4, link), 4e-4 + 1.5e-3, 1e-12);
  // 3 ranks: ceil(log2 3) = 2 rounds each way.
  EXPECT_NEAR(allreduce_seconds(Algorithm::kHalvingDoubling, 0, 3, link), 4e-4, 1e-12);
  EXPECT_EQ(allreduce_seconds(Algorithm::kRing, 1e6, 1, link), 0.0) << "one rank sends nothing";
  const LinkCost gbit = link_of(1e9, 50e-6);
  EXPECT_DOUBLE_EQ(gbit.alpha_s, 50e-6);
  EXPECT_DOUBLE_EQ(gbit.beta_s_per_byte, 8e-9);
}

std::vector<AllreduceSample> synthetic(const LinkCost& truth, double noise) {
  const CounterRng rng(3, RngPurpose::kTest, 0);
  std::vector<AllreduceSample> out;
  uint64_t i = 0;
  for (Algorithm a : {Algorithm::kRing, Algorithm::kHalvingDoubling})
    for (int ranks : {2, 3, 4})
      for (double bytes : {4e3, 64e3, 1e6, 16e6}) {
        const double t = allreduce_seconds(a, bytes, ranks, truth);
        out.push_back({a, bytes, ranks, t * (1.0 + noise * (2.0 * rng.uniform(i++) - 1.0))});
      }
  return out;
}

TEST(FitLink, RecoversLatencyAndBandwidthFromMeasuredAllreduces) {
  const LinkCost truth = link_of(1e9, 50e-6);
  const LinkCost exact = fit_link(synthetic(truth, 0.0));
  EXPECT_NEAR(exact.alpha_s, truth.alpha_s, 1e-9);
  EXPECT_NEAR(exact.beta_s_per_byte, truth.beta_s_per_byte, 1e-15);
  const LinkCost noisy = fit_link(synthetic(truth, 0.05));  // +-5% per measurement
  EXPECT_NEAR(noisy.alpha_s / truth.alpha_s, 1.0, 0.1);
  EXPECT_NEAR(noisy.beta_s_per_byte / truth.beta_s_per_byte, 1.0, 0.05);
}

TEST(FitLink, RefusesSamplesThatCannotSeparateTheTwoTerms) {
  EXPECT_THROW(fit_link({{Algorithm::kRing, 1e6, 2, 1e-3}}), Error);
  EXPECT_THROW(fit_link({{Algorithm::kRing, 1e6, 2, 1e-3}, {Algorithm::kRing, 1e6, 2, 1.1e-3}}), Error)
      << "one size on one world size: latency and bandwidth are indistinguishable";
  EXPECT_THROW(fit_link({{Algorithm::kRing, 1e6, 2, 0.0}, {Algorithm::kRing, 1e3, 2, 1e-4}}), Error);
}

TEST(FitCompute, FitsTheFixedAndPerSampleCost) {
  const ComputeCost c = fit_compute({{128, 2e-3 + 128e-4}, {64, 2e-3 + 64e-4}, {32, 2e-3 + 32e-4}});
  EXPECT_NEAR(c.fixed_s, 2e-3, 1e-12);
  EXPECT_NEAR(c.per_sample_s, 1e-4, 1e-15);
  const ComputeCost one = fit_compute({{64, 6.4e-3}});
  EXPECT_DOUBLE_EQ(one.fixed_s, 0.0);
  EXPECT_NEAR(one.per_sample_s, 1e-4, 1e-15);
  // Noise that would give a negative intercept: the line goes through the origin instead.
  const ComputeCost origin = fit_compute({{128, 13.0e-3}, {64, 6.0e-3}, {32, 2.8e-3}});
  EXPECT_DOUBLE_EQ(origin.fixed_s, 0.0);
  EXPECT_GT(origin.per_sample_s, 0.0);
  EXPECT_THROW(fit_compute({}), Error);
  EXPECT_THROW(fit_compute({{0, 1e-3}}), Error);
}

StepModel mlp_like() {
  StepModel m;
  m.compute = {0.2e-3, 10e-6};  // a small model: 10 us per sample
  m.backward_share = 2.0 / 3.0;
  m.overlap = 0.5;
  m.optimizer_s = 0.3e-3;
  m.link = link_of(1e9, 50e-6);
  m.bucket_bytes = {1.6e6};  // 400 k float32 gradients in one bucket
  m.halving_doubling_up_to = 256e3;
  return m;
}

TEST(Predict, AddsComputeTheExposedCommunicationAndTheFixedParts) {
  const StepModel m = mlp_like();
  const Prediction p = predict(m, 128, 2);
  const double compute = 0.2e-3 + 64 * 10e-6;
  const double comm = allreduce_seconds(Algorithm::kRing, 1.6e6, 2, m.link);
  EXPECT_DOUBLE_EQ(p.compute_s, compute);
  EXPECT_DOUBLE_EQ(p.comm_s, comm);
  EXPECT_DOUBLE_EQ(p.exposed_s, comm - 0.5 * (2.0 / 3.0) * compute);
  EXPECT_DOUBLE_EQ(p.step_s, compute + 0.3e-3 + p.exposed_s);
  EXPECT_DOUBLE_EQ(p.samples_per_s, 128 / p.step_s);
  // An uneven split waits for the larger share; a fast link hides completely.
  EXPECT_DOUBLE_EQ(predict(m, 129, 2).compute_s, 0.2e-3 + 65 * 10e-6);
  StepModel fast = m;
  fast.link = link_of(1e12, 1e-7);
  EXPECT_EQ(predict(fast, 128, 2).exposed_s, 0.0);
  // Small buckets run halving-doubling: fewer messages on 8 ranks.
  StepModel small = m;
  small.bucket_bytes = {100e3};
  EXPECT_DOUBLE_EQ(predict(small, 128, 8).comm_s, allreduce_seconds(Algorithm::kHalvingDoubling, 100e3, 8, m.link));
  // Local steps: the parameters' all-reduce every 8 steps costs each step an eighth of it.
  StepModel local = m;
  local.communicate_every = 8;
  EXPECT_DOUBLE_EQ(predict(local, 128, 2).comm_s, comm / 8);
}

TEST(PredictCurve, ASmallModelOnASlowLinkPeaksEarlyAndThenSlowsDown) {
  StepModel m = mlp_like();
  m.link = link_of(200e6, 50e-6);
  const ScalingCurve curve = predict_curve(m, 128, 1024);
  ASSERT_EQ(curve.points.size(), 128u) << "never more workers than samples per step";
  EXPECT_DOUBLE_EQ(curve.points[0].speedup, 1.0);
  EXPECT_LT(curve.fastest, 4);
  EXPECT_EQ(curve.slower_from, curve.fastest + 1);
  for (const Prediction& p : curve.points)
    EXPECT_LE(p.samples_per_s, curve.points[curve.fastest - 1].samples_per_s);
  EXPECT_LT(curve.points.back().samples_per_s, curve.points[0].samples_per_s) << "128 workers are slower than one";
}

TEST(PredictCurve, AComputeHeavyModelScalesFurtherOnAFastLink) {
  StepModel m = mlp_like();
  m.compute = {1e-3, 2e-3};  // a CNN-like model: 2 ms per sample
  m.link = link_of(10e9, 20e-6);
  const ScalingCurve curve = predict_curve(m, 512, 1024);
  EXPECT_GE(curve.knee, 64);
  EXPECT_GT(curve.points[15].speedup, 12.0) << "16 workers";
  EXPECT_GE(curve.points[curve.knee - 1].efficiency, 0.5);
  if (curve.knee < static_cast<int>(curve.points.size())) {
    EXPECT_LT(curve.points[curve.knee].efficiency, 0.5);
  }
}

}  // namespace
}  // namespace gradmesh::scaling
