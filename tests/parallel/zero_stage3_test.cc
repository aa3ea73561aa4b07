// ZeRO stage 3 over real shm groups whose ranks run as threads: a GPT whose
// parameters stay sharded between uses (ZeroParamShards as the model's unit
// hooks, ZeroReducer reducing the gradients as in stage 2) ends with the
// weights of plain data parallelism, with and without recomputed blocks;
// between steps a rank holds only its own pieces.
#include <gtest/gtest.h>

#include "comm/collective_reference.h"
#include "gradmesh/autograd/ops.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/nn/gpt.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/parallel/gradient_reducer.h"
#include "gradmesh/parallel/zero_param_shards.h"
#include "gradmesh/parallel/zero_reducer.h"
#include "parallel/trained_weights.h"
#include "support/temp_dir.h"

namespace gradmesh::parallel {
namespace {

constexpr int kSteps = 3;
constexpr int64_t kStage3Batch = 6;  // windows per global batch: uneven on 4 ranks

nn::GptSpec stage3_spec(bool recompute) {
  nn::GptSpec s;
  s.vocab_size = 13;
  s.block_size = 8;
  s.n_layer = 3;
  s.n_head = 2;
  s.n_embd = 16;
  s.recompute = recompute;
  return s;
}

float decay(const nn::ParameterInfo& p) { return p.shape.size() > 1 ? 0.1f : 0.0f; }

struct RankRun {
  std::vector<float> params;            // after the last step (stage 3: gathered for the comparison)
  int resident_between_steps = -1;      // stage 3: buckets with full values after a step
  double non_owned_abs_sum = -1;        // stage 3: what the other ranks' pieces read after a step
};

RankRun train(int stage, bool recompute, const std::shared_ptr<comm::ProcessGroup>& group) {
  const int world = group->size(), rank = group->rank();
  nn::Model model(nn::build_gpt(stage3_spec(recompute)), 5);
  std::unique_ptr<GradientReducer> plain;
  std::unique_ptr<ZeroReducer> zero;
  std::unique_ptr<ZeroParamShards> shards;
  std::vector<optim::ParamGroup> groups;
  if (stage == 0) {
    ReducerOptions o;
    o.first_bucket_bytes = 512;
    o.bucket_bytes = 2048;
    plain = std::make_unique<GradientReducer>(model, group, o);
    for (const nn::ParameterInfo& p : model.parameters()) groups.push_back({p.offset, p.numel, decay(p)});
  } else {
    ZeroOptions o;
    o.stage = stage;
    o.first_bucket_bytes = 512;
    o.bucket_bytes = 2048;
    zero = std::make_unique<ZeroReducer>(model, group, o);
    groups = zero->param_groups(decay);
    if (stage == 3) shards = std::make_unique<ZeroParamShards>(model, group, zero->layout(), std::nullopt);
  }
  auto optimizer = optim::make_adamw(groups, {});
  nn::forward_context().unit_hooks = shards.get();
  RankRun run;
  const int64_t lo = kStage3Batch * rank / world, hi = kStage3Batch * (rank + 1) / world;
  for (int step = 0; step < kSteps; ++step) {
    model.zero_grad();
    autograd::GradReadyHook hook = plain ? plain->begin_step() : zero->begin_step();
    std::vector<float> ids;
    std::vector<int32_t> targets;
    for (int64_t i = lo; i < hi; ++i)
      for (int t = 0; t < 8; ++t) {
        ids.push_back(static_cast<float>((i * 5 + t * 3 + step) % 13));
        targets.push_back(static_cast<int32_t>((i * 5 + t * 3 + step + 1) % 13));
      }
    double loss = 0;
    if (hi > lo) {
      autograd::Variable out = autograd::cross_entropy(
          model.forward(autograd::Variable(Tensor::from_vector({hi - lo, 8}, ids))), targets, kStage3Batch * 8.0f);
      loss = out.value().item();
      plain ? plain->set_step_loss(loss) : zero->set_step_loss(loss);
      model.backward(out, hook);
    } else {
      model.flat_grads().zero();
      plain ? plain->set_step_loss(0) : zero->set_step_loss(0);
    }
    plain ? plain->finish_step() : zero->finish_step();
    optimizer->step(model.flat_params().data(), model.flat_grads().data(), 0.01f);
    if (zero) zero->gather_params();
  }
  nn::forward_context().unit_hooks = nullptr;
  if (shards) {
    run.resident_between_steps = shards->resident_buckets();
    double sum = 0;
    std::vector<bool> owned(static_cast<size_t>(model.num_parameters()), false);
    for (const FlatRange& r : zero->owned_ranges())
      for (int64_t i = r.begin; i < r.end; ++i) owned[static_cast<size_t>(i)] = true;
    for (int64_t i = 0; i < model.num_parameters(); ++i)
      if (!owned[static_cast<size_t>(i)]) sum += std::abs(model.flat_params().data()[i]);
    run.non_owned_abs_sum = sum;
    shards->gather_all();
  }
  run.params = model.flat_params().to_vector();
  return run;
}

std::vector<RankRun> on_threads(int world, int stage, bool recompute) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  std::vector<RankRun> runs(static_cast<size_t>(world));
  const auto errors = comm::testing::run_rank_threads(world, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, world, comm::Millis(20'000));
    runs[static_cast<size_t>(rank)] = train(stage, recompute, group);
  });
  EXPECT_EQ(comm::testing::join_errors(errors), "");
  return runs;
}

TEST(ZeroStage3, GptMatchesPlainDataParallelAndKeepsOnlyItsShardBetweenSteps) {
  for (bool recompute : {false, true}) {
    for (int world = 1; world <= 4; ++world) {
      const std::vector<RankRun> dp = on_threads(world, 0, recompute);
      const std::vector<RankRun> z3 = on_threads(world, 3, recompute);
      for (int r = 0; r < world; ++r) {
        const RankRun& run = z3[static_cast<size_t>(r)];
        // The same sums in the same rank order as plain data parallelism (shm): 1e-6 leaves room for rounding.
        EXPECT_LE(gradmesh::testing::relative_difference(run.params, dp[0].params), 1e-6)
            << "world " << world << " rank " << r << " recompute " << recompute;
        EXPECT_EQ(run.params, z3[0].params) << "ranks disagree, world " << world;
        if (world > 1) {
          EXPECT_EQ(run.resident_between_steps, 0) << "world " << world;
          EXPECT_EQ(run.non_owned_abs_sum, 0.0) << "other ranks' pieces are still held, world " << world;
        }
      }
    }
  }
}

}  // namespace
}  // namespace gradmesh::parallel
