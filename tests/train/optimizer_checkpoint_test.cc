// Resharding the optimizer state: state saved whole or as ZeRO shards at one
// world size restores, bit for bit per element, into the groups of any rank
// at any other world size and into one process's optimizer; another
// optimizer's state and another model's are refused naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "gradmesh/checkpoint/checkpoint_writer.h"
#include "gradmesh/checkpoint/optimizer_state.h"
#include "gradmesh/core/error.h"
#include "gradmesh/nn/models.h"
#include "gradmesh/parallel/zero_shard.h"
#include "gradmesh/train/optimizer_checkpoint.h"
#include "gradmesh/train/training_state.h"
#include "support/temp_dir.h"

namespace gradmesh::train {
namespace {

using gradmesh::testing::TempDir;

std::unique_ptr<nn::Model> small_model(int64_t hidden = 6) {
  nn::MlpSpec spec;
  spec.in_features = 5;
  spec.hidden = {hidden, 4};
  spec.classes = 3;  // 5*6+6 + 6*4+4 + 4*3+3 = 79 elements: divisible by none of 2, 3, 4
  return std::make_unique<nn::Model>(nn::build_mlp(spec), 7);
}

float decay(const nn::ParameterInfo& p) { return p.shape.size() > 1 ? 0.1f : 0.0f; }

std::vector<optim::ParamGroup> whole_groups(const nn::Model& model) {
  std::vector<optim::ParamGroup> groups;
  for (const nn::ParameterInfo& p : model.parameters()) groups.push_back({p.offset, p.numel, decay(p)});
  return groups;
}

// Rank `rank` of `world`'s ZeRO groups, with tiny buckets so every rank owns several pieces.
std::vector<optim::ParamGroup> shard_groups(const nn::Model& model, int rank, int world) {
  const parallel::ShardLayout layout(model.parameters(), world, 40, 80);
  return parallel::shard_param_groups(layout, rank, model.parameters(), decay);
}

std::unique_ptr<optim::Optimizer> make(const std::string& name, std::vector<optim::ParamGroup> groups) {
  if (name == "adamw") return optim::make_adamw(std::move(groups), {});
  return optim::make_sgd(std::move(groups), {0.9f, 0.0f, false});
}

// Three steps over the whole buffer with made-up gradients, so every state element differs.
std::unique_ptr<optim::Optimizer> trained_whole(const std::string& name, nn::Model& model) {
  auto optimizer = make(name, whole_groups(model));
  std::vector<float> grads(static_cast<size_t>(model.num_parameters()));
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>((i * 7 + s * 3) % 11) / 13.0f - 0.4f;
    optimizer->step(model.flat_params().data(), grads.data(), 0.01f);
  }
  return optimizer;
}

// The state element of flat element `e` in `optimizer` (buffer `name`), or nullptr when its groups miss it.
float* element(optim::Optimizer& optimizer, const std::string& name, int64_t e) {
  int64_t at = 0;
  for (const optim::ParamGroup& g : optimizer.groups()) {
    if (e >= g.offset && e < g.offset + g.count) {
      for (auto& [n, buffer] : optimizer.state())
        if (n == name) return buffer.data() + at + (e - g.offset);
    }
    at += g.count;
  }
  return nullptr;
}

// `target`'s state equals `source`'s on every element its groups hold, and the step counter.
void expect_same_state(optim::Optimizer& source, optim::Optimizer& target, int64_t numel) {
  EXPECT_EQ(target.steps_taken(), source.steps_taken());
  for (auto& [name, buffer] : source.state()) {
    if (name == "step") continue;
    for (int64_t e = 0; e < numel; ++e) {
      const float* want = element(source, name, e);
      const float* got = element(target, name, e);
      if (!got) continue;
      ASSERT_NE(want, nullptr);
      ASSERT_EQ(std::memcmp(want, got, sizeof(float)), 0) << name << " element " << e;
    }
  }
}

// Writes the ZeRO checkpoint of `world` ranks whose state comes from `whole`: rank 0 commits, the others save parts.
void save_sharded(const std::string& dir, nn::Model& model, optim::Optimizer& whole, int world, int64_t step) {
  checkpoint::TrainerState state;
  state.step = step;
  state.world_size = world;
  state.optimizer = whole.name();
  state.zero_stage = 2;
  checkpoint::CheckpointWriter committer({dir, 0});
  // Each rank's optimizer holds the whole state's elements of its groups.
  std::vector<std::unique_ptr<optim::Optimizer>> shards;
  for (int r = 0; r < world; ++r) {
    shards.push_back(make(whole.name(), shard_groups(model, r, world)));
    for (auto& [name, buffer] : shards.back()->state()) {
      if (name == "step") {
        buffer.data()[0] = static_cast<float>(whole.steps_taken());
        continue;
      }
      for (const optim::ParamGroup& g : shards.back()->groups())
        for (int64_t e = g.offset; e < g.offset + g.count; ++e)
          *element(*shards.back(), name, e) = *element(whole, name, e);
    }
  }
  for (int r = 1; r < world; ++r) {
    checkpoint::CheckpointWriter part({dir, 0, false});
    ASSERT_TRUE(part.save(take_sharded_snapshot(model, *shards[r], state, r, world)).ok);
  }
  const checkpoint::SaveResult r = committer.save(take_sharded_snapshot(model, *shards[0], state, 0, world));
  ASSERT_TRUE(r.ok) << r.error;
}

class Resharding : public ::testing::TestWithParam<std::string> {};

TEST_P(Resharding, ShardsOfOneWorldSizeRestoreIntoAnyOtherAndIntoOneProcess) {
  for (int saved_world : {2, 3}) {
    SCOPED_TRACE("saved by " + std::to_string(saved_world) + " ranks");
    TempDir dir;
    std::unique_ptr<nn::Model> model = small_model();
    std::unique_ptr<optim::Optimizer> whole = trained_whole(GetParam(), *model);
    save_sharded(dir.path(), *model, *whole, saved_world, 3);
    const checkpoint::LoadedCheckpoint loaded = *checkpoint::load_latest(dir.path());
    EXPECT_EQ(checkpoint::optimizer_state_files(loaded).size(), static_cast<size_t>(saved_world));
    for (int world : {1, 2, 3, 4}) {
      for (int rank = 0; rank < world; ++rank) {
        SCOPED_TRACE("restored on rank " + std::to_string(rank) + " of " + std::to_string(world));
        auto target = make(GetParam(), world == 1 ? whole_groups(*model) : shard_groups(*model, rank, world));
        restore_optimizer(loaded, *model, *target);
        expect_same_state(*whole, *target, model->num_parameters());
      }
    }
  }
}

TEST_P(Resharding, AWholeCheckpointRestoresIntoShards) {
  TempDir dir;
  std::unique_ptr<nn::Model> model = small_model();
  std::unique_ptr<optim::Optimizer> whole = trained_whole(GetParam(), *model);
  checkpoint::TrainerState state;
  state.step = 3;
  state.optimizer = whole->name();
  ASSERT_TRUE(checkpoint::CheckpointWriter({dir.path(), 0}).save(take_snapshot(*model, *whole, state)).ok);
  const checkpoint::LoadedCheckpoint loaded = *checkpoint::load_latest(dir.path());
  for (int rank = 0; rank < 3; ++rank) {
    auto target = make(GetParam(), shard_groups(*model, rank, 3));
    restore_optimizer(loaded, *model, *target);
    expect_same_state(*whole, *target, model->num_parameters());
  }
}

INSTANTIATE_TEST_SUITE_P(BothOptimizers, Resharding, ::testing::Values("sgd", "adamw"));

TEST(Resharding, AnotherOptimizerOrAnotherModelIsRefusedNamingTheFile) {
  TempDir dir;
  std::unique_ptr<nn::Model> model = small_model();
  std::unique_ptr<optim::Optimizer> whole = trained_whole("adamw", *model);
  save_sharded(dir.path(), *model, *whole, 2, 3);
  const checkpoint::LoadedCheckpoint loaded = *checkpoint::load_latest(dir.path());
  auto message = [&](nn::Model& m, optim::Optimizer& o) {
    try {
      restore_optimizer(loaded, m, o);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat);
      return std::string(e.what());
    }
    return std::string();
  };
  auto sgd = make("sgd", shard_groups(*model, 0, 2));
  const std::string other = message(*model, *sgd);
  EXPECT_NE(other.find("optimizer.shard-00001-of-00002.safetensors: holds the state of optimizer 'adamw', but this run "
                       "uses optim.name = 'sgd'"),
            std::string::npos)
      << other;
  std::unique_ptr<nn::Model> wider = small_model(7);
  auto adamw = make("adamw", whole_groups(*wider));
  const std::string shape = message(*wider, *adamw);
  EXPECT_NE(shape.find("but the model has " + std::to_string(wider->num_parameters())), std::string::npos) << shape;
}

}  // namespace
}  // namespace gradmesh::train
