// The planner's layouts and their costs, against the formulas in
// scaling/layout_plan.h, on configs that need no dataset.
#include "gradmesh/scaling/layout_plan.h"
#include "gradmesh/scaling/units.h"

#include <gtest/gtest.h>

#include <set>

#include "gradmesh/core/error.h"
#include "gradmesh/train/config.h"

namespace gradmesh::scaling {
namespace {

train::Config gpt_config() {
  train::Config c = train::load_config(GRADMESH_SOURCE_DIR "/examples/gpt.toml");
  c.model.n_layer = 4;
  c.model.n_head = 4;
  c.model.n_embd = 64;
  c.model.block_size = 32;
  c.train.batch_size = 16;
  c.parallel.micro_batches = 4;
  return c;
}

train::InputGeometry gpt_geometry() {
  train::InputGeometry g;
  g.vocab_size = 64;
  return g;
}

std::set<std::string> names(const std::vector<Layout>& layouts) {
  std::set<std::string> out;
  for (const Layout& l : layouts) out.insert(l.name());
  return out;
}

TEST(CandidateLayouts, EveryMeshTrainingCanRunAndZeroOnlyOverDataParallelRanks) {
  const std::set<std::string> gpt = names(candidate_layouts(gpt_config(), 4));
  for (const char* expected : {"dp=4", "dp=4 zero=1", "dp=4 zero=3", "dp=2 tp=2", "dp=2 tp=2 zero=3", "tp=4",
                               "dp=2 pp=2", "dp=2 pp=2 zero=2", "pp=2 tp=2", "pp=4"})
    EXPECT_TRUE(gpt.count(expected)) << expected;
  EXPECT_FALSE(gpt.count("dp=2 pp=2 zero=3")) << "ZeRO stage 3 does not run with pipeline stages";
  EXPECT_FALSE(gpt.count("tp=4 zero=1")) << "no data-parallel ranks to shard over";
  train::Config small = gpt_config();
  small.model.n_head = 2;
  small.model.n_layer = 2;
  const std::set<std::string> limited = names(candidate_layouts(small, 4));
  EXPECT_FALSE(limited.count("tp=4")) << "4 shards need heads divisible by 4";
  EXPECT_FALSE(limited.count("pp=4")) << "4 stages need 4 blocks";
  train::Config mlp = train::load_config(GRADMESH_SOURCE_DIR "/examples/mlp.toml");
  EXPECT_EQ(names(candidate_layouts(mlp, 4)), (std::set<std::string>{"dp=4", "dp=4 zero=1", "dp=4 zero=2", "dp=4 zero=3"}));
  EXPECT_EQ(names(candidate_layouts(mlp, 1)), (std::set<std::string>{"one process"}));
  EXPECT_EQ(names(candidate_layouts(gpt_config(), 4, parallel::MeshShape{2, 2, 1})),
            (std::set<std::string>{"dp=2 pp=2", "dp=2 pp=2 zero=1", "dp=2 pp=2 zero=2"}));
  // A mesh asked for must be one training can run.
  EXPECT_THROW(candidate_layouts(mlp, 4, parallel::MeshShape{2, 1, 2}), Error) << "the MLP does not split";
  EXPECT_THROW(candidate_layouts(gpt_config(), 8, parallel::MeshShape{1, 8, 1}), Error) << "8 stages, 4 blocks";
  EXPECT_THROW(candidate_layouts(gpt_config(), 3, parallel::MeshShape{1, 1, 3}), Error) << "4 heads, 3 shards";
}

TEST(CostLayout, ComputeCommunicationAndMemoryFollowTheFormulas) {
  const train::Config config = gpt_config();
  PlanInputs in;
  in.seconds_per_sample = 1e-3;
  in.link = link_of(10e9, 50e-6);
  const LayoutCost dp = cost_layout(config, gpt_geometry(), {{4, 1, 1}, 0}, in);
  EXPECT_DOUBLE_EQ(dp.compute_s, 4e-3) << "4 of the 16 samples";
  const double grads = static_cast<double>(dp.memory.state.params_bytes);  // float32: bytes = 4 x params
  EXPECT_DOUBLE_EQ(dp.dp_s, allreduce_seconds(Algorithm::kRing, grads, 4, in.link));
  EXPECT_EQ(dp.tp_s, 0.0);
  EXPECT_DOUBLE_EQ(dp.step_s, dp.compute_s + dp.dp_s);
  EXPECT_DOUBLE_EQ(dp.samples_per_s, 16 / dp.step_s);

  const LayoutCost z3 = cost_layout(config, gpt_geometry(), {{4, 1, 1}, 3}, in);
  EXPECT_NEAR(z3.dp_s, 1.5 * dp.dp_s, 1e-12) << "stage 3 also gathers the parameters";
  EXPECT_LT(z3.memory.total_bytes(), dp.memory.total_bytes());

  const LayoutCost pp = cost_layout(config, gpt_geometry(), {{1, 4, 1}, 0}, in);
  EXPECT_DOUBLE_EQ(pp.compute_s, 16e-3 / 4 * (1 + 3.0 / 4)) << "the bubble of 4 stages over 4 micro-batches";
  EXPECT_GT(pp.pp_s, 0.0);
  const LayoutCost tp = cost_layout(config, gpt_geometry(), {{1, 1, 4}, 0}, in);
  EXPECT_DOUBLE_EQ(tp.compute_s, 4e-3);
  EXPECT_DOUBLE_EQ(tp.tp_s, 4 * 4 * allreduce_seconds(Algorithm::kRing, 16.0 * 32 * 64 * 4, 4, in.link));

  in.memory_limit_bytes = dp.memory.total_bytes() - 1;
  EXPECT_FALSE(cost_layout(config, gpt_geometry(), {{4, 1, 1}, 0}, in).fits);
  EXPECT_TRUE(cost_layout(config, gpt_geometry(), {{4, 1, 1}, 3}, in).fits);
}

TEST(BestLayout, TheFastestThatFits) {
  std::vector<LayoutCost> costs(3);
  costs[0].samples_per_s = 100;
  costs[1].samples_per_s = 300;
  costs[1].fits = false;
  costs[2].samples_per_s = 200;
  EXPECT_EQ(best_layout(costs), std::optional<size_t>(2));
  for (LayoutCost& c : costs) c.fits = false;
  EXPECT_EQ(best_layout(costs), std::nullopt);
}

TEST(ParseMemorySize, BinaryAndDecimalUnits) {
  EXPECT_EQ(parse_memory_size("16GiB"), int64_t{16} << 30);
  EXPECT_EQ(parse_memory_size("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(parse_memory_size("1.5GB"), 1'500'000'000);
  EXPECT_EQ(parse_memory_size("64KiB"), 65536);
  for (const char* bad : {"", "16", "GiB", "16 GiB", "-1GiB", "16gib", "1e30GiB"}) {
    try {
      parse_memory_size(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--memory-limit"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gradmesh::scaling
