// ZeroReducer: the communication of ZeRO stages 1 and 2 (sharded data
// parallelism, as DeepSpeed ZeRO or FSDP's SHARD_GRAD_OP), with the step
// protocol of GradientReducer so the trainer drives both the same way.
//
// Every rank keeps the full parameters; the optimizer state (stage 1) and
// the reduced gradients (stage 2) exist only for the rank's shard
// (zero_shard.h). One step:
//
//   begin_step() -> hook to Model::backward; set_step_loss(loss)
//   backward: each bucket whose gradients are final is reduce-scattered on
//     the communication thread, so rank r receives the sum of piece r only
//   finish_step(): waits for the buckets; this rank's shard of
//     model.flat_grads() now holds the summed gradient; step_finite() is the
//     verdict every rank shares
//   [clip_grad_norm(max_norm): the global norm over every rank's shard]
//   optimizer.step() with shard_param_groups(): updates this rank's shard
//   gather_params(): all-gathers the shards, every rank has the full update
//
// Stage 2 also gives memory back: once a bucket's reduce-scatter is done,
// the pages of the gradient buffer that hold other ranks' pieces are
// returned to the OS (madvise MADV_DONTNEED) while backward goes on, so the
// resident gradient is this rank's shard plus the buckets in flight. They
// read back as zeros and the next backward faults them in as it writes.
// Stage 1 leaves the non-owned elements as they were: this rank's own,
// unreduced gradients, which nobody reads.
//
// The trainer divides every loss by the global batch, so the sums are the
// exact mean gradient: the reducer sums and never rescales.
//
// The non-finite verdict cannot ride on a reduced element as it does in
// GradientReducer: after a reduce-scatter each rank sees only its own piece.
// finish_step() therefore all-reduces one float per step: 1 when this rank's
// loss or any element of its reduced shard is not finite. Every rank gets
// the same count before any rank updates anything; a shard that overflowed
// stops the step on every rank, wherever the overflow is.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/parallel/gradient_reducer.h"
#include "gradmesh/parallel/zero_shard.h"

namespace gradmesh::parallel {

struct ZeroOptions {
  int stage = 1;  // 1: shard the optimizer state; 2: also the reduced gradients; 3: also the parameters
                  // (with ZeroParamShards as the model's unit hooks; gradients as in stage 2)
  int64_t bucket_bytes = int64_t{4} << 20;
  int64_t first_bucket_bytes = int64_t{1} << 20;
  bool overlap = true;  // false: launch every bucket only in finish_step(), after backward
  std::optional<comm::Millis> timeout;  // each collective; empty: the group's timeout
};

class ZeroReducer {
 public:
  // REQUIRES: `model` and `group` outlive the reducer; the same model layout
  // on every rank; options.stage 1 or 2 (kConfig otherwise). Stage 2 relies
  // on model.flat_grads() being the model's own heap storage (private
  // anonymous memory: given-back pages read as zeros), as nn::Model makes it.
  ZeroReducer(nn::Model& model, std::shared_ptr<comm::ProcessGroup> group, ZeroOptions options);

  const ShardLayout& layout() const { return layout_; }
  int stage() const { return options_.stage; }
  comm::ProcessGroup& group() const { return *group_; }  // the ranks that share the state
  // This rank's optimizer groups (shard_param_groups for this rank).
  std::vector<optim::ParamGroup> param_groups(const WeightDecayRule& weight_decay) const;
  // This rank's shard of the flat buffers, by ascending offset.
  const std::vector<FlatRange>& owned_ranges() const { return owned_; }

  // As GradientReducer: the hook goes to Model::backward on the step's last
  // micro-batch; set_step_loss before finish_step (0 for a rank without
  // samples, which zeroes its gradients and runs no backward).
  autograd::GradReadyHook begin_step();
  void set_step_loss(double loss);
  // Launches the buckets not launched yet, waits for all of them and for the
  // verdict. Afterwards owned_ranges() of model.flat_grads() hold the summed
  // gradients (stage 2: every other element reads 0). Returns the seconds
  // spent waiting here. Throws the first failure (Error kComm/kTimeout).
  double finish_step();
  // After finish_step(): false when some rank's loss, or some element of the
  // reduced gradient, is not finite. The same on every rank.
  bool step_finite() const { return step_finite_; }
  // Collective: every rank's step loss in rank order (as GradientReducer's).
  std::vector<float> gather_step_losses();

  // Sum of squares of this rank's reduced gradient shard, in double.
  double shard_grad_sq_sum() const;
  // Collective: the L2 norm of the whole summed gradient, from every rank's
  // shard_grad_sq_sum(); the same double on every rank. Plain data
  // parallelism computes the same norm over the full buffer (the two agree
  // to double rounding).
  double global_grad_norm();
  // Collective: optim::clip_grad_norm for the sharded gradient: scales this
  // rank's shard by the coefficient the global norm gives; returns that norm.
  // REQUIRES: max_norm finite and > 0 (else Error(kConfig)).
  float clip_grad_norm(float max_norm);

  // Collective: after the optimizer updated this rank's shard of
  // model.flat_params(), every rank receives every other shard, so all hold
  // the same full parameters. Returns the seconds it took.
  double gather_params();

  const std::vector<BucketSpan>& last_spans() const { return spans_; }

 private:
  void on_grad_ready(int param);
  void launch_in_order();
  void launch(size_t bucket);
  // Takes in every launched bucket whose reduce-scatter has completed: its
  // sum goes to this rank's piece of the gradient buffer, and (stage 2) the
  // rest of the bucket is given back. `wait`: block on the next one.
  void take_in_completed(bool wait);
  void take_in(size_t bucket);
  void release_others_gradients(size_t bucket);
  bool agree_on_finite_step();
  void wait_for(comm::Work& work, const std::string& what_expired) const;

  nn::Model& model_;
  std::shared_ptr<comm::ProcessGroup> group_;
  ZeroOptions options_;
  ShardLayout layout_;
  int rank_ = 0;
  std::vector<FlatRange> owned_;            // this rank's pieces, ascending
  std::vector<std::vector<size_t>> buckets_of_param_;
  std::vector<int> missing_;                // per bucket: gradients not final yet this step
  size_t next_launch_ = 0;                  // buckets [0, next_launch_) are launched
  size_t next_take_in_ = 0;                 // buckets [0, next_take_in_) are taken in
  Tensor received_;                         // [sum of pieces]: each bucket's reduce-scatter output
  std::vector<int64_t> received_offset_;    // per bucket: where its piece starts in received_
  Tensor padded_;                           // [last bucket's padded]: its staging buffer, zero tail
  std::vector<std::shared_ptr<comm::Work>> work_;
  std::vector<BucketSpan> spans_;
  double step_loss_ = 0;
  bool step_loss_set_ = false;
  bool shard_finite_ = true;
  bool step_finite_ = true;
};

}  // namespace gradmesh::parallel
