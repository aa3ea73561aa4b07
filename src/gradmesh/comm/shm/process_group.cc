#include "gradmesh/comm/shm/process_group.h"

#include "gradmesh/comm/shm/collectives.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::comm {
namespace {

std::string tensor_label(const Tensor& tensor) {
  return dtype_label(tensor.dtype()) + " x " + std::to_string(tensor.numel());
}

bool overlap(const Tensor& a, const Tensor& b) {
  const auto* a0 = static_cast<const std::byte*>(a.raw());
  const auto* b0 = static_cast<const std::byte*>(b.raw());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// Clears a flag when the queued body finishes, however it finishes.
class PendingGuard {
 public:
  explicit PendingGuard(std::atomic<int>& pending) : pending_(pending) {}
  ~PendingGuard() { pending_.fetch_sub(1, std::memory_order_acq_rel); }
  PendingGuard(const PendingGuard&) = delete;
  PendingGuard& operator=(const PendingGuard&) = delete;

 private:
  std::atomic<int>& pending_;
};

}  // namespace

ShmProcessGroup::ShmProcessGroup(std::shared_ptr<Store> store, std::string key, int rank, int size, Millis timeout,
                                 std::vector<int> world_ranks)
    : store_(std::move(store)),
      key_(std::move(key)),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      world_ranks_(std::move(world_ranks)) {
  if (size < 1 || rank < 0 || rank >= size || world_ranks_.size() != static_cast<size_t>(size))
    throw_error(ErrorKind::kUsage, "shm group", "rank " + std::to_string(rank) + " is outside a group of " +
                                                    std::to_string(size) + " ranks; expected 0 <= rank < size");
  bool identity = true;
  for (int r = 0; r < size_; ++r) identity = identity && world_ranks_[r] == r;
  label_ = identity ? "shm" : "shm group [" + comma_list(world_ranks_) + "]";
  auto segment = shm::Segment::join(*store_, key_ + "/segment", rank_, size_, timeout_,
                                    label_ + " (rank " + std::to_string(world_ranks_[rank_]) + " of " +
                                        std::to_string(size_) + ")");
  collectives_ = std::make_unique<shm::Collectives>(std::move(segment), rank_, world_ranks_);
  queue_ = std::make_unique<OpQueue>(label_);
}

ShmProcessGroup::~ShmProcessGroup() {
  collectives_->shut_down();
  queue_.reset();
  // A peer still waiting for this rank would wait for nothing: let it fail
  // now. Waits that can complete still do (see wait_reached), so ranks that
  // finish their last operation and leave at different times are fine.
  collectives_->abort(ErrorKind::kComm, "its group object was destroyed");
}

const std::string& ShmProcessGroup::segment_name() const { return collectives_->segment().name(); }

bool ShmProcessGroup::broken() const {
  std::lock_guard<std::mutex> lock(broken_mutex_);
  return !broken_reason_.empty() || queue_->broken();
}

void ShmProcessGroup::run_body(const std::string& description, Millis timeout, const Body& body) {
  shm::OpContext ctx{label_ + " " + description, timeout, shm::deadline_after(timeout)};
  try {
    body(ctx);
  } catch (const std::exception& e) {
    // The segment's counters are out of step now: stop the other ranks too.
    const auto* error = dynamic_cast<const Error*>(&e);
    std::string reason = e.what();
    if (reason.rfind(ctx.what + ": ", 0) == 0) reason.erase(0, ctx.what.size() + 2);
    collectives_->abort(error ? error->kind() : ErrorKind::kInternal, reason);
    std::lock_guard<std::mutex> lock(broken_mutex_);
    if (broken_reason_.empty()) broken_reason_ = description + " failed: " + e.what();
    throw;
  }
}

std::shared_ptr<Work> ShmProcessGroup::submit(const char* op, const std::string& detail, size_t bytes,
                                              const CollectiveOptions& options, Body body) {
  const Millis timeout = effective(options.timeout);
  std::lock_guard<std::mutex> lock(submit_mutex_);
  const std::string description = std::string(op) + " #" + std::to_string(++seq_) + " (" + detail + ")";
  {
    std::lock_guard<std::mutex> broken_lock(broken_mutex_);
    if (!broken_reason_.empty()) {
      auto work = std::make_shared<Work>(description);
      work->finish(std::make_exception_ptr(Error(ErrorKind::kComm, label_ + " is broken: " + broken_reason_)));
      return work;
    }
  }
  if (!options.background && bytes <= kInlineBytes && pending_.load(std::memory_order_acquire) == 0 && !queue_->broken()) {
    auto work = std::make_shared<Work>(description);
    work->start();
    try {
      run_body(description, timeout, body);
      work->finish();
    } catch (const std::exception& e) {
      work->finish(std::current_exception());
      queue_->mark_broken(description + " failed: " + e.what());
    }
    return work;
  }
  pending_.fetch_add(1, std::memory_order_acq_rel);
  return queue_->enqueue(description, [this, description, timeout, body = std::move(body)] {
    PendingGuard guard(pending_);
    run_body(description, timeout, body);
  });
}

void ShmProcessGroup::check_tensor(const Tensor& tensor, const char* op, const char* role) const {
  if (!tensor.defined())
    throw_error(ErrorKind::kUsage, label_ + " " + op, std::string("the ") + role + " tensor is undefined");
}

void ShmProcessGroup::check_peer(int peer, const char* op) const {
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw_error(ErrorKind::kUsage, label_ + " " + op,
                "peer rank " + std::to_string(peer) + " is invalid on rank " + std::to_string(rank_) +
                    "; expected another rank in [0, " + std::to_string(size_) + ")");
}

std::shared_ptr<Work> ShmProcessGroup::allreduce(Tensor& tensor, const AllreduceOptions& options) {
  check_tensor(tensor, "allreduce", "input");
  const ReduceOp op = options.op;
  return submit("allreduce", tensor_label(tensor) + ", " + reduce_op_name(op), tensor.nbytes(),
                options, [this, tensor, op](const shm::OpContext& ctx) mutable {
                  collectives_->allreduce(tensor.raw(), tensor.numel(), tensor.dtype(), op, ctx);
                });
}

std::shared_ptr<Work> ShmProcessGroup::broadcast(Tensor& tensor, const BroadcastOptions& options) {
  check_tensor(tensor, "broadcast", "input");
  const int root = options.root;
  if (root < 0 || root >= size_)
    throw_error(ErrorKind::kUsage, label_ + " broadcast",
                "root " + std::to_string(root) + " is outside [0, " + std::to_string(size_) + ")");
  return submit("broadcast", tensor_label(tensor) + ", root " + std::to_string(root), tensor.nbytes(),
                options, [this, tensor, root](const shm::OpContext& ctx) mutable {
                  collectives_->broadcast(tensor.raw(), tensor.numel(), tensor.dtype(), root, ctx);
                });
}

std::shared_ptr<Work> ShmProcessGroup::allgather(const Tensor& in, Tensor& out, const CollectiveOptions& options) {
  check_tensor(in, "allgather", "input");
  check_tensor(out, "allgather", "output");
  if (out.dtype() != in.dtype() || out.numel() != in.numel() * size_)
    throw_error(ErrorKind::kShape, label_ + " allgather",
                "output is " + tensor_label(out) + ", expected " + dtype_label(in.dtype()) + " x " +
                    std::to_string(in.numel() * size_) + " (" + std::to_string(size_) + " ranks x " +
                    tensor_label(in) + ")");
  return submit("allgather", tensor_label(in), in.nbytes() * size_, options,
                [this, in, out](const shm::OpContext& ctx) mutable {
                  collectives_->allgather(in.raw(), out.raw(), in.numel(), in.dtype(), ctx);
                });
}

std::shared_ptr<Work> ShmProcessGroup::reduce_scatter(const Tensor& in, Tensor& out, const AllreduceOptions& options) {
  check_tensor(in, "reduce_scatter", "input");
  check_tensor(out, "reduce_scatter", "output");
  if (out.dtype() != in.dtype() || in.numel() != out.numel() * size_)
    throw_error(ErrorKind::kShape, label_ + " reduce_scatter",
                "input is " + tensor_label(in) + ", expected " + dtype_label(out.dtype()) + " x " +
                    std::to_string(out.numel() * size_) + " (" + std::to_string(size_) + " ranks x output " +
                    tensor_label(out) + ")");
  if (overlap(in, out))
    throw_error(ErrorKind::kUsage, label_ + " reduce_scatter",
                "the output overlaps the input; pass a separate output tensor");
  const ReduceOp op = options.op;
  return submit("reduce_scatter", tensor_label(out) + ", " + reduce_op_name(op), in.nbytes(),
                options, [this, in, out, op](const shm::OpContext& ctx) mutable {
                  collectives_->reduce_scatter(in.raw(), out.raw(), out.numel(), out.dtype(), op, ctx);
                });
}

std::shared_ptr<Work> ShmProcessGroup::barrier(const CollectiveOptions& options) {
  return submit("barrier", "", 0, options,
                [this](const shm::OpContext& ctx) { collectives_->barrier(ctx); });
}

std::shared_ptr<Work> ShmProcessGroup::send(const Tensor& tensor, int dst, int tag, const CollectiveOptions& options) {
  check_tensor(tensor, "send", "input");
  check_peer(dst, "send");
  return submit("send", tensor_label(tensor) + " to rank " + std::to_string(world_ranks_[dst]) + ", tag " +
                            std::to_string(tag),
                tensor.nbytes(), options, [this, tensor, dst, tag](const shm::OpContext& ctx) {
                  collectives_->send(tensor.raw(), tensor.numel(), tensor.dtype(), dst, tag, ctx);
                });
}

std::shared_ptr<Work> ShmProcessGroup::recv(Tensor& tensor, int src, int tag, const CollectiveOptions& options) {
  check_tensor(tensor, "recv", "output");
  check_peer(src, "recv");
  return submit("recv", tensor_label(tensor) + " from rank " + std::to_string(world_ranks_[src]) + ", tag " +
                            std::to_string(tag),
                tensor.nbytes(), options, [this, tensor, src, tag](const shm::OpContext& ctx) mutable {
                  collectives_->recv(tensor.raw(), tensor.numel(), tensor.dtype(), src, tag, ctx);
                });
}

std::shared_ptr<ProcessGroup> ShmProcessGroup::new_group(const std::vector<int>& ranks) {
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] < 0 || ranks[i] >= size_ || (i > 0 && ranks[i] <= ranks[i - 1]))
      throw_error(ErrorKind::kUsage, label_ + " new_group",
                  "ranks [" + comma_list(ranks) + "] must be ascending, unique and in [0, " +
                      std::to_string(size_) + ")");
  if (ranks.empty()) throw_error(ErrorKind::kUsage, label_ + " new_group", "the rank list is empty");
  // Every rank counts the call, member or not, so the n-th sub-group has the same key everywhere.
  const std::string key = key_ + "/sub" + std::to_string(++subgroups_);
  int member = -1;
  std::vector<int> world;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank_) member = static_cast<int>(i);
    world.push_back(world_ranks_[ranks[i]]);
  }
  if (member < 0) return nullptr;
  return std::make_shared<ShmProcessGroup>(store_, key, member, static_cast<int>(ranks.size()), timeout_,
                                           std::move(world));
}

std::shared_ptr<ProcessGroup> make_shm_process_group(std::shared_ptr<Store> store, int rank, int size, Millis timeout) {
  if (!store) throw_error(ErrorKind::kUsage, "shm group", "no store given for the rendezvous");
  // Each rank counts the world groups it created on this store; the n-th
  // group of every rank is the same group, so it gets its own key.
  const int64_t instance = store->add("shm/instances/rank" + std::to_string(rank), 1);
  std::vector<int> world(size > 0 ? size : 0);
  for (int r = 0; r < size; ++r) world[r] = r;
  return std::make_shared<ShmProcessGroup>(std::move(store), "shm/world" + std::to_string(instance), rank, size,
                                           timeout, std::move(world));
}

}  // namespace gradmesh::comm
