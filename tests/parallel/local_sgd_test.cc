// Local SGD / DiLoCo's synchronisation on real shm groups whose ranks run as
// threads: parameter averaging, the Nesterov outer step, averaged inner
// optimizer state, and bit-identical parameters on every rank afterwards.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/collective_reference.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/core/error.h"
#include "gradmesh/nn/models.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/parallel/local_sgd.h"
#include "support/temp_dir.h"

namespace gradmesh::parallel {
namespace {

nn::Model local_sgd_model() {
  nn::MlpSpec spec;
  spec.in_features = 5;
  spec.hidden = {4};
  spec.classes = 3;
  return nn::Model(nn::build_mlp(spec), 3);
}

// Rank r's parameters after its "local steps": the start plus a rank- and round-dependent drift.
float drifted(float start, int rank, int round, size_t i) {
  return start + 0.01f * static_cast<float>(rank + 1) * static_cast<float>(round + 1) * std::sin(static_cast<float>(i));
}

TEST(LocalSgd, AveragingLeavesTheMeanOnEveryRank) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  constexpr int kWorld = 3;
  std::vector<std::vector<float>> start(kWorld), after(kWorld);
  const auto errors = comm::testing::run_rank_threads(kWorld, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, kWorld, comm::Millis(20'000));
    nn::Model model = local_sgd_model();
    LocalSgdOptions options;
    options.local_steps = 4;
    LocalSgd local(model, group, options);
    EXPECT_FALSE(local.due(3));
    EXPECT_TRUE(local.due(8));
    float* p = model.flat_params().data();
    start[rank] = model.flat_params().to_vector();
    for (size_t i = 0; i < start[rank].size(); ++i) p[i] = drifted(start[rank][i], rank, 0, i);
    local.synchronize(nullptr);
    after[rank] = model.flat_params().to_vector();
    EXPECT_EQ(local.last_bytes(), static_cast<int64_t>(start[rank].size() * sizeof(float)));
  });
  ASSERT_EQ(comm::testing::join_errors(errors), "");
  for (size_t i = 0; i < start[0].size(); ++i) {
    double mean = 0;
    for (int r = 0; r < kWorld; ++r) mean += drifted(start[0][i], r, 0, i);
    mean /= kWorld;
    ASSERT_NEAR(after[0][i], mean, 1e-6) << "element " << i;
    for (int r = 1; r < kWorld; ++r) ASSERT_EQ(after[r][i], after[0][i]) << "rank " << r << " element " << i;
  }
}

TEST(LocalSgd, NesterovOuterStepFollowsTheFormula) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  constexpr float kLr = 0.7f, kMu = 0.9f;
  std::vector<float> start, result;
  std::vector<std::vector<float>> momentum(2);
  const auto errors = comm::testing::run_rank_threads(2, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, 2, comm::Millis(20'000));
    nn::Model model = local_sgd_model();
    LocalSgdOptions options;
    options.local_steps = 2;
    options.outer_lr = kLr;
    options.outer_momentum = kMu;
    LocalSgd local(model, group, options);
    const std::vector<float> begin = model.flat_params().to_vector();
    if (rank == 0) start = begin;
    for (int round = 0; round < 2; ++round) {
      const std::vector<float> now = model.flat_params().to_vector();
      float* p = model.flat_params().data();
      for (size_t i = 0; i < now.size(); ++i) p[i] = drifted(now[i], rank, round, i);
      local.synchronize(nullptr);
    }
    if (rank == 0) result = model.flat_params().to_vector();
    momentum[static_cast<size_t>(rank)] = local.state().at(0).second.to_vector();
  });
  ASSERT_EQ(comm::testing::join_errors(errors), "");
  EXPECT_EQ(momentum[0], momentum[1]);
  for (size_t i = 0; i < start.size(); ++i) {
    // Two outer steps by hand, in double.
    double outer = start[i], v = 0;
    for (int round = 0; round < 2; ++round) {
      double mean = 0;
      for (int r = 0; r < 2; ++r) mean += drifted(static_cast<float>(outer), r, round, i);
      const double delta = outer - mean / 2;
      v = kMu * v + delta;
      outer -= kLr * (delta + kMu * v);
    }
    ASSERT_NEAR(result[i], outer, 1e-5) << "element " << i;
    ASSERT_NEAR(momentum[0][i], v, 1e-5) << "element " << i;
  }
}

TEST(LocalSgd, BeforeACheckpointTheInnerOptimizerStateIsAveragedToo) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  std::vector<std::vector<float>> buffers(2);
  const auto errors = comm::testing::run_rank_threads(2, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, 2, comm::Millis(20'000));
    nn::Model model = local_sgd_model();
    const int64_t n = model.num_parameters();
    auto sgd = optim::make_sgd({{0, n, 0.0f}}, {0.9f, 0.0f, false});
    std::vector<float> grads(static_cast<size_t>(n), static_cast<float>(rank + 1));
    sgd->step(model.flat_params().data(), grads.data(), 0.1f);  // momentum buffer = rank + 1
    LocalSgdOptions options;
    options.local_steps = 2;
    LocalSgd local(model, group, options);
    local.synchronize(sgd.get());
    for (auto& [name, t] : sgd->state())
      if (name != "step") buffers[static_cast<size_t>(rank)] = t.to_vector();
  });
  ASSERT_EQ(comm::testing::join_errors(errors), "");
  ASSERT_FALSE(buffers[0].empty());
  for (size_t i = 0; i < buffers[0].size(); ++i) {
    ASSERT_FLOAT_EQ(buffers[0][i], 1.5f) << "element " << i;
    ASSERT_EQ(buffers[1][i], buffers[0][i]);
  }
}

TEST(LocalSgd, RefusesOptionsOutOfRange) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  auto group = comm::make_shm_process_group(store, 0, 1, comm::Millis(20'000));
  nn::Model model = local_sgd_model();
  for (const auto& [options, key] : std::vector<std::pair<LocalSgdOptions, std::string>>{
           {{0, 1.0f, 0.0f, std::nullopt}, "parallel.local_steps"},
           {{4, 0.0f, 0.0f, std::nullopt}, "parallel.outer_lr"},
           {{4, 1.0f, 1.0f, std::nullopt}, "parallel.outer_momentum"}}) {
    try {
      LocalSgd local(model, group, options);
      ADD_FAILURE() << key << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gradmesh::parallel
