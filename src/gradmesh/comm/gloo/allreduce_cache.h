// AllreduceCache: Gloo's all-reduce algorithm objects, kept across calls.
//
// A Gloo algorithm object allocates its scratch buffers (ring: 2 x bytes,
// ring-chunked: 2 x bytes, halving-doubling: 1 x bytes, zero-filled) and
// registers its transport slots when constructed. Built per call, that cost
// is paid every time; measured on 2 ranks over loopback (microseconds per
// all-reduce, object kept / built per call): ring 1 MB 1378 / 5698,
// ring-chunked 16 MB 16519 / 26495, halving-doubling 64 MB 74193 / 154483.
// So each (algorithm, count, op) keeps one object, re-pointed at the caller's
// tensor when the pointer changes (transport_access.h) — no copy of the data.
//
// Every rank must see the same sequence of run() calls: objects are created
// and evicted by that sequence alone (least recently used first once more
// than kMaxEntries are cached or their scratch passes kBudgetBytes), so slot
// numbers, which Gloo hands out in creation order, agree across ranks.
//
// Thread-safety: none; the group's communication thread owns the cache.
#pragma once

#include <cstdint>
#include <list>
#include <memory>

#include "gradmesh/comm/gloo/algorithm_choice.h"
#include "gradmesh/comm/process_group.h"

namespace gloo {
class Context;
}

namespace gradmesh::comm::gloo_backend {

class AllreduceCache {
 public:
  // Gloo's algorithms count elements and bytes in int: larger messages are split by the caller.
  static constexpr int64_t kMaxCount = (int64_t{1} << 29) - 1;
  static constexpr int kMaxEntries = 8;
  static constexpr size_t kBudgetBytes = size_t{512} << 20;

  explicit AllreduceCache(std::shared_ptr<gloo::Context> context);
  ~AllreduceCache();
  AllreduceCache(const AllreduceCache&) = delete;
  AllreduceCache& operator=(const AllreduceCache&) = delete;

  // data[count] := `op` over all ranks of their data[count], in place.
  // kAvg is not handled here (the caller sums and divides).
  // REQUIRES: 0 < count <= kMaxCount; op is kSum, kMax or kMin.
  void run(AllreduceAlgorithm algorithm, float* data, int64_t count, ReduceOp op);

  int size() const { return static_cast<int>(entries_.size()); }

  class Runner;  // one cached Gloo algorithm object (allreduce_cache.cc)

 private:
  struct Entry {
    AllreduceAlgorithm algorithm;
    int64_t count;
    ReduceOp op;
    size_t scratch_bytes;
    std::unique_ptr<Runner> runner;
  };
  void evict();

  std::shared_ptr<gloo::Context> context_;
  std::list<Entry> entries_;  // most recently used first
  size_t scratch_bytes_ = 0;
};

}  // namespace gradmesh::comm::gloo_backend
