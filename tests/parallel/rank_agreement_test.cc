// Start-of-job agreement between ranks (threads over a real shm group), and
// the straggler detector.
#include <gtest/gtest.h>

#include "comm/collective_reference.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/core/error.h"
#include "gradmesh/nn/models.h"
#include "gradmesh/parallel/rank_agreement.h"
#include "gradmesh/parallel/step_phases.h"
#include "support/temp_dir.h"

namespace gradmesh::parallel {
namespace {

using comm::testing::join_errors;
using comm::testing::run_rank_threads;

// Runs body(rank, group) on `world` threads; returns each rank's error message.
std::vector<std::string> with_group(int world, const std::function<void(int, comm::ProcessGroup&)>& body) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  return run_rank_threads(world, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, world, comm::Millis(20'000));
    body(rank, *group);
  });
}

TEST(RankAgreement, StringsTravelExactly) {
  std::vector<std::vector<std::string>> gathered(3);
  std::vector<std::string> broadcast(3);
  const auto errors = with_group(3, [&](int rank, comm::ProcessGroup& g) {
    const std::string mine = rank == 1 ? "" : std::string("r") + std::to_string(rank) + " \xc3\xa9\n\t\x01 end";
    gathered[rank] = allgather_strings(g, mine);
    broadcast[rank] = broadcast_string(g, rank == 2 ? "from two" : "ignored", 2);
  });
  ASSERT_EQ(join_errors(errors), "");
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(gathered[r].size(), 3u);
    EXPECT_EQ(gathered[r][0], "r0 \xc3\xa9\n\t\x01 end");
    EXPECT_EQ(gathered[r][1], "");
    EXPECT_EQ(gathered[r][2], "r2 \xc3\xa9\n\t\x01 end");
    EXPECT_EQ(broadcast[r], "from two");
  }
}

TEST(RankAgreement, DifferentConfigNamesTheRanksAndTheLine) {
  const auto errors = with_group(3, [&](int rank, comm::ProcessGroup& g) {
    StartState s;
    s.config_text = "[model]\nkind = \"mlp\"\n[optim]\nlr = " + std::string(rank == 2 ? "0.1" : "0.05") + "\n";
    s.layout = "0.weight [4, 2]\n";
    check_start_agreement(g, s);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[r].find("config of rank 2 differs from rank 0's"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("[optim] 'lr = 0.05' vs 'lr = 0.1'"), std::string::npos) << errors[r];
  }
}

TEST(RankAgreement, DifferentLayoutIsAnError) {
  const auto errors = with_group(2, [&](int rank, comm::ProcessGroup& g) {
    nn::MlpSpec spec;
    spec.hidden = {rank == 0 ? 8 : 9};
    nn::Model model(nn::build_mlp(spec), 0);
    StartState s;
    s.config_text = "same";
    s.layout = parameter_layout(model);
    check_start_agreement(g, s);
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(errors[r].find("parameter layout of rank 1 differs"), std::string::npos) << errors[r];
}

TEST(RankAgreement, AFailedRankIsNamedByEveryRank) {
  const auto errors = with_group(3, [&](int rank, comm::ProcessGroup& g) {
    StartState s;
    s.config_text = "same";
    if (rank == 1) s.error = "/data/train-images: No such file or directory";
    check_start_agreement(g, s);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[r].find("rank 1 could not start"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("/data/train-images"), std::string::npos) << errors[r];
  }
}

TEST(RankAgreement, ReplicasStartFromRankZerosParameters) {
  std::vector<std::vector<float>> params(2);
  const auto errors = with_group(2, [&](int rank, comm::ProcessGroup& g) {
    nn::Model model(nn::build_mlp(nn::MlpSpec{}), static_cast<uint64_t>(rank) + 1);  // different seeds
    broadcast_parameters(g, model);
    params[rank] = model.flat_params().to_vector();
  });
  ASSERT_EQ(join_errors(errors), "");
  nn::Model expected(nn::build_mlp(nn::MlpSpec{}), 1);
  EXPECT_EQ(params[0], expected.flat_params().to_vector());
  EXPECT_EQ(params[1], params[0]);
}

PhaseTimes compute_of(double seconds) {
  PhaseTimes t;
  t[Phase::kForward] = seconds;
  t[Phase::kComm] = 5.0;  // waiting does not make a rank slow
  t.steps = 10;
  return t;
}

TEST(SlowRankDetector, FlagsOnlyAConsistentStraggler) {
  SlowRankDetector detector(1.2, 3);
  const std::vector<PhaseTimes> even{compute_of(1.0), compute_of(1.05), compute_of(0.98)};
  const std::vector<PhaseTimes> slow2{compute_of(1.0), compute_of(1.0), compute_of(1.5)};
  EXPECT_FALSE(detector.observe(even));
  EXPECT_FALSE(detector.observe(slow2));
  EXPECT_FALSE(detector.observe(slow2));
  EXPECT_FALSE(detector.observe(even));  // the streak breaks
  EXPECT_FALSE(detector.observe(slow2));
  EXPECT_FALSE(detector.observe(slow2));
  EXPECT_EQ(detector.observe(slow2), 2);
  EXPECT_FALSE(detector.observe(slow2));  // once per streak
  EXPECT_NE(detector.describe(slow2, 2).find("rank 2 is 1.50x slower"), std::string::npos) << detector.describe(slow2, 2);
  EXPECT_FALSE(SlowRankDetector(1.2, 1).observe({compute_of(1.0)}));  // one rank: nobody to compare with
}

// Per-step phase times of a rank over 10 steps, in milliseconds.
PhaseTimes phases_ms(double data, double forward, double backward, double comm, double optimizer) {
  PhaseTimes t;
  t[Phase::kData] = data * 1e-2;  // 10 steps: ms/step * 10 / 1000
  t[Phase::kForward] = forward * 1e-2;
  t[Phase::kBackward] = backward * 1e-2;
  t[Phase::kComm] = comm * 1e-2;
  t[Phase::kOptimizer] = optimizer * 1e-2;
  t.steps = 10;
  return t;
}

TEST(SlowRankDetector, NamesThePhaseThatMakesTheRankSlow) {
  const std::vector<PhaseTimes> ranks{phases_ms(0.5, 3.0, 5.0, 4.0, 1.0), phases_ms(0.5, 3.7, 7.9, 0.1, 1.0),
                                      phases_ms(0.6, 3.0, 5.0, 4.2, 1.0)};
  EXPECT_EQ(dominant_slow_phase(ranks, 1), Phase::kBackward);
  const std::string text = SlowRankDetector(1.2, 3).describe(ranks, 1);
  EXPECT_NE(text.find("rank 1 is 1.36x slower than the median rank (compute 13.1 ms/step vs 9.6 ms)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("; the excess is in backward (+2.9 ms/step) and forward (+0.7)"), std::string::npos) << text;
}

TEST(SlowRankDetector, CommunicationIsNeverTheCause) {
  // Rank 0 waits the longest, but its data loading is what is slow.
  const std::vector<PhaseTimes> ranks{phases_ms(6.0, 3.0, 5.0, 9.0, 1.0), phases_ms(0.5, 3.0, 5.0, 2.0, 1.0)};
  EXPECT_EQ(dominant_slow_phase(ranks, 0), Phase::kData);
  const std::string text = SlowRankDetector(1.2, 3).describe(ranks, 0);
  EXPECT_NE(text.find("the excess is in data (+2.8 ms/step)"), std::string::npos) << text;
  EXPECT_EQ(text.find(" and "), std::string::npos) << text;  // no second phase
  // A rank exceeding the median in no phase has no dominant phase.
  EXPECT_EQ(dominant_slow_phase(ranks, 1), std::nullopt);
  EXPECT_EQ(dominant_slow_phase(ranks, 2), std::nullopt);
}

TEST(StepPhases, GatherCarriesEveryRanksSamples) {
  std::vector<std::vector<PhaseTimes>> gathered(3);
  const std::vector<std::string> errors = with_group(3, [&](int rank, comm::ProcessGroup& group) {
    PhaseTimes mine = phases_ms(1, 2, 3, 4, 5);
    mine.samples = 100 + rank;
    mine.loss_sum = 0.5 * rank;
    gathered[static_cast<size_t>(rank)] = gather_phase_times(&group, mine);
  });
  ASSERT_EQ(join_errors(errors), "");
  for (const std::vector<PhaseTimes>& view : gathered) {
    ASSERT_EQ(view.size(), 3u);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(view[static_cast<size_t>(r)].samples, 100 + r);
      EXPECT_EQ(view[static_cast<size_t>(r)].steps, 10);
      EXPECT_FLOAT_EQ(static_cast<float>(view[static_cast<size_t>(r)].loss_sum), 0.5f * static_cast<float>(r));
      EXPECT_FLOAT_EQ(static_cast<float>(view[static_cast<size_t>(r)][Phase::kBackward]), 0.03f);
    }
  }
}

}  // namespace
}  // namespace gradmesh::parallel
