// GradientReducer: sums the gradients of every rank, bucket by bucket, while
// backward is still running (the data-parallel core, as PyTorch DDP's Reducer).
//
// Parameters sit in one flat buffer in registration order (nn/model.h), so a
// run of consecutive parameters is a contiguous slice of the gradient buffer:
// a bucket is such a slice and is all-reduced in place, with no copies.
// Buckets are cut in reverse registration order (bucket 0 holds the last
// layers, whose gradients are final first), the first one smaller so the
// network starts working as early as possible.
//
// During backward, Model fires "gradient i is final"; when a bucket's last
// gradient arrives, its all-reduce is queued on the process group's
// communication thread and backward goes on. Buckets are always launched in
// bucket order — a bucket that is complete before its predecessor waits for
// it — so every rank issues the same collectives in the same order.
//
// The trainer divides every loss by the global batch length, so the sum over
// ranks is the exact mean gradient of the global batch however unevenly the
// samples were split: the reducer sums and never rescales.
//
// Non-finite losses ride on bucket 0 for free. A rank whose step loss is not
// finite writes NaN into bucket 0's first element before launching it; a NaN
// survives every sum (f32 or bf16, any backend, any order), so after
// finish_step() every rank reads the same verdict from that element
// (step_finite()) without an extra byte or collective, and none of them has
// touched its weights yet. Only a failed step pays for one more collective,
// gather_step_losses(), to name the ranks. The element is also a real summed
// gradient, so a sum that overflowed there stops the step too, with every
// rank's loss finite: that step would have poisoned the weights as well.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/parallel/powersgd.h"

namespace gradmesh::parallel {

struct ReducerOptions {
  int64_t bucket_bytes = int64_t{4} << 20;
  int64_t first_bucket_bytes = int64_t{1} << 20;
  bool bf16 = false;    // send BF16 (summed in float32 by the backends), widen back after
  bool overlap = true;  // false: launch every bucket only in finish(), after backward
  std::optional<comm::Millis> timeout;  // each bucket's all-reduce; empty: the group's timeout
  // PowerSGD from step powersgd_start_step on (exact buckets before it, as
  // PyTorch's start_powerSGD_iter): the gradients travel as low-rank factors
  // after backward, in two all-reduces (powersgd.h). Empty: exact every step.
  std::optional<PowerSgdOptions> powersgd;
  int64_t powersgd_start_step = 0;
};

// A run of parameters [first_param, end_param) = flat elements [offset, offset + numel).
struct Bucket {
  int first_param = 0, end_param = 0;
  int64_t offset = 0, numel = 0;
};

// Buckets over `params` (in flat-buffer order), walking from the last
// parameter backwards: a bucket closes once it holds at least its byte budget
// (first_bytes for bucket 0, bytes after). A parameter is never split.
// REQUIRES: first_bytes >= 1, bytes >= 1 (kConfig otherwise).
std::vector<Bucket> plan_buckets(const std::vector<nn::ParameterInfo>& params, int64_t first_bytes, int64_t bytes);

// One bucket's all-reduce in the last step, for traces.
struct BucketSpan {
  int bucket = 0;
  int64_t bytes = 0;       // on the wire
  double launch_s = 0;     // when backward handed it over (now_seconds clock)
  double start_s = 0, end_s = 0;  // when the backend ran it
};

class GradientReducer {
 public:
  // REQUIRES: `model` and `group` outlive the reducer; the same model layout on every rank.
  GradientReducer(nn::Model& model, std::shared_ptr<comm::ProcessGroup> group, ReducerOptions options);

  // Starts the reduction of optimizer step `step` (which decides whether
  // PowerSGD compresses it): the returned hook goes to Model::backward on
  // the step's last micro-batch (earlier micro-batches only accumulate).
  autograd::GradReadyHook begin_step(int64_t step = 0);
  // This rank's loss of the step (summed over its micro-batches; 0 for a rank
  // with no samples). REQUIRES: after begin_step() and before the backward
  // that gets the hook, or before finish_step() when this rank runs no
  // backward (kInternal when bucket 0 is launched without it).
  void set_step_loss(double loss);
  // Launches the buckets not launched yet (all of them without overlap, or
  // when this rank ran no backward), waits for every one, and leaves the
  // summed gradients in the model. Returns the seconds spent waiting here:
  // the communication that backward did not hide. Throws the first failure
  // (Error kComm/kTimeout naming the operation and the missing ranks).
  double finish_step();
  // After finish_step(): false when some rank's step loss was not finite (or
  // the summed gradient that carries the verdict is not). The same on every
  // rank; the caller must not apply a step that is not finite.
  bool step_finite() const { return step_finite_; }
  // Collective: every rank's step loss in rank order, non-finite ones as
  // NaN or +-inf, finite ones clamped to the float range. Meant for after a
  // step that was not finite, to say whose loss it was.
  std::vector<float> gather_step_losses();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const std::vector<BucketSpan>& last_spans() const { return spans_; }
  // Null without parallel.compression = "powersgd"; its state is checkpointed.
  PowerSgdCompressor* powersgd() { return compressor_.get(); }

 private:
  void on_grad_ready(int param);
  void launch_in_order();
  void launch(size_t bucket);
  void reduce_compressed();
  bool agree_on_finite_loss_without_buckets();
  // Waits for `work` (options_.timeout, else until the group fails it); Error(kTimeout) saying `what_expired`.
  void wait_for(comm::Work& work, const std::string& what_expired) const;

  nn::Model& model_;
  std::shared_ptr<comm::ProcessGroup> group_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_param_;
  std::vector<int> missing_;          // per bucket: gradients not final yet this step
  size_t next_launch_ = 0;            // buckets [0, next_launch_) are launched
  std::vector<Tensor> wire_;          // per bucket: the tensor sent (a view, or a BF16 copy)
  std::vector<std::shared_ptr<comm::Work>> work_;
  std::vector<BucketSpan> spans_;
  double step_loss_ = 0;
  bool step_loss_set_ = false;
  bool step_finite_ = true;
  std::unique_ptr<PowerSgdCompressor> compressor_;
  bool compressing_ = false;  // this step goes through compressor_
};

// What a failed step's message says about gather_step_losses(): "on rank 1
// (nan)", "on ranks 0 (inf) and 2 (nan)"; empty when every loss is finite.
std::string non_finite_ranks(const std::vector<float>& losses);

}  // namespace gradmesh::parallel
