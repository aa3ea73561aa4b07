// The training state through a real checkpoint directory: what a snapshot
// holds under PyTorch's optimizer names, that restoring it gives back every
// bit, that a checkpoint of the wrong shape or optimizer is refused naming
// the file and tensor, and how a run decides what to continue from.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstring>

#include "gradmesh/checkpoint/checkpoint_writer.h"
#include "gradmesh/core/error.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/train/model_factory.h"
#include "gradmesh/train/run_plan.h"
#include "gradmesh/train/stop_request.h"
#include "gradmesh/train/training_state.h"
#include "support/temp_dir.h"

namespace gradmesh::train {
namespace {

const InputGeometry kTinyImage{1, 2, 2};

struct Trained {
  std::unique_ptr<nn::Model> model;
  std::unique_ptr<optim::Optimizer> optimizer;
};

// A small model and optimizer after `steps` updates with made-up gradients.
Trained trained(const std::string& optimizer, int steps, uint64_t seed) {
  ModelConfig m;
  m.hidden = {3};
  m.classes = 2;
  Trained t;
  t.model = build_model(m, kTinyImage, seed);
  const int64_t n = t.model->num_parameters();
  std::vector<optim::ParamGroup> groups{{0, n, 0.01f}};
  t.optimizer = optimizer == "adamw" ? optim::make_adamw(groups, {}) : optim::make_sgd(groups, {0.9f, 0, false});
  std::vector<float> grads(static_cast<size_t>(n));
  for (int s = 0; s < steps; ++s) {
    for (int64_t i = 0; i < n; ++i) grads[static_cast<size_t>(i)] = static_cast<float>((i * 7 + s * 3) % 11) / 13.0f - 0.4f;
    t.optimizer->step(t.model->flat_params().data(), grads.data(), 0.1f);
  }
  return t;
}

checkpoint::TrainerState state_at(int64_t step, const std::string& optimizer) {
  checkpoint::TrainerState s;
  s.step = step;
  s.step_in_epoch = step;
  s.epoch_position = step * 4;
  s.config_hash = "0123456789abcdef";
  s.optimizer = optimizer;
  return s;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

std::string save(const std::string& dir, Trained& t, int64_t step, const std::string& optimizer) {
  checkpoint::CheckpointWriter writer({dir, 0});
  const checkpoint::SaveResult r = writer.save(take_snapshot(*t.model, *t.optimizer, state_at(step, optimizer)));
  EXPECT_TRUE(r.ok) << r.error;
  return r.path;
}

TEST(TrainingState, SnapshotUsesPyTorchOptimizerNames) {
  Trained t = trained("sgd", 2, 1);
  const checkpoint::Snapshot s = take_snapshot(*t.model, *t.optimizer, state_at(2, "sgd"));
  ASSERT_EQ(s.tensor_files.size(), 2u);
  EXPECT_EQ(s.tensor_files[0].name, "model.safetensors");
  const checkpoint::TensorFile& optim = s.tensor_files[1];
  std::vector<std::string> names;
  for (const checkpoint::NamedTensor& n : optim.tensors) names.push_back(n.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "state.0.momentum_buffer"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "state.3.step"), names.end());
  EXPECT_EQ(optim.metadata.at("optimizer"), "sgd");
  EXPECT_EQ(optim.metadata.at("param_names"), "1.weight,1.bias,3.weight,3.bias");
}

class TrainingStateFiles : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainingStateFiles, RestoreGivesBackEveryBit) {
  testing::TempDir dir;
  Trained source = trained(GetParam(), 3, 1);
  save(dir.path(), source, 3, GetParam());
  Trained target = trained(GetParam(), 0, 2);  // other init, no state yet
  const std::optional<checkpoint::LoadedCheckpoint> loaded = checkpoint::load_latest(dir.path());
  ASSERT_TRUE(loaded.has_value());
  restore_state(*loaded, *target.model, *target.optimizer);
  EXPECT_TRUE(same_bits(target.model->flat_params(), source.model->flat_params()));
  const auto a = source.optimizer->state(), b = target.optimizer->state();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i].second, b[i].second)) << a[i].first;
  EXPECT_EQ(target.optimizer->steps_taken(), 3);
  EXPECT_EQ(loaded->trainer.step, 3);
}

INSTANTIATE_TEST_SUITE_P(BothOptimizers, TrainingStateFiles, ::testing::Values("sgd", "adamw"));

TEST(TrainingState, AnotherOptimizersCheckpointIsRefusedNamingTheFile) {
  testing::TempDir dir;
  Trained source = trained("adamw", 1, 1);
  save(dir.path(), source, 1, "adamw");
  Trained target = trained("sgd", 0, 1);
  try {
    restore_state(*checkpoint::load_latest(dir.path()), *target.model, *target.optimizer);
    FAIL() << "restored an adamw state into sgd";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat);
    EXPECT_NE(std::string(e.what()).find("optimizer.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("optim.name = 'sgd'"), std::string::npos) << e.what();
  }
}

TEST(TrainingState, AModelOfAnotherShapeIsRefused) {
  testing::TempDir dir;
  Trained source = trained("sgd", 1, 1);
  save(dir.path(), source, 1, "sgd");
  ModelConfig wider;
  wider.hidden = {4};
  wider.classes = 2;
  std::unique_ptr<nn::Model> model = build_model(wider, kTinyImage, 1);
  auto optimizer = optim::make_sgd({{0, model->num_parameters(), 0}}, {0.9f, 0, false});
  EXPECT_THROW(restore_state(*checkpoint::load_latest(dir.path()), *model, *optimizer), Error);
}

TEST(RunPlan, AutoWithoutCheckpointsStartsFreshAndSaysSo) {
  testing::TempDir dir;
  Config c;
  c.output.dir = dir.path();
  c.output.run_id = "r";
  RunOptions o;
  o.resume = "auto";
  const RunPlan plan = plan_run(c, o);
  EXPECT_FALSE(plan.checkpoint.has_value());
  EXPECT_TRUE(plan.reuse);
  ASSERT_FALSE(plan.notes.empty());
  EXPECT_NE(plan.notes.back().find("starting at step 0"), std::string::npos) << plan.notes.back();
}

TEST(RunPlan, AutoWithoutARunIdContinuesTheRunOfThisConfig) {
  testing::TempDir dir;
  Config c;
  c.output.dir = dir.path();
  Trained t = trained("sgd", 1, 1);
  checkpoint::CheckpointWriter writer({dir.path() + "/older/checkpoints", 0});
  checkpoint::TrainerState s = state_at(7, "sgd");
  s.config_hash = training_config_hash(c);
  ASSERT_TRUE(writer.save(take_snapshot(*t.model, *t.optimizer, s)).ok);
  Config other = c;
  other.optim.lr = 0.5;  // another config's run is not continued
  checkpoint::CheckpointWriter other_writer({dir.path() + "/other/checkpoints", 0});
  checkpoint::TrainerState o_state = state_at(9, "sgd");
  o_state.config_hash = training_config_hash(other);
  ASSERT_TRUE(other_writer.save(take_snapshot(*t.model, *t.optimizer, o_state)).ok);

  RunOptions o;
  o.resume = "auto";
  const RunPlan plan = plan_run(c, o);
  ASSERT_TRUE(plan.checkpoint.has_value());
  EXPECT_EQ(plan.id, "older");
  EXPECT_EQ(plan.checkpoint->trainer.step, 7);
}

TEST(RunPlan, WithoutResumeNothingIsLoaded) {
  testing::TempDir dir;
  Config c;
  c.output.dir = dir.path();
  const RunPlan plan = plan_run(c, {});
  EXPECT_FALSE(plan.checkpoint.has_value());
  EXPECT_FALSE(plan.reuse);
  EXPECT_FALSE(plan.id.empty());
}

TEST(TrainingConfigHash, IgnoresHowTheRunIsExecutedButNotItsMaths) {
  Config a;
  Config b = a;
  b.train.threads = 2;
  b.parallel.backend = "gloo";
  b.output.run_id = "x";
  b.checkpoint.every_steps = 5;
  b.parallel.zero = 2;
  b.model.recompute = true;
  EXPECT_EQ(training_config_hash(a), training_config_hash(b));
  b.optim.lr = 0.01;
  EXPECT_NE(training_config_hash(a), training_config_hash(b));
  Config c = a;
  c.parallel.comm_dtype = "bf16";
  EXPECT_NE(training_config_hash(a), training_config_hash(c));
}

TEST(StopVote, OneProcessFollowsItsOwnSignal) {
  clear_stop_signal();
  catch_stop_signal();
  StopVote vote(nullptr);
  vote.begin_step();
  EXPECT_FALSE(vote.finish_step());
  ::raise(SIGTERM);  // recorded, not fatal
  EXPECT_TRUE(stop_signal_received());
  vote.begin_step();
  EXPECT_TRUE(vote.finish_step());
  clear_stop_signal();
  ::signal(SIGTERM, SIG_DFL);
}

}  // namespace
}  // namespace gradmesh::train
