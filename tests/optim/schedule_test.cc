#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>

#include "gradmesh/core/error.h"
#include "gradmesh/optim/schedule.h"

namespace gradmesh::optim {
namespace {

ScheduleOptions make(const std::string& kind) {
  ScheduleOptions o;
  o.kind = kind;
  return o;
}

TEST(Schedule, ConstantWithoutWarmup) {
  const ScheduleOptions o = make("constant");
  EXPECT_EQ(lr_at(o, 0.1f, 0), 0.1f);
  EXPECT_EQ(lr_at(o, 0.1f, 1), 0.1f);
  EXPECT_EQ(lr_at(o, 0.1f, 1'000'000), 0.1f);
}

TEST(Schedule, WarmupIsLinearAndReachesBaseOnItsLastStep) {
  for (const char* kind : {"constant", "step", "cosine"}) {
    SCOPED_TRACE(kind);
    ScheduleOptions o = make(kind);
    o.warmup_steps = 4;
    o.step_size = 100;
    o.total_steps = 1000;
    EXPECT_FLOAT_EQ(lr_at(o, 0.2f, 0), 0.05f);
    EXPECT_FLOAT_EQ(lr_at(o, 0.2f, 1), 0.10f);
    EXPECT_FLOAT_EQ(lr_at(o, 0.2f, 2), 0.15f);
    EXPECT_FLOAT_EQ(lr_at(o, 0.2f, 3), 0.20f);
    EXPECT_FLOAT_EQ(lr_at(o, 0.2f, 4), 0.20f);  // first step after warmup
  }
}

TEST(Schedule, StepDecaysAtMultiplesOfStepSize) {
  ScheduleOptions o = make("step");
  o.step_size = 10;
  o.gamma = 0.5f;
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 0), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 9), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 10), 0.5f);
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 19), 0.5f);
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 20), 0.25f);
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 35), 0.125f);

  // Decay periods count from the end of the warmup.
  o.warmup_steps = 5;
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 4), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 14), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 15), 0.5f);
}

TEST(Schedule, CosineFromBaseToMinAfterWarmup) {
  ScheduleOptions o = make("cosine");
  o.warmup_steps = 10;
  o.total_steps = 110;
  o.min_lr = 0.1f;
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 9), 1.0f);     // last warmup step
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 10), 1.0f);    // progress 0
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 60), 0.55f);   // progress 1/2: min + (base - min)/2
  // progress 1/4: 0.1 + 0.9 * 0.5 * (1 + cos(pi/4)) = 0.86819805...
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 35), 0.1f + 0.45f * (1.0f + std::sqrt(0.5f)));
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 110), 0.1f);   // progress 1
  EXPECT_FLOAT_EQ(lr_at(o, 1.0f, 5000), 0.1f);  // clamped after the end
  EXPECT_GT(lr_at(o, 1.0f, 109), 0.1f);
}

void expect_rejected(const ScheduleOptions& o, float base_lr, const std::string& key) {
  try {
    lr_at(o, base_lr, 0);
    ADD_FAILURE() << "expected an error naming " << key;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate_schedule(o, base_lr), Error);
}

TEST(Schedule, InvalidOptionsRejected) {
  expect_rejected(make("linear"), 0.1f, "schedule.kind");

  ScheduleOptions warm = make("constant");
  warm.warmup_steps = -1;
  expect_rejected(warm, 0.1f, "schedule.warmup_steps");

  ScheduleOptions step = make("step");
  expect_rejected(step, 0.1f, "schedule.step_size");  // step_size defaults to 0
  step.step_size = 10;
  step.gamma = 0;
  expect_rejected(step, 0.1f, "schedule.gamma");

  ScheduleOptions cosine = make("cosine");
  cosine.warmup_steps = 100;
  cosine.total_steps = 100;
  expect_rejected(cosine, 0.1f, "schedule.warmup_steps");  // total_steps is derived: no key to name
  expect_rejected(cosine, 0.1f, "raise train.epochs");
  cosine.total_steps = 200;
  cosine.min_lr = 0.5f;
  expect_rejected(cosine, 0.1f, "schedule.min_lr");

  expect_rejected(make("constant"), -0.1f, "optim.lr");
}

TEST(Schedule, UnusedOptionsAreNotChecked) {
  ScheduleOptions o = make("constant");
  o.step_size = -3;
  o.total_steps = -1;
  o.gamma = -1;
  EXPECT_NO_THROW(validate_schedule(o, 0.1f));
  EXPECT_EQ(lr_at(o, 0.1f, 7), 0.1f);
}

}  // namespace
}  // namespace gradmesh::optim
