// Learning-rate schedules: the learning rate for step `step` (counted from 0).
//
// Every kind starts with an optional linear warmup,
//   lr = base_lr * (step + 1) / warmup_steps   for step < warmup_steps,
// so the first step already moves the parameters and step warmup_steps - 1
// reaches base_lr. After the warmup, with s = step - warmup_steps:
//   constant: base_lr
//   step:     base_lr * gamma^floor(s / step_size)
//   cosine:   min_lr + (base_lr - min_lr) * 0.5 * (1 + cos(pi * progress)),
//             progress = s / (total_steps - warmup_steps) clamped to [0, 1],
//             so the rate stays at min_lr after total_steps.
// Arithmetic is done in double and rounded to float once.
#pragma once

#include <cstdint>
#include <string>

namespace gradmesh::optim {

struct ScheduleOptions {
  std::string kind = "constant";  // constant | step | cosine
  int64_t warmup_steps = 0;       // >= 0
  int64_t step_size = 0;          // step: > 0
  float gamma = 0.1f;             // step: > 0
  int64_t total_steps = 0;        // cosine: > warmup_steps
  float min_lr = 0;               // cosine: in [0, base_lr]
};

// Throws Error(kConfig) naming the key (`schedule.<name>`) when an option is
// out of range for its kind. Options a kind does not use are not checked.
void validate_schedule(const ScheduleOptions& options, float base_lr);

// The learning rate for `step`. Validates like validate_schedule.
// REQUIRES: step >= 0.
float lr_at(const ScheduleOptions& options, float base_lr, int64_t step);

}  // namespace gradmesh::optim
