// Reading the probes back (metrics.jsonl, bench comm's JSON lines), malformed
// files named, and the step model fitted from synthetic probes whose true
// parameters are known.
#include "gradmesh/scaling/probe.h"

#include <gtest/gtest.h>

#include <fstream>

#include "gradmesh/core/error.h"
#include "support/temp_dir.h"

namespace gradmesh::scaling {
namespace {

using testing::TempDir;

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream(path) << text;
  return path;
}

std::string step_line(int step, double rate, double backward_ms = 2.0) {
  return R"({"type": "step", "step": )" + std::to_string(step) + R"(, "samples_per_s": )" + std::to_string(rate) +
         R"(, "data_ms": 0.5, "forward_ms": 1.0, "backward_ms": )" + std::to_string(backward_ms) +
         R"(, "comm_ms": 0.25, "optimizer_ms": 0.1})" + "\n";
}

TEST(ReadProbe, AveragesTheStepEventsAfterTheWarmUpWeighedByTheStepsTheyCover) {
  TempDir dir;
  const std::string path = write(dir, "m.jsonl",
                                 R"({"type": "memory", "estimate_bytes": 1})" "\n" + step_line(5, 100.0, 50.0) +
                                     step_line(10, 1000.0, 2.0) + step_line(20, 2000.0, 5.0) +
                                     R"({"type": "summary", "steps": 20})" "\n");
  const ProbeMeasurement p = read_probe(path, 2, 128, 5);
  EXPECT_EQ(p.steps, 15) << "steps 6..20; the warm-up's event is left out";
  EXPECT_DOUBLE_EQ(p.backward_s, (5 * 2.0 + 10 * 5.0) / 15 / 1e3);
  EXPECT_DOUBLE_EQ(p.forward_s, 1e-3);
  EXPECT_DOUBLE_EQ(p.exposed_s, 0.25e-3);
  // The mean step time (5 steps at 128/1000 s, 10 at 128/2000 s), not the
  // batch over the mean rate: with local SGD one window in eight holds the
  // synchronisation, and averaging rates would hide most of it.
  EXPECT_DOUBLE_EQ(p.step_s, (5 * 128.0 / 1000.0 + 10 * 128.0 / 2000.0) / 15);
  EXPECT_GT(p.step_s, 128.0 / ((5 * 1000.0 + 10 * 2000.0) / 15));
  EXPECT_DOUBLE_EQ(p.compute_s(), p.forward_s + p.backward_s);
}

TEST(ReadProbe, MalformedOrShortRunsAreNamed) {
  TempDir dir;
  try {
    read_probe(write(dir, "a.jsonl", step_line(10, 1000) + "{not json\n"), 1, 64, 0);
    FAIL() << "a broken line must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a.jsonl:2"), std::string::npos) << e.what();
  }
  try {
    read_probe(write(dir, "b.jsonl", R"({"type": "step", "step": 10, "samples_per_s": 5})" "\n"), 1, 64, 0);
    FAIL() << "missing phase times must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data_ms"), std::string::npos) << e.what();
  }
  try {
    read_probe(write(dir, "c.jsonl", step_line(5, 1000)), 1, 64, 10);
    FAIL() << "nothing after the warm-up";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("warm-up"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_probe(write(dir, "d.jsonl", step_line(10, 1000) + step_line(10, 1000)), 1, 64, 0), Error)
      << "steps must advance";
  EXPECT_THROW(read_probe(dir.file("missing.jsonl"), 1, 64, 0), Error);
}

TEST(ReadCommSamples, TakesBenchCommsObjectsAndSkipsOtherLines) {
  const std::string text =
      "gradmesh launch: starting 2 workers\n"
      R"([rank 0]: {"op":"allreduce","backend":"gloo","ranks":2,"bytes":4096,"time_us":50,"algorithm":"halving-doubling"})" "\n"
      R"({"op":"allreduce","backend":"gloo","ranks":2,"bytes":1048576,"time_us":900,"algorithm":"ring"})" "\n"
      R"({"op":"p2p","ranks":2,"bytes":4096,"time_us":20})" "\n"
      "| table | line |\n";
  const std::vector<AllreduceSample> s = read_comm_samples(text, "comm.log");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].algorithm, Algorithm::kHalvingDoubling);
  EXPECT_DOUBLE_EQ(s[0].seconds, 50e-6);
  EXPECT_EQ(s[1].algorithm, Algorithm::kRing);
  EXPECT_DOUBLE_EQ(halving_doubling_limit(s), 4096);
  EXPECT_THROW(read_comm_samples(R"({"op":"allreduce","ranks":2,"bytes":4096})", "x"), Error) << "no time";
  EXPECT_THROW(read_comm_samples(R"({"op":"allreduce","ranks":1,"bytes":4096,"time_us":5})", "x"), Error);
}

// What probes at `counts` workers would measure if `truth` were exact:
// backward its share of compute, optimizer time stretched by time-sharing.
std::vector<ProbeMeasurement> probes_of(const StepModel& truth, int64_t batch, const std::vector<int>& counts) {
  std::vector<ProbeMeasurement> probes;
  for (int n : counts) {
    const Prediction q = predict(truth, batch, n);
    ProbeMeasurement p;
    p.workers = n;
    p.global_batch = batch;
    p.steps = 10;
    p.forward_s = q.compute_s * (1 - truth.backward_share);
    p.backward_s = q.compute_s * truth.backward_share;
    p.optimizer_s = truth.optimizer_s * truth.sharing(n);
    p.exposed_s = q.exposed_s;
    p.step_s = q.step_s;
    probes.push_back(p);
  }
  return probes;
}

TEST(FitStepModel, RecoversComputeAndOverlapFromSyntheticProbes) {
  const LinkCost link = link_of(10e9, 20e-6);
  const std::vector<double> buckets = {4e6, 1e6};
  StepModel truth;
  truth.compute = {1e-3, 50e-6};
  truth.backward_share = 0.6;
  truth.overlap = 0.4;
  truth.link = link;
  truth.bucket_bytes = buckets;
  const std::vector<ProbeMeasurement> probes = probes_of(truth, 256, {1, 2, 4});
  const StepModel m = fit_step_model(probes, link, buckets, 0);
  EXPECT_NEAR(m.compute.fixed_s, 1e-3, 1e-9);
  EXPECT_NEAR(m.compute.per_sample_s, 50e-6, 1e-12);
  EXPECT_NEAR(m.backward_share, 0.6, 1e-12);
  EXPECT_NEAR(m.overlap, 0.4, 1e-9);
  for (const ProbeMeasurement& p : probes) EXPECT_NEAR(predict(m, 256, p.workers).step_s, p.step_s, 1e-9);
}

// Four workers on two cores take twice as long for their share: the fit
// takes that out and the model with shared cores puts it back.
TEST(FitStepModel, TakesTimeSharingOutOfProbesOnFewerCores) {
  const LinkCost link = link_of(1e9, 50e-6);
  StepModel truth;
  truth.compute = {1e-3, 50e-6};
  truth.backward_share = 0.5;
  truth.optimizer_s = 0.2e-3;
  truth.link = link;
  truth.bucket_bytes = {1e6};
  truth.shared_cores = 2;
  const std::vector<ProbeMeasurement> probes = probes_of(truth, 128, {1, 2, 4});
  EXPECT_DOUBLE_EQ(predict(truth, 128, 4).compute_s, 2 * (1e-3 + 32 * 50e-6)) << "4 workers on 2 cores";
  const StepModel m = fit_step_model(probes, link, {1e6}, 0, 2);
  EXPECT_NEAR(m.compute.fixed_s, 1e-3, 1e-9);
  EXPECT_NEAR(m.compute.per_sample_s, 50e-6, 1e-12);
  EXPECT_NEAR(m.optimizer_s, 0.2e-3, 1e-12);
  for (const ProbeMeasurement& p : probes) EXPECT_NEAR(predict(m, 128, p.workers).step_s, p.step_s, 1e-9);
  StepModel own = m;
  own.shared_cores = 0;
  EXPECT_LT(predict(own, 128, 4).step_s, predict(m, 128, 4).step_s) << "with cores of their own, 4 workers are faster";
}

// Local SGD synchronises after every 8th step, outside backward: the fit must
// divide the all-reduce by 8 and hide none of it. Fitted as if every step
// all-reduced, the probes would read as 7/8 hidden behind backward.
TEST(FitStepModel, LocalStepsCommunicateEveryHStepsWithoutOverlap) {
  const LinkCost link = link_of(1e9, 50e-6);
  StepModel truth;
  truth.compute = {1e-3, 50e-6};
  truth.backward_share = 0.6;
  truth.link = link;
  truth.bucket_bytes = {2.7e6};
  truth.communicate_every = 8;
  truth.overlaps_backward = false;
  const std::vector<ProbeMeasurement> probes = probes_of(truth, 128, {1, 2});
  StepModel shape;
  shape.communicate_every = 8;
  shape.overlaps_backward = false;
  const StepModel m = fit_step_model(probes, link, {2.7e6}, 0, 0, shape);
  EXPECT_EQ(m.overlap, 0.0);
  for (const ProbeMeasurement& p : probes) EXPECT_NEAR(predict(m, 128, p.workers).step_s, p.step_s, 1e-9);
  EXPECT_NEAR(predict(m, 128, 8).step_s, predict(truth, 128, 8).step_s, 1e-9);
  const StepModel unshaped = fit_step_model(probes, link, {2.7e6}, 0, 0);
  EXPECT_GT(unshaped.overlap, 0.5) << "the fit without the shape mistakes the missing traffic for overlap";
}

}  // namespace
}  // namespace gradmesh::scaling
