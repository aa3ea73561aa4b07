// The pipeline's plans: GPipe and 1F1B run every micro-batch forward and
// backward once per stage, 1F1B keeps at most p - s micro-batches in flight
// on stage s, both leave the textbook bubble (p - 1) / (m + p - 1) with equal
// stage times, and the stage split balances measured block costs.
#include <gtest/gtest.h>

#include "gradmesh/core/error.h"
#include "gradmesh/parallel/pipeline_schedule.h"

namespace gradmesh::parallel {
namespace {

TEST(PipelineSchedule, OneF1BIsMegatronsWarmupSteadyCooldown) {
  // 4 stages, 6 micro-batches: stage 1 warms up with 3 forwards.
  const std::vector<PipelineStep> got = stage_schedule(PipelineSchedule::k1F1B, 1, 4, 6);
  const std::vector<PipelineStep> want = {{true, 0},  {true, 1},  {true, 2},  {false, 0}, {true, 3}, {false, 1},
                                          {true, 4},  {false, 2}, {true, 5},  {false, 3}, {false, 4}, {false, 5}};
  EXPECT_EQ(got, want);
  // The last stage alternates from the start.
  const std::vector<PipelineStep> last = stage_schedule(PipelineSchedule::k1F1B, 3, 4, 3);
  EXPECT_EQ(last, (std::vector<PipelineStep>{{true, 0}, {false, 0}, {true, 1}, {false, 1}, {true, 2}, {false, 2}}));
  const std::vector<PipelineStep> gpipe = stage_schedule(PipelineSchedule::kGpipe, 0, 2, 3);
  EXPECT_EQ(gpipe, (std::vector<PipelineStep>{{true, 0}, {true, 1}, {true, 2}, {false, 2}, {false, 1}, {false, 0}}));
}

TEST(PipelineSchedule, EveryMicroBatchRunsForwardThenBackwardOnceAndOneF1BBoundsWhatIsHeld) {
  for (PipelineSchedule schedule : {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B})
    for (int p : {1, 2, 3, 4})
      for (int m : {1, 2, 4, 8, 16})
        for (int s = 0; s < p; ++s) {
          const std::vector<PipelineStep> steps = stage_schedule(schedule, s, p, m);
          std::vector<int> state(m, 0);  // 0 nothing, 1 forward done, 2 backward done
          for (const PipelineStep& step : steps) {
            ASSERT_EQ(state[step.micro_batch], step.forward ? 0 : 1) << pipeline_schedule_name(schedule);
            state[step.micro_batch] += 1;
          }
          EXPECT_EQ(state, std::vector<int>(m, 2));
          const int peak = peak_in_flight(steps);
          EXPECT_EQ(peak, schedule == PipelineSchedule::kGpipe ? m : std::min(p - s, m))
              << pipeline_schedule_name(schedule) << " p " << p << " m " << m << " s " << s;
        }
}

TEST(PipelineSchedule, EqualStagesLeaveTheTextbookBubble) {
  for (PipelineSchedule schedule : {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B})
    for (int p : {2, 4})
      for (int m : {1, 4, 8, 16}) {
        // Backward costs twice the forward, as for a transformer block.
        const std::vector<double> idle =
            simulated_bubble(schedule, m, std::vector<double>(p, 1.0), std::vector<double>(p, 2.0));
        const double textbook = static_cast<double>(p - 1) / (m + p - 1);
        for (int s = 0; s < p; ++s)
          EXPECT_NEAR(idle[s], textbook, 1e-12) << pipeline_schedule_name(schedule) << " p " << p << " m " << m;
      }
  // A slow stage makes the others wait: its own idle time shrinks, theirs grows.
  const std::vector<double> idle = simulated_bubble(PipelineSchedule::k1F1B, 8, {1, 2}, {2, 4});
  EXPECT_LT(idle[1], idle[0]);
}

TEST(PipelineStages, TheSplitBalancesTheSlowestStage) {
  // Equal blocks, no extras: an even split.
  EXPECT_EQ(balance_stages(std::vector<double>(8, 1.0), 4, 0, 0, "k"),
            (std::vector<StageBlocks>{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  // A heavy head takes blocks off the last stage.
  EXPECT_EQ(balance_stages(std::vector<double>(8, 1.0), 2, 0, 2, "k"), (std::vector<StageBlocks>{{0, 5}, {5, 8}}));
  // Uneven blocks: the largest stage cost is minimal (3 + 1 | 2 + 2 -> 4, not 3 | 1 + 2 + 2 -> 5).
  EXPECT_EQ(balance_stages({3, 1, 2, 2}, 2, 0, 0, "k"), (std::vector<StageBlocks>{{0, 2}, {2, 4}}));
  EXPECT_EQ(describe_stages({{0, 2}, {2, 3}}), "stage 0: blocks 0-1 (+ embeddings), stage 1: blocks 2 (+ head)");
  try {
    balance_stages({1, 1}, 3, 0, 0, "parallel.mesh.pp");
    ADD_FAILURE() << "3 stages of 2 blocks";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("parallel.mesh.pp: 3 pipeline stages need at least as many blocks"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_pipeline_schedule("zb", "parallel.pipeline_schedule"), Error);
  EXPECT_EQ(parse_pipeline_schedule("1f1b", "k"), PipelineSchedule::k1F1B);
}

}  // namespace
}  // namespace gradmesh::parallel
