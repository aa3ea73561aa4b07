// The `shm` backend: ranks on one host communicate through a POSIX
// shared-memory segment (segment.h) with the algorithms of collectives.h.
//
// Execution: operations run one at a time, in call order, on the group's
// communication thread (OpQueue). One exception, for latency: an operation
// of at most kInlineBytes issued while nothing is queued or running runs
// directly on the caller's thread, and its Work is already complete when the
// call returns. The thread hand-off costs ~20 us (measured on 2 busy cores),
// more than a 4 KB all-reduce over shared memory and 30% of a 1 MB one, and
// ordering is unaffected: nothing else is in flight. The price: the caller
// blocks until its peers arrive, so an operation meant to overlap with
// computation sets options.background, which always queues it.
//
// Timeouts: an operation's deadline is its options.timeout counted from when
// it starts executing; an options.timeout left empty means the group's
// timeout (the one given at construction). A timeout or a dead peer
// fails the Work with Error(kTimeout / kComm) naming the operation, its
// sequence number and the ranks that did not arrive, aborts the segment (the
// other ranks' waits fail at once, naming this rank) and breaks the group.
//
// Send/recv: per pair of ranks, sends and receives must be issued in the same
// order with the same tag, dtype and element count (a mismatch fails naming
// both). A send completes once its data is in the pair's mailbox; messages
// over two mailbox chunks (up to 256 KiB each) wait for the receiver, so two
// ranks exchanging large tensors must not both send first.
//
// Thread-safety: operations may be issued from several threads (they are
// serialised); new_group() must be called by one thread at a time.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gradmesh/comm/op_queue.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/comm/store.h"

namespace gradmesh::comm {

namespace shm {
class Collectives;
struct OpContext;
}  // namespace shm

class ShmProcessGroup final : public ProcessGroup {
 public:
  // Operations of at most this many payload bytes may run on the caller's thread (see above).
  static constexpr size_t kInlineBytes = size_t{1} << 20;

  // Collective over the `size` ranks that call it with the same store and
  // `key`; blocks until all of them attached to the segment (at most `timeout`).
  // `world_ranks[r]` names rank r in messages (identity for a world group).
  ShmProcessGroup(std::shared_ptr<Store> store, std::string key, int rank, int size, Millis timeout,
                  std::vector<int> world_ranks);
  // Cancels any operation still waiting (within ~100 ms), then detaches.
  ~ShmProcessGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "shm"; }

  std::shared_ptr<Work> allreduce(Tensor& tensor, const AllreduceOptions& options = {}) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, const BroadcastOptions& options = {}) override;
  std::shared_ptr<Work> allgather(const Tensor& in, Tensor& out, const CollectiveOptions& options = {}) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& in, Tensor& out, const AllreduceOptions& options = {}) override;
  std::shared_ptr<Work> barrier(const CollectiveOptions& options = {}) override;
  std::shared_ptr<Work> send(const Tensor& tensor, int dst, int tag, const CollectiveOptions& options = {}) override;
  std::shared_ptr<Work> recv(Tensor& tensor, int src, int tag, const CollectiveOptions& options = {}) override;
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override;
  bool broken() const override;

  // The POSIX name the segment had (unlinked once every rank attached).
  const std::string& segment_name() const;

 private:
  using Body = std::function<void(const shm::OpContext&)>;
  // Numbers the operation, then runs `body` inline or on the queue (see above).
  std::shared_ptr<Work> submit(const char* op, const std::string& detail, size_t bytes,
                               const CollectiveOptions& options, Body body);
  void run_body(const std::string& description, Millis timeout, const Body& body);
  Millis effective(std::optional<Millis> timeout) const { return timeout.value_or(timeout_); }
  void check_tensor(const Tensor& tensor, const char* op, const char* role) const;
  void check_peer(int peer, const char* op) const;

  std::shared_ptr<Store> store_;
  std::string key_;  // store key of this group; sub-groups extend it
  int rank_, size_;
  Millis timeout_;
  std::vector<int> world_ranks_;
  std::string label_;  // "shm" or "shm group [1, 3]": starts every message
  int subgroups_ = 0;  // new_group() calls so far

  std::mutex submit_mutex_;     // numbering and the inline path
  uint64_t seq_ = 0;            // operations issued so far
  std::atomic<int> pending_{0};  // operations handed to the queue and not yet finished
  mutable std::mutex broken_mutex_;
  std::string broken_reason_;  // empty while healthy

  std::unique_ptr<shm::Collectives> collectives_;
  std::unique_ptr<OpQueue> queue_;  // last: destroyed (joined) first
};

// A world group: every rank 0 .. size-1 calls it with the same store. Several
// groups may be created on one store (in the same order on every rank).
// REQUIRES: the store's key space belongs to these ranks only: groups formed
// by other ranks at the same time (one per host under `hier`) must use their
// own PrefixStore, since rank r of each group counts its groups under one key.
// `timeout` bounds the rendezvous and is every operation's default deadline.
std::shared_ptr<ProcessGroup> make_shm_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                     Millis timeout = kDefaultTimeout);

}  // namespace gradmesh::comm
