#include "gradmesh/pytorch/process_group.h"

#include <atomic>
#include <cstring>
#include <optional>

#include "gradmesh/pytorch/completion.h"
#include "gradmesh/pytorch/tensor_bridge.h"

namespace gradmesh::pytorch {
namespace {

using c10d::OpType;
using RedOp = c10d::ReduceOp::RedOpType;

// Tags of the messages scatter sends, far above what scripts use, so a
// script's own messages between the same pair never match them.
constexpr int kScatterTag = 0x7fff0001;
constexpr int kAllToAllTag = 0x7fff0002;

template <typename Options>
Options with_timeout(std::chrono::milliseconds timeout) {
  Options options;
  if (timeout != c10d::kUnsetTimeout) options.timeout = comm::Millis(timeout.count());
  // On the group's thread even when small: DDP issues its buckets from
  // backward, which goes on computing while they reduce; a caller that waits
  // at once pays a thread hand-off (docs/pytorch.md has both figures).
  options.background = true;
  return options;
}

std::optional<comm::ReduceOp> native_op(RedOp op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return comm::ReduceOp::kSum;
    case c10d::ReduceOp::AVG: return comm::ReduceOp::kAvg;
    case c10d::ReduceOp::MIN: return comm::ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return comm::ReduceOp::kMax;
    default: return std::nullopt;
  }
}

const at::Tensor& single(std::vector<at::Tensor>& tensors, const char* operation) {
  TORCH_CHECK(tensors.size() == 1, "gradmesh: ", operation, " takes one tensor per call (one device per process), got ",
              tensors.size());
  check_cpu_dense(tensors[0], operation);
  return tensors[0];
}

int64_t byte_count(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// Copies `bytes` bytes from `src` into `dst` (any strides), which holds exactly that many.
void copy_bytes_into(const uint8_t* src, const at::Tensor& dst) {
  if (dst.is_contiguous()) {
    std::memcpy(dst.data_ptr(), src, byte_count(dst));
    return;
  }
  at::Tensor contiguous = at::empty(dst.sizes(), dst.options());
  std::memcpy(contiguous.data_ptr(), src, byte_count(dst));
  dst.copy_(contiguous);
}

// Each rank's `bytes` bytes, from an all-gather of chunks `padded` bytes apart, as [ranks, ...] of `type`.
at::Tensor gathered_rows(const at::Tensor& flat, int ranks, int64_t padded, int64_t bytes, at::ScalarType type) {
  if (bytes == 0) return at::empty({ranks, 0}, flat.options().dtype(type));
  at::Tensor rows = flat.view({ranks, padded}).narrow(1, 0, bytes).contiguous();
  return rows.view(type);
}

// Rank r's chunk of an all-gather's bytes into targets[r].
void copy_out(const Staged& all, int64_t padded, const std::vector<at::Tensor>& targets) {
  const uint8_t* base = static_cast<const uint8_t*>(all.buffer.data_ptr());
  for (size_t r = 0; r < targets.size(); ++r) copy_bytes_into(base + r * padded, targets[r]);
}

void check_root(int64_t root, int ranks, const char* operation) {
  TORCH_CHECK(root >= 0 && root < ranks, "gradmesh: ", operation, " root ", root, " outside a group of ", ranks);
}

void check_same(const at::Tensor& a, const at::Tensor& b, const char* operation) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "gradmesh: ", operation, " mixes ", dtype_label(a.scalar_type()),
              " and ", dtype_label(b.scalar_type()));
  TORCH_CHECK(a.numel() == b.numel(), "gradmesh: ", operation, " needs equal sizes, got ", a.numel(), " and ",
              b.numel(), " elements");
}

}  // namespace

GradmeshProcessGroup::GradmeshProcessGroup(std::shared_ptr<comm::ProcessGroup> group,
                                           std::shared_ptr<comm::ProcessGroup> messages, std::vector<int> world_ranks)
    : c10d::ProcessGroup(group->rank(), group->size()), group_(std::move(group)), messages_(std::move(messages)),
      world_ranks_(std::move(world_ranks)) {
  // gradmesh's messages name a subgroup's ranks as the subgroup numbers
  // them; a script thinks in global ranks.
  bool identity = true;
  std::string map;
  for (size_t r = 0; r < world_ranks_.size(); ++r) {
    identity = identity && world_ranks_[r] == static_cast<int>(r);
    map += (r ? ", " : "") + std::to_string(r) + " = " + std::to_string(world_ranks_[r]);
  }
  if (!identity) failure_note_ = " [ranks above are this subgroup's; as global ranks: " + map + "]";
  init();
}

namespace {
std::atomic<GradmeshProcessGroup::UnlockedRunner> unlocked_runner{nullptr};
}  // namespace

bool GradmeshProcessGroup::broken() const { return group_->broken() || messages_->broken(); }

void GradmeshProcessGroup::set_unlocked_runner(UnlockedRunner runner) { unlocked_runner.store(runner); }

GradmeshProcessGroup::GatheredBytes GradmeshProcessGroup::gather_bytes(Completion& done, const at::Tensor& input,
                                                                       std::chrono::milliseconds timeout) {
  Staged mine = stage_bytes(input, true);
  const int64_t padded = byte_count(mine.buffer);
  Staged all = stage_bytes(at::empty({size_ * padded}, input.options().dtype(at::kByte)), false);
  done.track(group_->allgather(done.lend_bytes(mine), done.lend_bytes(all), with_timeout<comm::CollectiveOptions>(timeout)));
  return {all, padded};
}

std::shared_ptr<Completion> GradmeshProcessGroup::start(OpType type, std::vector<at::Tensor> outputs) {
  auto done = Completion::make(c10::make_intrusive<GradmeshWork>(rank_, type, std::move(outputs)));
  done->note_on_failure(failure_note_);
  return done;
}

GradmeshProcessGroup::~GradmeshProcessGroup() {
  auto join = [this] {
    messages_.reset();
    group_.reset();
  };
  if (UnlockedRunner runner = unlocked_runner.load())
    runner(join);
  else
    join();
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::reduce_in_place(const at::Tensor& tensor, RedOp op,
                                                                     std::chrono::milliseconds timeout, OpType type) {
  auto done = start(type, std::vector<at::Tensor>{tensor});
  const std::optional<comm::ReduceOp> native = native_op(op);
  if (native && native_dtype(tensor.scalar_type())) {
    Staged staged = stage_native(tensor, true);
    auto options = with_timeout<comm::AllreduceOptions>(timeout);
    options.op = *native;
    done->track(group_->allreduce(done->lend_native(staged), options));
    if (staged.copied) done->then([staged] { staged.copy_back(); });
    return done->seal();
  }
  // Fails here, on the caller's thread, for an op the dtype does not have.
  reduce_gathered(at::empty({1, 0}, tensor.options()), op);
  const auto [all, padded] = gather_bytes(*done, tensor, timeout);
  done->then([all, tensor, op, ranks = size_, padded] {
    at::Tensor rows = gathered_rows(all.buffer, ranks, padded, byte_count(tensor), tensor.scalar_type());
    tensor.copy_(reduce_gathered(rows, op).view(tensor.sizes()));
  });
  return done->seal();
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) {
  const at::Tensor& tensor = single(tensors, "allreduce");
  return reduce_in_place(tensor, opts.reduceOp, opts.timeout, OpType::ALLREDUCE);
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::reduce(Tensors& tensors, const c10d::ReduceOptions& opts) {
  const at::Tensor& tensor = single(tensors, "reduce");
  check_root(opts.rootRank, size_, "reduce");
  return reduce_in_place(tensor, opts.reduceOp, opts.timeout, OpType::REDUCE);
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) {
  const at::Tensor& tensor = single(tensors, "broadcast");
  check_root(opts.rootRank, size_, "broadcast");
  auto done = start(OpType::BROADCAST, tensors);
  Staged staged = stage_bytes(tensor, true);
  auto options = with_timeout<comm::BroadcastOptions>(opts.timeout);
  options.root = static_cast<int>(opts.rootRank);
  done->track(group_->broadcast(done->lend_bytes(staged), options));
  if (staged.copied) done->then([staged] { staged.copy_back(); });
  return done->seal();
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::allgather(TensorLists& outputs, Tensors& inputs,
                                                               const c10d::AllgatherOptions& opts) {
  const at::Tensor& input = single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "gradmesh: allgather takes one output list, got ", outputs.size());
  std::vector<at::Tensor> targets = outputs[0];
  TORCH_CHECK(static_cast<int>(targets.size()) == size_, "gradmesh: allgather needs ", size_, " output tensors, got ",
              targets.size());
  for (const at::Tensor& target : targets) {
    check_cpu_dense(target, "allgather");
    check_same(target, input, "allgather");
  }
  auto done = start(OpType::ALLGATHER, targets);
  const auto [all, padded] = gather_bytes(*done, input, opts.timeout);
  done->then([all, targets, padded] { copy_out(all, padded, targets); });
  return done->seal();
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::AllgatherOptions& opts) {
  check_cpu_dense(input, "_allgather_base");
  check_cpu_dense(output, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "gradmesh: _allgather_base mixes dtypes");
  TORCH_CHECK(output.numel() == input.numel() * size_, "gradmesh: _allgather_base needs an output of ",
              input.numel() * size_, " elements (", size_, " x ", input.numel(), "), got ", output.numel());
  auto done = start(OpType::_ALLGATHER_BASE, std::vector<at::Tensor>{output});
  if (byte_count(input) % 2 == 0) {  // no padding: ranks' bytes lie back to back, as in `output`
    Staged mine = stage_bytes(input, true);
    Staged all = stage_bytes(output, false);
    done->track(group_->allgather(done->lend_bytes(mine), done->lend_bytes(all),
                                  with_timeout<comm::CollectiveOptions>(opts.timeout)));
    if (all.copied) done->then([all] { all.copy_back(); });
    return done->seal();
  }
  const auto [all, padded] = gather_bytes(*done, input, opts.timeout);
  done->then([all, output, padded, ranks = size_, bytes = byte_count(input)] {
    output.copy_(gathered_rows(all.buffer, ranks, padded, bytes, output.scalar_type()).view(output.sizes()));
  });
  return done->seal();
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::gather(TensorLists& outputs, Tensors& inputs,
                                                            const c10d::GatherOptions& opts) {
  const at::Tensor& input = single(inputs, "gather");
  check_root(opts.rootRank, size_, "gather");
  std::vector<at::Tensor> targets;
  if (rank_ == opts.rootRank) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_, "gradmesh: gather's root needs ",
                size_, " output tensors");
    targets = outputs[0];
    for (const at::Tensor& target : targets) check_same(target, input, "gather");
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "gradmesh: gather takes output tensors only on its root");
  }
  auto done = start(OpType::GATHER, targets);
  const auto [all, padded] = gather_bytes(*done, input, opts.timeout);
  done->then([all, targets, padded] { copy_out(all, padded, targets); });
  return done->seal();
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::scatter(Tensors& outputs, TensorLists& inputs,
                                                             const c10d::ScatterOptions& opts) {
  const at::Tensor& output = single(outputs, "scatter");
  check_root(opts.rootRank, size_, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  auto done = start(OpType::SCATTER, outputs);
  const auto options = with_timeout<comm::CollectiveOptions>(opts.timeout);
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "gradmesh: scatter's root needs ",
                size_, " input tensors");
    for (int r = 0; r < size_; ++r) {  // every part checked before any is sent
      check_cpu_dense(inputs[0][r], "scatter");
      check_same(inputs[0][r], output, "scatter");
    }
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) {
        RawWrites raw;
        output.copy_(inputs[0][r]);
        continue;
      }
      done->track(messages_->send(done->lend_bytes(stage_bytes(inputs[0][r], true)), r, kScatterTag, options));
    }
    return done->seal();
  }
  Staged staged = stage_bytes(output, false);
  done->track(messages_->recv(done->lend_bytes(staged), root, kScatterTag, options));
  done->then([staged] { staged.copy_back(); });
  return done->seal();
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::reduce_scatter_flat(const at::Tensor& output,
                                                                         const at::Tensor& input, RedOp op,
                                                                         std::chrono::milliseconds timeout,
                                                                         OpType type, std::function<void()> also_then) {
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "gradmesh: reduce_scatter mixes ",
              dtype_label(input.scalar_type()), " and ", dtype_label(output.scalar_type()));
  TORCH_CHECK(input.numel() == output.numel() * size_, "gradmesh: reduce_scatter needs an input of ",
              output.numel() * size_, " elements (", size_, " x ", output.numel(), "), got ", input.numel());
  auto done = start(type, std::vector<at::Tensor>{output});
  const std::optional<comm::ReduceOp> native = native_op(op);
  if (native && native_dtype(input.scalar_type())) {
    Staged in = stage_native(input, true);
    // An output inside the input (reduce_scatter_tensor in place) gets a buffer of its own.
    Staged out = stage_native(output, false, output.is_alias_of(input));
    auto options = with_timeout<comm::AllreduceOptions>(timeout);
    options.op = *native;
    done->track(group_->reduce_scatter(done->lend_native(in), done->lend_native(out), options));
    done->then([out, also_then] {
      out.copy_back();
      if (also_then) also_then();
    });
    return done->seal();
  }
  reduce_gathered(at::empty({1, 0}, input.options()), op);
  const auto [all, padded] = gather_bytes(*done, input, timeout);
  done->then([all, output, op, padded, ranks = size_, rank = rank_, bytes = byte_count(input), also_then] {
    at::Tensor rows = gathered_rows(all.buffer, ranks, padded, bytes, output.scalar_type());
    at::Tensor slices = rows.narrow(1, rank * output.numel(), output.numel());
    output.copy_(reduce_gathered(slices, op).view(output.sizes()));
    if (also_then) also_then();
  });
  return done->seal();
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::reduce_scatter(Tensors& outputs, TensorLists& inputs,
                                                                    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& output = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "gradmesh: reduce_scatter needs ",
              size_, " input tensors");
  for (const at::Tensor& part : inputs[0]) {
    check_cpu_dense(part, "reduce_scatter");
    check_same(part, output, "reduce_scatter");
  }
  std::vector<at::Tensor> flat_parts;
  for (const at::Tensor& part : inputs[0]) flat_parts.push_back(part.reshape({-1}));
  return reduce_scatter_flat(output, at::cat(flat_parts), opts.reduceOp, opts.timeout, OpType::REDUCE_SCATTER, {});
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                          const c10d::ReduceScatterOptions& opts) {
  check_cpu_dense(input, "_reduce_scatter_base");
  check_cpu_dense(output, "_reduce_scatter_base");
  return reduce_scatter_flat(output, input, opts.reduceOp, opts.timeout, OpType::_REDUCE_SCATTER_BASE, {});
}

// One all-to-all: what this rank sends to and receives from each rank.
struct GradmeshProcessGroup::Exchange {
  std::vector<at::Tensor> to, from;
};

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::exchange(Exchange& chunks, std::chrono::milliseconds timeout,
                                                              OpType type, std::vector<at::Tensor> outputs) {
  auto done = start(type, std::move(outputs));
  const auto options = with_timeout<comm::CollectiveOptions>(timeout);
  // This rank's own part first: a mismatch fails here, before any message is posted.
  TORCH_CHECK(chunks.to[rank_].sizes() == chunks.from[rank_].sizes(), "gradmesh: all_to_all sends rank ", rank_,
              " (itself) ", chunks.to[rank_].sizes(), " but expects ", chunks.from[rank_].sizes(), " from it");
  {
    RawWrites raw;
    chunks.from[rank_].copy_(chunks.to[rank_]);
  }
  std::vector<Staged> received;
  for (int step = 0; step < size_; ++step) {
    const int peer = ((step - rank_) % size_ + size_) % size_;
    if (peer == rank_) continue;
    auto send = [&] {
      if (chunks.to[peer].numel() == 0) return;
      done->track(messages_->send(done->lend_bytes(stage_bytes(chunks.to[peer], true)), peer, kAllToAllTag, options));
    };
    auto recv = [&] {
      if (chunks.from[peer].numel() == 0) return;
      Staged staged = stage_bytes(chunks.from[peer], false);
      done->track(messages_->recv(done->lend_bytes(staged), peer, kAllToAllTag, options));
      received.push_back(staged);
    };
    // The lower rank of each pair sends first: no pair waits on itself.
    if (rank_ < peer) {
      send();
      recv();
    } else {
      recv();
      send();
    }
  }
  done->then([received] {
    for (const Staged& staged : received) staged.copy_back();
  });
  return done->seal();
}

namespace {

// Rows of dim 0 per rank: `splits` as given, or dim 0 divided evenly when empty.
std::vector<int64_t> row_splits(const at::Tensor& t, const std::vector<int64_t>& splits, int ranks,
                                const char* which) {
  if (splits.empty()) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    TORCH_CHECK(rows % ranks == 0, "gradmesh: alltoall_base's ", which, " has ", rows,
                " rows, which do not split evenly over ", ranks, " ranks; pass split sizes");
    return std::vector<int64_t>(ranks, rows / ranks);
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == ranks, "gradmesh: alltoall_base's ", which, " split sizes name ",
              splits.size(), " ranks, the group has ", ranks);
  int64_t total = 0;
  for (int64_t s : splits) {
    TORCH_CHECK(s >= 0, "gradmesh: alltoall_base's ", which, " split sizes include ", s);
    total += s;
  }
  TORCH_CHECK(t.dim() > 0 && total == t.size(0), "gradmesh: alltoall_base's ", which, " split sizes add up to ",
              total, ", its first dimension is ", t.dim() > 0 ? t.size(0) : 0);
  return splits;
}

std::vector<at::Tensor> split_rows(const at::Tensor& t, const std::vector<int64_t>& splits) {
  std::vector<at::Tensor> parts;
  int64_t offset = 0;
  for (int64_t s : splits) {
    parts.push_back(t.dim() == 0 ? t : t.narrow(0, offset, s));
    offset += s;
  }
  return parts;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                   std::vector<int64_t>& output_splits,
                                                                   std::vector<int64_t>& input_splits,
                                                                   const c10d::AllToAllOptions& opts) {
  check_cpu_dense(input, "alltoall_base");
  check_cpu_dense(output, "alltoall_base");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "gradmesh: alltoall_base mixes dtypes");
  Exchange chunks{split_rows(input, row_splits(input, input_splits, size_, "input")),
                  split_rows(output, row_splits(output, output_splits, size_, "output"))};
  return exchange(chunks, opts.timeout, OpType::ALLTOALL_BASE, {output});
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::alltoall(Tensors& outputs, Tensors& inputs,
                                                              const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "gradmesh: alltoall needs ", size_, " input and output tensors, got ", inputs.size(), " and ",
              outputs.size());
  for (int r = 0; r < size_; ++r) {
    check_cpu_dense(inputs[r], "alltoall");
    check_cpu_dense(outputs[r], "alltoall");
    TORCH_CHECK(inputs[r].scalar_type() == outputs[r].scalar_type(), "gradmesh: alltoall mixes dtypes");
  }
  Exchange chunks{inputs, outputs};
  return exchange(chunks, opts.timeout, OpType::ALLTOALL, outputs);
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::barrier(const c10d::BarrierOptions& opts) {
  auto done = start(OpType::BARRIER, {});
  done->track(group_->barrier(with_timeout<comm::CollectiveOptions>(opts.timeout)));
  return done->seal();
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::send(Tensors& tensors, int dst, int tag) {
  const at::Tensor& tensor = single(tensors, "send");
  TORCH_CHECK(dst >= 0 && dst < size_ && dst != rank_, "gradmesh: send to rank ", dst, " from rank ", rank_,
              " of a group of ", size_);
  auto done = start(OpType::SEND, tensors);
  done->track(messages_->send(done->lend_bytes(stage_bytes(tensor, true)), dst, tag));
  return done->seal();
}

c10::intrusive_ptr<c10d::Work> GradmeshProcessGroup::recv(Tensors& tensors, int src, int tag) {
  const at::Tensor& tensor = single(tensors, "recv");
  TORCH_CHECK(src >= 0 && src < size_ && src != rank_, "gradmesh: recv from rank ", src, " on rank ", rank_,
              " of a group of ", size_);
  auto done = start(OpType::RECV, tensors);
  Staged staged = stage_bytes(tensor, false);
  done->track(messages_->recv(done->lend_bytes(staged), src, tag));
  if (staged.copied) done->then([staged] { staged.copy_back(); });
  return done->seal();
}

}  // namespace gradmesh::pytorch
