// The "gradmesh" backend of torch.distributed: c10d's ProcessGroup over a
// gradmesh process group (shm on one host, hier or gloo across hosts).
//
// What each operation does (tensor_bridge.h says how tensors travel):
//   allreduce, reduce    float32/bfloat16 with sum, avg, min, max: the
//                        group's own all-reduce. Anything else: all-gather,
//                        then reduce here. reduce is an all-reduce whose
//                        result every rank keeps.
//   broadcast            the group's broadcast, of bytes.
//   allgather(_base)     the group's all-gather, of bytes; the list form
//                        copies out of one flat buffer.
//   reduce_scatter(_base) float32/bfloat16 with sum, avg, min, max: the
//                        group's reduce-scatter. Anything else: all-gather
//                        and reduce the own slice here.
//   gather, scatter      gather: an all-gather of which the root keeps all;
//                        scatter: the root sends each rank its part.
//   alltoall(_base)      pairwise exchanges (rank r pairs with (k - r) mod n
//                        in step k; the lower rank sends first), so it also
//                        works where a large send waits for its receiver.
//   barrier              the group's own.
//   send, recv           a message is posted at once and never waits behind
//                        the group's collectives or other messages, as in
//                        Gloo, so ranks may isend and irecv in any order.
//                        Over shm that takes a second group, Gloo's with
//                        connections made on first use (loopback TCP);
//                        gloo and hier groups post messages that way already.
// One tensor per call (CPU, any strides); a list of several is an error, as
// for every backend without several devices per process.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/pytorch/tensor_bridge.h"

namespace gradmesh::pytorch {

class Completion;

class GradmeshProcessGroup final : public c10d::ProcessGroup {
 public:
  // `group` has this rank and size; `messages` carries send and recv (may be
  // `group`); `world_ranks[r]` is group rank r's global rank.
  GradmeshProcessGroup(std::shared_ptr<comm::ProcessGroup> group, std::shared_ptr<comm::ProcessGroup> messages,
                       std::vector<int> world_ranks);

  // Joins the groups' threads, with Python's interpreter lock released if
  // this thread holds it (see set_unlocked_runner).
  ~GradmeshProcessGroup() override;

  // How to run a function without the interpreter lock held (module.cc sets
  // it): a group's thread may need the lock to drop the last reference to a
  // Python-owned tensor while this thread waits to join it.
  using UnlockedRunner = void (*)(const std::function<void()>&);
  static void set_unlocked_runner(UnlockedRunner runner);

  const std::string getBackendName() const override { return "gradmesh"; }
  // The gradmesh group underneath, and the backend it runs ("shm", ...).
  comm::ProcessGroup& group() { return *group_; }
  // True once an operation of the group or of its messages failed.
  bool broken() const;

  using Tensors = std::vector<at::Tensor>;
  using TensorLists = std::vector<std::vector<at::Tensor>>;
  c10::intrusive_ptr<c10d::Work> broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(TensorLists& outputs, Tensors& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(TensorLists& outputs, Tensors& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(Tensors& outputs, TensorLists& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(Tensors& outputs, TensorLists& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(Tensors& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(Tensors& tensors, int src, int tag) override;

 private:
  struct Exchange;  // one all-to-all's chunks
  std::shared_ptr<Completion> start(c10d::OpType type, std::vector<at::Tensor> outputs);
  // All-gathers `input`'s bytes (tracked by `done`) into a fresh buffer:
  // rank r's bytes at r * padded (padded: its byte count, rounded up to even).
  struct GatheredBytes {
    Staged all;
    int64_t padded;
  };
  GatheredBytes gather_bytes(Completion& done, const at::Tensor& input, std::chrono::milliseconds timeout);
  c10::intrusive_ptr<c10d::Work> reduce_in_place(const at::Tensor& tensor, c10d::ReduceOp::RedOpType op,
                                                 std::chrono::milliseconds timeout, c10d::OpType type);
  c10::intrusive_ptr<c10d::Work> reduce_scatter_flat(const at::Tensor& output, const at::Tensor& input,
                                                     c10d::ReduceOp::RedOpType op, std::chrono::milliseconds timeout,
                                                     c10d::OpType type, std::function<void()> also_then);
  c10::intrusive_ptr<c10d::Work> exchange(Exchange& chunks, std::chrono::milliseconds timeout, c10d::OpType type,
                                          std::vector<at::Tensor> outputs);

  std::shared_ptr<comm::ProcessGroup> group_, messages_;
  std::vector<int> world_ranks_;
  std::string failure_note_;  // appended to a subgroup's errors
};

}  // namespace gradmesh::pytorch
