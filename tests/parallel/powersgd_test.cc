// PowerSGD's maths on real shm groups whose ranks run as threads: exact on
// gradients of rank <= r, error feedback that accounts for exactly what the
// approximation missed, identical results on every rank, and a state that
// round-trips through a checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "comm/collective_reference.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/core/error.h"
#include "gradmesh/parallel/powersgd.h"
#include "support/temp_dir.h"

namespace gradmesh::parallel {
namespace {

// A [24, 20] matrix, a bias of 24 and a [2, 3] matrix too small to compress.
std::vector<nn::ParameterInfo> powersgd_params() {
  return {{"w", {24, 20}, 0, 480}, {"b", {24}, 480, 24}, {"small", {2, 3}, 504, 6}};
}

// Rank `rank`'s gradient: a rank-`matrix_rank` matrix (sums of outer products), smooth elsewhere.
std::vector<float> powersgd_grads(int rank, int step, int matrix_rank) {
  std::vector<float> g(510);
  for (int i = 0; i < 24; ++i)
    for (int j = 0; j < 20; ++j) {
      double v = 0;
      for (int k = 0; k < matrix_rank; ++k) v += std::sin(0.3 * i * (k + 1) + k) * std::cos(0.2 * j * (k + 2) + rank + step);
      g[static_cast<size_t>(i * 20 + j)] = static_cast<float>(v);
    }
  for (size_t i = 480; i < g.size(); ++i) g[i] = static_cast<float>(std::cos(0.7 * static_cast<double>(i) + rank + step));
  return g;
}

struct CompressedRun {
  std::vector<std::vector<float>> local, reduced, errors;  // per rank, last step
  std::vector<float> verdicts;
};

// `steps` reductions on `world` threads; `before_last` runs on each rank's compressor before the last step.
CompressedRun run_powersgd(int world, int steps, int matrix_rank, PowerSgdOptions options,
                           const std::function<void(PowerSgdCompressor&, int)>& before_last = {}) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  CompressedRun run;
  run.local.resize(world);
  run.reduced.resize(world);
  run.errors.resize(world);
  run.verdicts.resize(world);
  const auto errors = comm::testing::run_rank_threads(world, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, world, comm::Millis(20'000));
    PowerSgdCompressor c(powersgd_params(), options);
    for (int step = 0; step < steps; ++step) {
      if (step + 1 == steps && before_last) before_last(c, rank);
      std::vector<float> g = powersgd_grads(rank, step, matrix_rank);
      run.local[rank] = g;
      run.verdicts[rank] = c.reduce(g.data(), rank == 1 && step + 1 == steps ? 1.0f : 0.0f, *group, std::nullopt);
      run.reduced[rank] = g;
    }
    for (auto& [name, t] : c.state())
      if (name == "error.w") run.errors[rank] = t.to_vector();
  });
  EXPECT_EQ(comm::testing::join_errors(errors), "");
  return run;
}

TEST(PowerSgd, ChoosesTheMatricesWhereFactorsSaveBytes) {
  PowerSgdCompressor c(powersgd_params(), {});
  EXPECT_EQ(c.compressed_matrices(), 1);  // "w"; the bias and [2, 3] go exactly
  // P [24, 4] + exact (24 + 6) + verdict, then Q [20, 4].
  EXPECT_EQ(c.wire_floats(), 96 + 30 + 1 + 80);
  EXPECT_THROW(PowerSgdCompressor(powersgd_params(), PowerSgdOptions{0, 0, 2.0}), Error);
}

TEST(PowerSgd, OrthonormalizeColumnsGivesAnOrthonormalBasisOfTheSameSpan) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6, 7, 8, 10, 1, 0, 1};  // [4, 3]
  const std::vector<float> before = a;
  orthonormalize_columns(a.data(), 4, 3);
  for (int j = 0; j < 3; ++j)
    for (int k = 0; k < 3; ++k) {
      double dot = 0;
      for (int i = 0; i < 4; ++i) dot += a[i * 3 + j] * a[i * 3 + k];
      EXPECT_NEAR(dot, j == k ? 1.0 : 0.0, 1e-5) << j << "," << k;
    }
  // The first column keeps its direction.
  const double n0 = std::sqrt(1 + 16 + 49 + 1);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(a[i * 3], before[i * 3] / n0, 1e-6);
  std::vector<float> zero(8, 0.0f);
  orthonormalize_columns(zero.data(), 4, 2);
  for (float v : zero) EXPECT_EQ(v, 0.0f);
}

TEST(PowerSgd, OrthonormalizeColumnsZeroesDependentColumns) {
  // Columns 1 and 2 are multiples of column 0: only column 0 survives, unit length.
  std::vector<float> a = {1, 2, -3, 2, 4, -6, 3, 6, -9, 4, 8, -12};  // [4, 3]
  orthonormalize_columns(a.data(), 4, 3);
  double n0 = 0;
  for (int i = 0; i < 4; ++i) {
    n0 += a[i * 3] * a[i * 3];
    EXPECT_EQ(a[i * 3 + 1], 0.0f);
    EXPECT_EQ(a[i * 3 + 2], 0.0f);
  }
  EXPECT_NEAR(n0, 1.0, 1e-6);
}

TEST(PowerSgd, SumOfLowRankGradientsIsExactAndTheSameOnEveryRank) {
  // Each rank's matrix has rank 1 and the sum of two has rank <= 2 <= r: one power iteration recovers it.
  const CompressedRun run = run_powersgd(2, 1, 1, {});
  for (size_t i = 0; i < run.local[0].size(); ++i) {
    const double sum = static_cast<double>(run.local[0][i]) + run.local[1][i];
    ASSERT_NEAR(run.reduced[0][i], sum, 1e-4) << "element " << i;
    ASSERT_EQ(run.reduced[0][i], run.reduced[1][i]) << "element " << i;
  }
  EXPECT_EQ(run.verdicts[0], 1.0f);  // rank 1 flagged its loss
}

TEST(PowerSgd, ErrorsAddUpToWhatTheApproximationMissed) {
  // Rank-8 matrices compressed to rank 2: the approximation misses something,
  // and the ranks' errors together are exactly that (on the first step).
  PowerSgdOptions options;
  options.rank = 2;
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const CompressedRun run = run_powersgd(world, 1, 8, options);
    double missed = 0;
    for (size_t i = 0; i < 480; ++i) {
      double sum = 0, error_sum = 0;
      for (int r = 0; r < world; ++r) {
        sum += run.local[r][i];
        error_sum += run.errors[r][i];
        ASSERT_EQ(run.reduced[r][i], run.reduced[0][i]);
      }
      missed += std::abs(sum - run.reduced[0][i]);
      ASSERT_NEAR(error_sum, sum - run.reduced[0][i], 1e-4) << "element " << i;
    }
    EXPECT_GT(missed, 1.0) << "a rank-2 approximation of a rank-8 sum cannot be exact";
    // The exact part is a plain sum, the verdict included (rank 1 sent 1).
    for (size_t i = 480; i < 510; ++i) {
      double sum = 0;
      for (int r = 0; r < world; ++r) sum += run.local[r][i];
      ASSERT_NEAR(run.reduced[0][i], sum, 1e-5);
    }
    EXPECT_EQ(run.verdicts[0], 1.0f);
  }
}

TEST(PowerSgd, ErrorFeedbackRecoversTheMissedPartOverSteps) {
  // The same rank-8 gradient every step: with error feedback, the average of
  // the approximations converges to the true sum (without it, it would not).
  PowerSgdOptions options;
  options.rank = 1;
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  std::vector<double> gap(2);
  const auto errors = comm::testing::run_rank_threads(2, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, 2, comm::Millis(20'000));
    PowerSgdCompressor c(powersgd_params(), options);
    const std::vector<float> g0 = powersgd_grads(rank, 0, 8), g1 = powersgd_grads(1 - rank, 0, 8);
    std::vector<double> total(480, 0.0);
    constexpr int kSteps = 200;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<float> g = g0;
      c.reduce(g.data(), 0, *group, std::nullopt);
      for (size_t i = 0; i < 480; ++i) total[i] += g[i];
    }
    double worst = 0;
    for (size_t i = 0; i < 480; ++i) worst = std::max(worst, std::abs(total[i] / kSteps - (g0[i] + g1[i])));
    gap[static_cast<size_t>(rank)] = worst;
  });
  ASSERT_EQ(comm::testing::join_errors(errors), "");
  double scale = 0;
  for (float v : powersgd_grads(0, 0, 8)) scale = std::max(scale, static_cast<double>(std::abs(v)));
  EXPECT_LT(gap[0], 0.05 * scale) << "time-averaged approximation far from the true sum";
}

TEST(PowerSgd, AGradientThatIsNotFiniteStopsTheStepOnEveryRank) {
  // Every loss finite (verdict 0), but rank 1's weight gradient overflowed.
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  std::vector<float> verdicts(2, 0.0f);
  const auto errors = comm::testing::run_rank_threads(2, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, 2, comm::Millis(20'000));
    PowerSgdCompressor c(powersgd_params(), {});
    std::vector<float> g = powersgd_grads(rank, 0, 8);
    if (rank == 1) g[7] = std::numeric_limits<float>::infinity();
    verdicts[static_cast<size_t>(rank)] = c.reduce(g.data(), 0.0f, *group, std::nullopt);
  });
  ASSERT_EQ(comm::testing::join_errors(errors), "");
  EXPECT_TRUE(std::isnan(verdicts[0]));
  EXPECT_TRUE(std::isnan(verdicts[1]));
}

TEST(PowerSgd, StateRoundTripContinuesIdentically) {
  // Run 3 steps; separately run 2, save, restore into a fresh compressor, run the third.
  const CompressedRun straight = run_powersgd(2, 3, 8, {});
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  std::vector<std::vector<float>> resumed(2);
  const auto errors = comm::testing::run_rank_threads(2, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, 2, comm::Millis(20'000));
    std::vector<std::pair<std::string, Tensor>> saved;
    {
      PowerSgdCompressor c(powersgd_params(), {});
      for (int step = 0; step < 2; ++step) {
        std::vector<float> g = powersgd_grads(rank, step, 8);
        c.reduce(g.data(), 0, *group, std::nullopt);
      }
      for (auto& [name, t] : c.state()) saved.emplace_back(name, t.clone());
    }
    PowerSgdCompressor fresh(powersgd_params(), {});
    fresh.load_state(saved);
    std::vector<float> g = powersgd_grads(rank, 2, 8);
    fresh.reduce(g.data(), rank == 1 ? 1.0f : 0.0f, *group, std::nullopt);
    resumed[static_cast<size_t>(rank)] = g;
  });
  ASSERT_EQ(comm::testing::join_errors(errors), "");
  EXPECT_EQ(resumed[0], straight.reduced[0]);
  EXPECT_EQ(resumed[1], straight.reduced[1]);
}

TEST(PowerSgd, LoadStateNamesAMissingOrMisshapedTensor) {
  PowerSgdCompressor c(powersgd_params(), {});
  std::vector<std::pair<std::string, Tensor>> state;
  for (auto& [name, t] : c.state()) state.emplace_back(name, t.clone());
  auto without_q = state;
  without_q.pop_back();
  try {
    c.load_state(without_q);
    FAIL() << "a missing tensor was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat);
    EXPECT_NE(std::string(e.what()).find("q.w"), std::string::npos) << e.what();
  }
  auto misshaped = state;
  misshaped[0].second = Tensor::zeros({3});
  try {
    c.load_state(misshaped);
    FAIL() << "a mis-shaped tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("error.w"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[24, 20]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradmesh::parallel
