// The shared-memory algorithms: how each operation moves bytes through the
// segment and which counters guard each step.
//
// Every rank owns one progress counter and advances it at fixed points of
// every operation; since all ranks run the same operations in the same
// order, "every rank's progress reached P" names the same point on all of
// them. The data area is two regions used alternately per chunk (double
// buffering): chunk c may be written once every rank is done reading chunk
// c - 2, so a fast rank fills the next chunk while a slow one still copies
// out the previous.
//
// All-reduce of a chunk of n elements (region = size slots + 1 result slot):
//   1. each rank copies its chunk into its slot                 -> progress P+1
//   2. once all reach P+1, rank r reduces slice r (n/size elements) across
//      all slots, in rank order, into the result slot            -> progress P+2
//   3. once all reach P+2, each rank copies the whole result out -> progress P+3
// Per rank that moves ~n elements in, n out and n reduced, with the reduction
// spread over all ranks; ranks never read another rank's private memory. A
// rank reads its own slice straight from its tensor, so step 1 skips it.
// Chunks are pipelined: after step 2 of chunk c a rank does step 1 of chunk
// c + 1 (in the other region) before waiting for step 2 of the others, so
// the copy-in of one chunk overlaps the slowest rank's reduction of the last.
// Messages of at most kSmallAllreduceBytes take one handshake instead of two:
// every rank copies its input in, and once all have, every rank reduces the
// whole message itself (size x the reading, but latency is what counts there).
// Broadcast, all-gather and reduce-scatter are the same pattern with one
// writer (root), one slot per rank, or one reduction per destination.
// Send/recv go through a two-chunk mailbox per ordered pair (sender advances
// `sent`, receiver `acked`), so a message of up to two chunks never waits for
// its receiver.
//
// Not thread-safe: one operation at a time (the process group serialises them).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/comm/shm/segment.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm::shm {

// The operation being run: the prefix of its error messages and its deadline.
struct OpContext {
  std::string what;  // "shm allreduce #17 (f32 x 1000003, sum)"
  Millis timeout{};
  Clock::time_point deadline{};
};

class Collectives {
 public:
  static constexpr size_t kSmallAllreduceBytes = size_t{32} << 10;

  // `world_ranks[r]` is how rank r of this group is named in messages.
  Collectives(std::unique_ptr<Segment> segment, int rank, std::vector<int> world_ranks);

  void allreduce(void* data, int64_t count, DType dtype, ReduceOp op, const OpContext& ctx);
  void broadcast(void* data, int64_t count, DType dtype, int root, const OpContext& ctx);
  // out [size * count]; REQUIRES: in [count] does not overlap other ranks' parts of out.
  void allgather(const void* in, void* out, int64_t count, DType dtype, const OpContext& ctx);
  // in [size * count], out [count]; REQUIRES: they do not overlap.
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op, const OpContext& ctx);
  void barrier(const OpContext& ctx);
  void send(const void* data, int64_t count, DType dtype, int dst, int64_t tag, const OpContext& ctx);
  void recv(void* data, int64_t count, DType dtype, int src, int64_t tag, const OpContext& ctx);

  // Records why this rank's operation failed and marks the segment aborted
  // (the first rank to do so wins), waking every waiter so the other ranks
  // fail at once, with the same error kind, instead of at their deadlines.
  void abort(ErrorKind kind, const std::string& reason);
  // Makes any wait in progress throw within ~100 ms (the group is being destroyed).
  void shut_down() { shutting_down_.store(true, std::memory_order_release); }

  const Segment& segment() const { return *segment_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  class Hooks;
  void allreduce_small(void* data, int64_t count, DType dtype, ReduceOp op, size_t slot_bytes, const OpContext& ctx);
  // Waits until every rank's progress reached `target`.
  void wait_all(uint32_t target, const OpContext& ctx);
  // Waits until `counter`, advanced by rank `peer`, reached `target`.
  void wait_peer(SharedCounter& counter, int peer, uint32_t target, const OpContext& ctx);
  [[noreturn]] void throw_timeout(const std::vector<int>& missing, const OpContext& ctx);
  void advance(uint32_t steps = 1) { publish(segment_->progress(rank_), progress_ += steps); }
  // The region (0 or 1) for the next chunk, once every rank finished reading what it held.
  int claim_region(const OpContext& ctx);
  // This rank is done with the region: it is free once every rank reaches our progress.
  void release_region(int buffer) { free_after_[buffer] = progress_; }

  std::unique_ptr<Segment> segment_;
  int rank_, size_;
  std::vector<int> world_ranks_;
  std::vector<SharedCounter*> progress_counters_;  // [size]
  std::vector<int> all_ranks_;                     // 0 .. size - 1
  std::vector<bool> watchable_;                    // [size] whether its pid can be checked for liveness
  uint32_t progress_ = 0;                          // this rank's last published progress
  int next_buffer_ = 1;                            // the region claimed last
  uint32_t free_after_[2] = {0, 0};                // region b is free once all ranks reach this
  std::vector<uint64_t> sent_, received_;          // [size] mailbox chunks so far, per peer
  std::atomic<bool> shutting_down_{false};
};

}  // namespace gradmesh::comm::shm
