// ZeroParamShards: the parameter half of ZeRO stage 3 (FSDP's FULL_SHARD).
//
// Between uses, a rank keeps only its pieces of the flat parameter buffer
// (the same pieces it owns for the gradients and the optimizer state,
// zero_shard.h); the pages of every other piece are given back to the OS.
// The model runs in parameter units (nn::Module::parameter_units: a GPT's
// embeddings, each block, its head), and this class is the unit hooks
// (nn::UnitHooks) the model calls around each:
//
//   before a unit's forward or backward: all-gather the buckets holding its
//     parameters (a bucket two units share, or a tied embedding, is counted,
//     not gathered twice), and start gathering the next unit's in the
//     background so the transfer overlaps this unit's compute (forward: the
//     next unit; backward: the previous one);
//   after it: give the pages of the other ranks' pieces back, unless the
//     next unit in the same direction needs the bucket too.
//
// Gradients are ZeroReducer's business (stage 3 reduces them as stage 2
// does); the optimizer updates the owned pieces in place, and the next
// forward's gathers distribute the update, so nothing is gathered at the end
// of a step. Whoever needs the whole parameters outside the units (saving
// model.safetensors, a replica handing its state over) calls gather_all()
// and release_all() around it, on every rank: both are collective.
//
// Every rank calls the hooks in the same order (the same model runs the same
// units), so every rank issues the same collectives in the same order, also
// interleaved with the gradient reduce-scatters of the same step.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/nn/module.h"
#include "gradmesh/parallel/zero_shard.h"

namespace gradmesh::parallel {

class ZeroParamShards : public nn::UnitHooks {
 public:
  // Gives back every non-owned piece at once: the model must hold the full,
  // agreed parameters when this is constructed (after the initial broadcast
  // or a checkpoint load). REQUIRES: `model`, `group` and `layout` outlive it;
  // `layout` was built for this model and group size.
  ZeroParamShards(nn::Model& model, std::shared_ptr<comm::ProcessGroup> group, const ShardLayout& layout,
                  std::optional<comm::Millis> timeout);

  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;

  // Collective: every bucket gathered (the whole parameters present) / given back.
  void gather_all();
  void release_all();
  // Buckets whose full values are present now (for tests and memory checks).
  int resident_buckets() const;
  // Seconds the hooks waited for gathers this step; reset by take_wait_seconds().
  double take_wait_seconds();

 private:
  void use(int unit, int prefetch_unit);
  void done(int unit, int next_unit);
  void start_gather(size_t bucket);
  void finish_gather(size_t bucket);
  void release(size_t bucket);

  nn::Model& model_;
  std::shared_ptr<comm::ProcessGroup> group_;
  const ShardLayout& layout_;
  std::optional<comm::Millis> timeout_;
  int rank_ = 0;
  std::vector<std::vector<size_t>> buckets_of_unit_;
  std::vector<int> users_;                          // per bucket: units between their before and after hook
  std::vector<bool> resident_;                      // per bucket: full values present
  std::vector<std::shared_ptr<comm::Work>> pending_;  // per bucket: a gather in flight
  Tensor pieces_;                                   // this rank's piece of every bucket, the gathers' input
  std::vector<int64_t> piece_offset_;
  Tensor padded_;                                   // the last bucket's gather output (zero padded)
  double waited_ = 0;
};

}  // namespace gradmesh::parallel
