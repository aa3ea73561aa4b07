#include "gradmesh/comm/hier/process_group.h"

#include "gradmesh/comm/gloo/process_group.h"
#include "gradmesh/comm/op_queue.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/core/bf16.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::comm {
namespace {

class HierProcessGroup : public ProcessGroup {
 public:
  HierProcessGroup(std::shared_ptr<Store> store, int rank, int size, int local_rank, int local_size,
                   const ProcessGroupOptions& options)
      : rank_(rank), size_(size), local_rank_(local_rank), local_size_(local_size), host_(rank / local_size),
        timeout_(group_timeout(options)) {
    local_ = make_shm_process_group(std::make_shared<PrefixStore>(store, "hier/host" + std::to_string(host_)),
                                    local_rank, local_size, timeout_);
    if (local_rank == 0)
      leaders_ = make_gloo_process_group(std::make_shared<PrefixStore>(store, "hier/leaders"), host_,
                                         size / local_size, options);
    world_ = make_gloo_process_group(std::make_shared<PrefixStore>(store, "hier/world"), rank, size, options);
    queue_ = std::make_unique<OpQueue>("hier process group");
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "hier"; }
  bool broken() const override {
    return queue_->broken() || local_->broken() || world_->broken() || (leaders_ && leaders_->broken());
  }

  std::shared_ptr<Work> allreduce(Tensor& tensor, const AllreduceOptions& options) override {
    return queue_->enqueue(describe("allreduce", tensor), [this, tensor, options]() mutable {
      allreduce_in_stages(tensor, options);
    });
  }

  std::shared_ptr<Work> broadcast(Tensor& tensor, const BroadcastOptions& options) override {
    return queue_->enqueue(describe("broadcast", tensor), [this, tensor, options]() mutable {
      const int root_host = options.root / local_size_;
      if (host_ == root_host && options.root % local_size_ != 0) {  // bring the value to the root host's leader
        BroadcastOptions local = stage_options(options);
        local.root = options.root % local_size_;
        wait(local_->broadcast(tensor, local), options);
      }
      if (leaders_) {
        BroadcastOptions across = stage_options(options);
        across.root = root_host;
        wait(leaders_->broadcast(tensor, across), options);
      }
      fan_out(tensor, options);
    });
  }

  std::shared_ptr<Work> allgather(const Tensor& in, Tensor& out, const CollectiveOptions& options) override {
    return queue_->enqueue(describe("allgather", in), [this, in, out, options]() mutable {
      const int64_t n = in.numel();
      Tensor host_block = out.slice_flat(static_cast<int64_t>(host_) * local_size_ * n, {local_size_ * n});
      wait(local_->allgather(in, host_block, stage_options(options)), options);
      if (leaders_) {
        Tensor staged = host_block.clone();  // gloo's allgather needs distinct input and output buffers
        wait(leaders_->allgather(staged, out, stage_options(options)), options);
      }
      fan_out(out, options);
    });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& in, Tensor& out, const AllreduceOptions& options) override {
    // All-reduce, then keep this rank's slice: the same result with the
    // hierarchical all-reduce's traffic pattern.
    return queue_->enqueue(describe("reduce_scatter", in), [this, in, out, options]() mutable {
      Tensor full = in.clone();
      allreduce_in_stages(full, options);
      out.copy_from(full.slice_flat(static_cast<int64_t>(rank_) * out.numel(), out.shape()));
    });
  }

  std::shared_ptr<Work> barrier(const CollectiveOptions& options) override {
    return queue_->enqueue("hier barrier", [this, options] {
      wait(local_->barrier(stage_options(options)), options);
      if (leaders_) wait(leaders_->barrier(stage_options(options)), options);
      wait(local_->barrier(stage_options(options)), options);
    });
  }

  std::shared_ptr<Work> send(const Tensor& tensor, int dst, int tag, const CollectiveOptions& options) override {
    return world_->send(tensor, dst, tag, options);
  }
  std::shared_ptr<Work> recv(Tensor& tensor, int src, int tag, const CollectiveOptions& options) override {
    return world_->recv(tensor, src, tag, options);
  }
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override { return world_->new_group(ranks); }

 private:
  static std::string describe(const char* op, const Tensor& t) {
    return std::string("hier ") + op + " (" + (t.dtype() == DType::kF32 ? "f32" : "bf16") + " x " +
           std::to_string(t.numel()) + ")";
  }

  // Every hier operation runs on this group's own thread (so options.background
  // is always honoured), and that thread waits for each stage at once: the
  // stages run on it too, inline where the stage's backend allows, instead of
  // paying a second thread hand-off each.
  template <class Options>
  static Options stage_options(const Options& options) {
    Options stage = options;
    stage.background = false;
    return stage;
  }

  // tensor := options.op over all ranks, in place, in its own dtype at every
  // stage, so BF16 crosses hosts as 16 bits (the header says how it rounds).
  void allreduce_in_stages(Tensor& tensor, const AllreduceOptions& options) {
    AllreduceOptions stage = stage_options(options);
    const bool one_host = size_ == local_size_;
    // avg: sums, divided once by the world size at the end; on one host the
    // shm stage is the whole reduction and divides by itself.
    if (options.op == ReduceOp::kAvg && !one_host) stage.op = ReduceOp::kSum;
    wait(local_->allreduce(tensor, stage), options);
    if (leaders_) wait(leaders_->allreduce(tensor, stage), options);
    fan_out(tensor, options);
    if (options.op == ReduceOp::kAvg && !one_host) divide(tensor, static_cast<float>(size_));
  }

  void wait(const std::shared_ptr<Work>& work, const CollectiveOptions& options) {
    const Millis timeout = options.timeout.value_or(timeout_);  // empty: the group's
    if (!work->wait(timeout))
      throw_error(ErrorKind::kTimeout, work->description(),
                  "timed out after " + duration_text(timeout));
  }

  void fan_out(Tensor& tensor, const CollectiveOptions& options) {
    if (local_size_ == 1) return;
    BroadcastOptions from_leader;  // background = false: see stage_options()
    from_leader.timeout = options.timeout;
    from_leader.root = 0;
    wait(local_->broadcast(tensor, from_leader), options);
  }

  // t[i] /= divisor in float32 (BF16: widened, divided and rounded back).
  static void divide(Tensor& t, float divisor) {
    if (t.dtype() == DType::kF32) {
      for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] /= divisor;
      return;
    }
    auto* bits = static_cast<uint16_t*>(t.raw());
    for (int64_t i = 0; i < t.numel(); ++i) bits[i] = float_to_bf16(bf16_to_float(bits[i]) / divisor);
  }

  int rank_, size_, local_rank_, local_size_, host_;
  Millis timeout_;
  std::shared_ptr<ProcessGroup> local_, leaders_, world_;
  std::unique_ptr<OpQueue> queue_;  // last: joined first on destruction
};

}  // namespace

std::shared_ptr<ProcessGroup> make_hier_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      int local_rank, int local_size,
                                                      const ProcessGroupOptions& options) {
  if (local_size < 1 || size % local_size != 0 || local_rank != rank % local_size)
    throw_error(ErrorKind::kUsage, "backend hier",
                "needs the same number of ranks on every host, numbered host-major (rank " + std::to_string(rank) +
                    " of " + std::to_string(size) + " has local rank " + std::to_string(local_rank) + " of " +
                    std::to_string(local_size) + "); start the job with gradmesh launch");
  return std::make_shared<HierProcessGroup>(std::move(store), rank, size, local_rank, local_size, options);
}

}  // namespace gradmesh::comm
