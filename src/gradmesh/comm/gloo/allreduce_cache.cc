#include "gradmesh/comm/gloo/allreduce_cache.h"

#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>

#include "gradmesh/comm/gloo/transport_access.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm::gloo_backend {
namespace {

// Gloo's algorithms with one addition: rebind(), which points the object at
// a new buffer of the same count. Only the user-memory side is rebound:
// ptrs_[0] and the send buffers constructed over it. Receive buffers always
// point at the object's own scratch, so data a faster peer sends early for
// the next call lands there, untouched by the rebinding.
class Ring final : public gloo::AllreduceRing<float> {
 public:
  using AllreduceRing::AllreduceRing;
  void rebind(float* data) { ptrs_[0] = data; }
};

class RingChunked final : public gloo::AllreduceRingChunked<float> {
 public:
  using AllreduceRingChunked::AllreduceRingChunked;
  void rebind(float* data) {
    ptrs_[0] = data;
    for (auto& buffer : sendDataBuf_)
      if (buffer) rebind_send_buffer(*buffer, data);
  }
};

class HalvingDoubling final : public gloo::AllreduceHalvingDoubling<float> {
 public:
  using AllreduceHalvingDoubling::AllreduceHalvingDoubling;
  void rebind(float* data) {
    ptrs_[0] = data;
    for (auto& buffer : sendDataBufs_) rebind_send_buffer(*buffer, data);
    if (smallerBlockSendDataBuf_) rebind_send_buffer(*smallerBlockSendDataBuf_, data);
    for (auto& buffer : largerBlockSendDataBufs_) rebind_send_buffer(*buffer, data);
  }
};

const gloo::ReductionFunction<float>* reduction_function(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return gloo::ReductionFunction<float>::sum;
    case ReduceOp::kMax: return gloo::ReductionFunction<float>::max;
    case ReduceOp::kMin: return gloo::ReductionFunction<float>::min;
    case ReduceOp::kAvg: break;
  }
  GRADMESH_CHECK(false, "AllreduceCache handles sum, max and min; avg is a sum divided by the caller");
}

}  // namespace

class AllreduceCache::Runner {
 public:
  virtual ~Runner() = default;
  virtual void run(float* data) = 0;
};

namespace {

template <class Algorithm>
class RunnerOf final : public AllreduceCache::Runner {
 public:
  RunnerOf(const std::shared_ptr<gloo::Context>& context, float* data, int64_t count, ReduceOp op)
      : algorithm_(std::make_unique<Algorithm>(context, std::vector<float*>{data}, static_cast<int>(count),
                                               reduction_function(op))),
        bound_(data) {}
  void run(float* data) override {
    if (data != bound_) {
      algorithm_->rebind(data);
      bound_ = data;
    }
    algorithm_->run();
  }

 private:
  // Held by pointer: Gloo's algorithm destructors are noexcept(false), Runner's is not.
  std::unique_ptr<Algorithm> algorithm_;
  float* bound_;  // the buffer the object's send buffers point at
};

std::unique_ptr<AllreduceCache::Runner> make_runner(AllreduceAlgorithm algorithm,
                                                    const std::shared_ptr<gloo::Context>& context, float* data,
                                                    int64_t count, ReduceOp op) {
  switch (algorithm) {
    case AllreduceAlgorithm::kRing: return std::make_unique<RunnerOf<Ring>>(context, data, count, op);
    case AllreduceAlgorithm::kRingChunked: return std::make_unique<RunnerOf<RingChunked>>(context, data, count, op);
    case AllreduceAlgorithm::kHalvingDoubling:
      return std::make_unique<RunnerOf<HalvingDoubling>>(context, data, count, op);
  }
  GRADMESH_CHECK(false, "unknown all-reduce algorithm");
}

// The scratch an object holds (see the class comments in Gloo's headers).
size_t scratch_bytes(AllreduceAlgorithm algorithm, int64_t count) {
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  return algorithm == AllreduceAlgorithm::kHalvingDoubling ? bytes : 2 * bytes;
}

}  // namespace

AllreduceCache::AllreduceCache(std::shared_ptr<gloo::Context> context) : context_(std::move(context)) {}

// Entries (and the transport buffers they registered) go before the context.
AllreduceCache::~AllreduceCache() { entries_.clear(); }

void AllreduceCache::run(AllreduceAlgorithm algorithm, float* data, int64_t count, ReduceOp op) {
  GRADMESH_CHECK(count > 0 && count <= kMaxCount, "all-reduce count " + std::to_string(count) + " out of range");
  auto it = entries_.begin();
  while (it != entries_.end() && !(it->algorithm == algorithm && it->count == count && it->op == op)) ++it;
  if (it != entries_.end()) {
    entries_.splice(entries_.begin(), entries_, it);
  } else {
    Entry entry{algorithm, count, op, scratch_bytes(algorithm, count),
                make_runner(algorithm, context_, data, count, op)};
    scratch_bytes_ += entry.scratch_bytes;
    entries_.push_front(std::move(entry));
    evict();
  }
  entries_.front().runner->run(data);
}

void AllreduceCache::evict() {
  while (entries_.size() > 1 && (entries_.size() > static_cast<size_t>(kMaxEntries) || scratch_bytes_ > kBudgetBytes)) {
    scratch_bytes_ -= entries_.back().scratch_bytes;
    entries_.pop_back();
  }
}

}  // namespace gradmesh::comm::gloo_backend
