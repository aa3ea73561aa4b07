// The step plan: a run that would train nothing is a config error that says
// why, and step counts cannot overflow.
#include <gtest/gtest.h>

#include <limits>

#include "gradmesh/core/error.h"
#include "gradmesh/train/step_plan.h"

namespace gradmesh::train {
namespace {

std::string plan_error(const Config& config, int64_t samples) {
  try {
    plan_steps(config, samples);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << "no error for " << samples << " samples";
  return "";
}

TEST(StepPlan, CountsStepsPerEpochAndCapsAtMaxSteps) {
  Config c;
  c.train.batch_size = 128;
  c.train.epochs = 3;
  c.data.drop_last = true;
  EXPECT_EQ(plan_steps(c, 1000).steps_per_epoch, 7);
  EXPECT_EQ(plan_steps(c, 1000).total_steps, 21);
  c.data.drop_last = false;
  EXPECT_EQ(plan_steps(c, 1000).steps_per_epoch, 8);
  c.train.max_steps = 5;
  EXPECT_EQ(plan_steps(c, 1000).total_steps, 5);
  c.train.max_steps = 100;
  EXPECT_EQ(plan_steps(c, 1000).total_steps, 24);
}

TEST(StepPlan, ZeroStepsIsAConfigErrorThatSaysWhy) {
  Config c;
  c.train.batch_size = 128;
  c.data.drop_last = true;
  c.data.limit_train = 100;
  EXPECT_EQ(plan_error(c, 100),
            "train.batch_size: the run would train 0 steps: 100 training samples (data.limit_train = 100) do not fill "
            "one global batch of 128 and data.drop_last = true drops the short batch; lower train.batch_size to at "
            "most 100, set data.drop_last = false, or use more training samples");
  c.data.drop_last = false;
  EXPECT_EQ(plan_steps(c, 100).total_steps, 1);  // the short batch is a step
  c.data.drop_last = true;
  c.train.batch_size = 100;
  EXPECT_EQ(plan_steps(c, 100).total_steps, 1);  // exactly one full batch
}

TEST(StepPlan, EpochsTimesStepsCannotOverflow) {
  Config c;
  c.train.batch_size = 1;
  c.train.epochs = 1'000'000;
  const int64_t most = std::numeric_limits<int64_t>::max();
  const std::string message = plan_error(c, most);
  EXPECT_NE(message.find("train.epochs: 1000000 epochs of 9223372036854775807 steps overflow"), std::string::npos)
      << message;
  c.train.epochs = 1;
  EXPECT_EQ(plan_steps(c, most).total_steps, most);
  c.data.drop_last = false;
  c.train.batch_size = 2;
  EXPECT_EQ(plan_steps(c, most).steps_per_epoch, most / 2 + 1);  // rounded up without overflowing
}

}  // namespace
}  // namespace gradmesh::train
