// DataParallel, the step protocol a program that writes its own loop uses:
// ranks running as threads over a real shm group end where one process
// training on the whole batch ends (uneven slices included), and a loss
// that is not finite stops every rank with one message before any weight
// changes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "comm/collective_reference.h"
#include "gradmesh/autograd/ops.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/core/error.h"
#include "gradmesh/nn/models.h"
#include "gradmesh/parallel/data_parallel.h"
#include "parallel/trained_weights.h"
#include "support/temp_dir.h"

namespace gradmesh::parallel {
namespace {

constexpr int64_t kWrapperBatch = 7;  // uneven over 2 and 3 ranks
constexpr int kWrapperSteps = 5;

nn::Model make_model() {
  nn::MlpSpec spec;
  spec.in_features = 6;
  spec.hidden = {5};
  spec.classes = 3;
  spec.activation = nn::Activation::kTanh;  // carries a NaN input on to the loss (ReLU maps NaN to 0)
  return nn::Model(nn::build_mlp(spec), 11);
}

// Rows [lo, hi) of step `step`'s global batch.
Tensor inputs(int64_t step, int64_t lo, int64_t hi) {
  std::vector<float> v;
  for (int64_t r = lo; r < hi; ++r)
    for (int64_t c = 0; c < 6; ++c) v.push_back(std::sin(static_cast<float>(step * 31 + r * 7 + c)));
  return Tensor::from_vector({hi - lo, 6}, v);
}
std::vector<int32_t> labels(int64_t step, int64_t lo, int64_t hi) {
  std::vector<int32_t> out;
  for (int64_t r = lo; r < hi; ++r) out.push_back(static_cast<int32_t>((step + r) % 3));
  return out;
}

// Trains kWrapperSteps steps on rank `rank` of `world` (group null: one process), with `poison_step` feeding a NaN.
std::vector<float> train(std::shared_ptr<comm::ProcessGroup> group, int rank, int world, std::string* error = nullptr,
                         int64_t poison_step = -1) {
  nn::Model model = make_model();
  auto sgd = optim::make_sgd({{0, model.num_parameters(), 0.0f}}, {0.9f, 0.0f, false});
  DataParallel dp(model, *sgd, std::move(group));
  EXPECT_EQ(dp.world_size(), world);
  for (int64_t step = 0; step < kWrapperSteps; ++step) {
    const int64_t lo = kWrapperBatch * rank / world, hi = kWrapperBatch * (rank + 1) / world;
    Tensor x = inputs(step, lo, hi);
    if (step == poison_step && rank == world - 1) x.data()[0] = std::numeric_limits<float>::quiet_NaN();
    const autograd::Variable loss = autograd::cross_entropy(model.forward(autograd::Variable(x)), labels(step, lo, hi));
    try {
      dp.backward(loss, hi - lo, kWrapperBatch);
    } catch (const Error& e) {
      if (!error) throw;
      *error = e.what();
      break;
    }
    dp.step(0.1f, 1.0f);
  }
  return model.flat_params().to_vector();
}

std::vector<std::vector<float>> train_ranks(int world, std::vector<std::string>* errors = nullptr,
                                            int64_t poison_step = -1) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  std::vector<std::vector<float>> weights(static_cast<size_t>(world));
  if (errors) errors->assign(static_cast<size_t>(world), "");
  const auto failures = comm::testing::run_rank_threads(world, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, world, comm::Millis(20'000));
    weights[static_cast<size_t>(rank)] =
        train(group, rank, world, errors ? &(*errors)[static_cast<size_t>(rank)] : nullptr, poison_step);
  });
  EXPECT_EQ(comm::testing::join_errors(failures), "");
  return weights;
}

TEST(DataParallelWrapper, RanksEndWhereOneProcessEnds) {
  const std::vector<float> one = train(nullptr, 0, 1);
  EXPECT_NE(one, make_model().flat_params().to_vector()) << "the steps trained nothing";
  for (int world : {2, 3}) {
    const std::vector<std::vector<float>> ranks = train_ranks(world);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(ranks[static_cast<size_t>(r)], ranks[0]) << "rank " << r << " of " << world << " diverged";
      EXPECT_LE(gradmesh::testing::relative_difference(ranks[static_cast<size_t>(r)], one), 1e-5) << world;
    }
  }
}

TEST(DataParallelWrapper, ANonFiniteLossStopsEveryRankNamingItBeforeAnyUpdate) {
  std::vector<std::string> errors;
  const std::vector<std::vector<float>> ranks = train_ranks(3, &errors, /*poison_step=*/2);
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(errors[static_cast<size_t>(r)],
              "step 2: the loss is not finite on rank 2 (nan); lower the learning rate or clip the gradient norm");
  EXPECT_EQ(ranks[0], ranks[2]);
  // One process stops the same way, after the same two clean steps.
  std::string one_error;
  const std::vector<float> one = train(nullptr, 0, 1, &one_error, 2);
  EXPECT_EQ(one_error, "step 2: the loss is not finite; lower the learning rate or clip the gradient norm");
  EXPECT_LE(gradmesh::testing::relative_difference(ranks[0], one), 1e-5);
}

TEST(DataParallelWrapper, RowsOutsideTheGlobalBatchAreAUsageError) {
  nn::Model model = make_model();
  auto sgd = optim::make_sgd({{0, model.num_parameters(), 0.0f}}, {});
  DataParallel dp(model, *sgd, nullptr);
  const autograd::Variable loss =
      autograd::cross_entropy(model.forward(autograd::Variable(inputs(0, 0, 2))), labels(0, 0, 2));
  try {
    dp.backward(loss, 3, 2);
    FAIL() << "accepted rows > global_rows";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("rows = 3, global_rows = 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradmesh::parallel
