#include "gradmesh/train/step_plan.h"

#include <algorithm>
#include <string>

#include "gradmesh/core/error.h"
#include "gradmesh/data/sample_order.h"

namespace gradmesh::train {

StepPlan plan_steps(const Config& config, int64_t train_samples) {
  const TrainConfig& tc = config.train;
  const DataConfig& dc = config.data;
  StepPlan plan;
  plan.steps_per_epoch = data::batches_per_epoch(train_samples, tc.batch_size, dc.drop_last);
  if (plan.steps_per_epoch == 0) {
    const std::string samples = std::to_string(train_samples) + " training sample" + (train_samples == 1 ? "" : "s") +
                                (dc.limit_train > 0 ? " (data.limit_train = " + std::to_string(dc.limit_train) + ")" : "");
    // With drop_last = false any sample makes a step, so only an empty set gets here that way.
    throw_error(ErrorKind::kConfig, "train.batch_size",
                "the run would train 0 steps: " + samples + " do not fill one global batch of " +
                    std::to_string(tc.batch_size) + (dc.drop_last ? " and data.drop_last = true drops the short batch" : "") +
                    "; lower train.batch_size to at most " + std::to_string(std::max<int64_t>(train_samples, 1)) +
                    (dc.drop_last ? ", set data.drop_last = false," : "") + " or use more training samples");
  }
  if (__builtin_mul_overflow(plan.steps_per_epoch, tc.epochs, &plan.total_steps))
    throw_error(ErrorKind::kConfig, "train.epochs",
                std::to_string(tc.epochs) + " epochs of " + std::to_string(plan.steps_per_epoch) +
                    " steps overflow a 64-bit step count; lower train.epochs");
  if (tc.max_steps > 0) plan.total_steps = std::min(plan.total_steps, tc.max_steps);
  return plan;
}

}  // namespace gradmesh::train
