// CheckedProcessGroup: the debug mode (GRADMESH_COMM_CHECK=1 or
// ProcessGroupOptions.check) that proves every rank issues the same
// collectives in the same order.
//
// Before each collective, every rank all-gathers a fixed-size fingerprint of
// its call through the wrapped group: (sequence number, operation, dtype,
// element count, root, reduce op; new_group: the rank list's size and hash).
// If any rank differs, every rank fails the operation at once, before the
// real collective starts, with one message naming the ranks and their calls:
//   collective mismatch at #5: rank 0 called allreduce(f32 x 100, sum),
//   rank 1 called broadcast(f32 x 100, root 0)
// Without the check such a mismatch hangs until the timeout or silently
// mixes data.
//
// Point to point, only the pairing is checked, in one direction: a send first
// sends its fingerprint (dtype, count, tag, and which send to that peer it
// is) on the reserved tag kFingerprintTag, and the receiver compares it with
// its recv and fails naming both calls. The sender learns of a mismatch only
// through the broken group (or its own timeout), not from its send.
//
// Cost: one small all-gather per collective, and operations run
// synchronously on the wrapper's own thread (inner op after inner op), so a
// checked group does not overlap its operations with each other. Use it to
// debug, not to train fast.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gradmesh/comm/op_queue.h"
#include "gradmesh/comm/process_group.h"

namespace gradmesh::comm {

class CheckedProcessGroup final : public ProcessGroup {
 public:
  // Reserved for fingerprints; user sends must use other tags.
  static constexpr int kFingerprintTag = 0x7fff'fff0;

  explicit CheckedProcessGroup(std::shared_ptr<ProcessGroup> inner);
  ~CheckedProcessGroup() override;

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }

  std::shared_ptr<Work> allreduce(Tensor& tensor, const AllreduceOptions& options = {}) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, const BroadcastOptions& options = {}) override;
  std::shared_ptr<Work> allgather(const Tensor& in, Tensor& out, const CollectiveOptions& options = {}) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& in, Tensor& out, const AllreduceOptions& options = {}) override;
  std::shared_ptr<Work> barrier(const CollectiveOptions& options = {}) override;
  std::shared_ptr<Work> send(const Tensor& tensor, int dst, int tag, const CollectiveOptions& options = {}) override;
  std::shared_ptr<Work> recv(Tensor& tensor, int src, int tag, const CollectiveOptions& options = {}) override;
  // The sub-group comes back checked as well.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override;
  bool broken() const override;
  std::string allreduce_algorithm(size_t bytes) const override { return inner_->allreduce_algorithm(bytes); }

  const std::shared_ptr<ProcessGroup>& inner() const { return inner_; }

  // What one call was, as exchanged between ranks (all fields fit in 64 bits).
  struct Call {
    int64_t seq = 0;   // collectives: the group's count; send/recv: the count per peer
    int64_t kind = 0;  // CallKind
    int64_t dtype = -1, count = -1, root = -1, reduce_op = -1, tag = -1;
    int64_t extra = 0;  // new_group: hash of the rank list
    bool operator==(const Call&) const = default;
  };

 private:
  using InnerOp = std::function<std::shared_ptr<Work>()>;
  // Queues: exchange fingerprints, compare, then run `op` on the inner group.
  // `timeout` is the caller's option, passed on as given (empty: the inner group's).
  std::shared_ptr<Work> checked(const Call& call, std::optional<Millis> timeout, InnerOp op);
  // Fails at once on a broken group; a failing body breaks it.
  std::shared_ptr<Work> enqueue(const std::string& description, std::function<void()> body);
  void exchange_and_compare(const Call& call, std::optional<Millis> timeout);
  // Waits for an inner Work (which honours its own deadline); cancellable by the destructor.
  void wait_inner(const std::shared_ptr<Work>& work);
  Call collective(int64_t kind, const Tensor* tensor);

  std::shared_ptr<ProcessGroup> inner_;
  int64_t collectives_ = 0;         // collectives issued so far
  std::map<int, int64_t> sends_, recvs_;  // per peer
  std::mutex issue_mutex_;                // numbering in call order
  std::atomic<bool> stopping_{false};
  mutable std::mutex broken_mutex_;
  std::string broken_reason_;  // empty while healthy
  std::unique_ptr<OpQueue> queue_;  // last: joined first
};

// Wraps `inner` (nullptr stays nullptr).
std::shared_ptr<ProcessGroup> make_checked(std::shared_ptr<ProcessGroup> inner);

}  // namespace gradmesh::comm
