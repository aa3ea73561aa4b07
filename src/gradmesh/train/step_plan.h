// How many optimizer steps a run takes, decided before anything is written,
// so a config that would train nothing fails before a run directory exists.
#pragma once

#include <cstdint>

#include "gradmesh/train/config.h"

namespace gradmesh::train {

struct StepPlan {
  int64_t steps_per_epoch = 0;  // global batches per epoch (data/sample_order.h)
  int64_t total_steps = 0;      // over all epochs, capped by train.max_steps; >= 1
};

// The plan for `train_samples` training samples (after data.limit_train).
// Throws Error(kConfig): when the run would take no step (the message gives
// the sample count, train.batch_size and data.drop_last, and what to change),
// or when epochs * steps per epoch overflows int64.
StepPlan plan_steps(const Config& config, int64_t train_samples);

}  // namespace gradmesh::train
