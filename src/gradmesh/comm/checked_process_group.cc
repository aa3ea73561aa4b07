#include "gradmesh/comm/checked_process_group.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>

#include "gradmesh/core/error.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::comm {
namespace {

enum CallKind : int64_t { kAllreduce = 1, kBroadcast, kAllgather, kReduceScatter, kBarrier, kSend, kRecv, kNewGroup };

// A fingerprint travels as float32 (every backend moves F32): each 64-bit
// field is split into four 16-bit parts, which float32 holds exactly, so no
// backend can alter it (raw bit patterns could be NaNs).
constexpr int kFields = 8;
constexpr int64_t kFingerprintFloats = kFields * 4;

std::vector<int64_t> fields_of(const CheckedProcessGroup::Call& call) {
  return {call.seq, call.kind, call.dtype, call.count, call.root, call.reduce_op, call.tag, call.extra};
}

void encode(const CheckedProcessGroup::Call& call, float* out) {
  const std::vector<int64_t> fields = fields_of(call);
  for (int f = 0; f < kFields; ++f) {
    const auto bits = static_cast<uint64_t>(fields[f]);
    for (int part = 0; part < 4; ++part) out[f * 4 + part] = static_cast<float>((bits >> (16 * part)) & 0xffffu);
  }
}

CheckedProcessGroup::Call decode(const float* in) {
  int64_t fields[kFields];
  for (int f = 0; f < kFields; ++f) {
    uint64_t bits = 0;
    for (int part = 0; part < 4; ++part) bits |= static_cast<uint64_t>(in[f * 4 + part]) << (16 * part);
    fields[f] = static_cast<int64_t>(bits);
  }
  CheckedProcessGroup::Call call;
  call.seq = fields[0], call.kind = fields[1], call.dtype = fields[2], call.count = fields[3];
  call.root = fields[4], call.reduce_op = fields[5], call.tag = fields[6], call.extra = fields[7];
  return call;
}

// The fingerprint carries the dtype as an integer; one outside the enum reads "dtype 300".
std::string fingerprint_dtype(int64_t dtype) {
  if (dtype < 0 || dtype > 255) return "dtype " + std::to_string(dtype);
  return dtype_label(static_cast<DType>(dtype));
}

std::string reduce_label(int64_t op) {
  if (op < 0 || op > static_cast<int64_t>(ReduceOp::kMin)) return "op " + std::to_string(op);
  return reduce_op_name(static_cast<ReduceOp>(op));
}

// "allreduce(f32 x 100, sum)": how a call reads in a mismatch message.
std::string call_text(const CheckedProcessGroup::Call& call) {
  const std::string tensor = fingerprint_dtype(call.dtype) + " x " + std::to_string(call.count);
  switch (call.kind) {
    case kAllreduce: return "allreduce(" + tensor + ", " + reduce_label(call.reduce_op) + ")";
    case kBroadcast: return "broadcast(" + tensor + ", root " + std::to_string(call.root) + ")";
    case kAllgather: return "allgather(" + tensor + ")";
    case kReduceScatter: return "reduce_scatter(" + tensor + ", " + reduce_label(call.reduce_op) + ")";
    case kBarrier: return "barrier()";
    case kSend: return "send(" + tensor + " to rank " + std::to_string(call.root) + ", tag " + std::to_string(call.tag) + ")";
    case kRecv: return "recv(" + tensor + " from rank " + std::to_string(call.root) + ", tag " + std::to_string(call.tag) + ")";
    case kNewGroup: {
      char id[24];
      std::snprintf(id, sizeof id, "%08llx", static_cast<unsigned long long>(call.extra) & 0xffffffffULL);
      return "new_group(" + std::to_string(call.count) + " ranks, id " + id + ")";
    }
    default: return "an unknown operation (kind " + std::to_string(call.kind) + ")";
  }
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// Ranks grouped by identical call, in order of first appearance.
std::string mismatch_message(const std::vector<CheckedProcessGroup::Call>& calls, int64_t seq) {
  std::vector<std::pair<CheckedProcessGroup::Call, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(calls.size()); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == calls[r]; });
    if (it == groups.end()) groups.push_back({calls[r], {r}});
    else it->second.push_back(r);
  }
  std::string text = "collective mismatch at #" + std::to_string(seq) + ": ";
  for (size_t g = 0; g < groups.size(); ++g) {
    text += (g ? ", " : "") + ranks_text(groups[g].second) + " called " + call_text(groups[g].first);
    if (groups[g].first.seq != seq) text += " as #" + std::to_string(groups[g].first.seq);
  }
  return text;
}

}  // namespace

CheckedProcessGroup::CheckedProcessGroup(std::shared_ptr<ProcessGroup> inner) : inner_(std::move(inner)) {
  if (!inner_) throw_error(ErrorKind::kUsage, "checked group", "no process group to wrap");
  queue_ = std::make_unique<OpQueue>(inner_->backend() + " group (checked)");
}

CheckedProcessGroup::~CheckedProcessGroup() {
  stopping_.store(true, std::memory_order_release);
  queue_.reset();
}

bool CheckedProcessGroup::broken() const {
  std::lock_guard<std::mutex> lock(broken_mutex_);
  return !broken_reason_.empty() || queue_->broken() || inner_->broken();
}

std::shared_ptr<Work> CheckedProcessGroup::enqueue(const std::string& description, std::function<void()> body) {
  {
    std::lock_guard<std::mutex> lock(broken_mutex_);
    if (!broken_reason_.empty()) {
      auto work = std::make_shared<Work>(description);
      work->finish(std::make_exception_ptr(Error(ErrorKind::kComm, "checked group is broken: " + broken_reason_)));
      return work;
    }
  }
  // Recorded before the Work fails, so a caller woken by the failure already sees a broken group.
  return queue_->enqueue(description, [this, description, body = std::move(body)] {
    try {
      body();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(broken_mutex_);
      if (broken_reason_.empty()) broken_reason_ = description + " failed: " + e.what();
      throw;
    }
  });
}

void CheckedProcessGroup::wait_inner(const std::shared_ptr<Work>& work) {
  // The inner operation fails by its own deadline; poll so the destructor can cancel.
  while (!work->wait(Millis(100)))
    if (stopping_.load(std::memory_order_acquire))
      throw_error(ErrorKind::kComm, work->description(), "cancelled: the checked group is being destroyed");
}

void CheckedProcessGroup::exchange_and_compare(const Call& call, std::optional<Millis> timeout) {
  const int size = inner_->size();
  Tensor mine = Tensor::empty({kFingerprintFloats});
  Tensor all = Tensor::empty({kFingerprintFloats * size});
  encode(call, mine.data());
  CollectiveOptions options;
  options.timeout = timeout;
  wait_inner(inner_->allgather(mine, all, options));
  std::vector<Call> calls;
  for (int r = 0; r < size; ++r) calls.push_back(decode(all.data() + r * kFingerprintFloats));
  for (const Call& other : calls)
    if (!(other == call)) throw Error(ErrorKind::kComm, mismatch_message(calls, call.seq));
}

std::shared_ptr<Work> CheckedProcessGroup::checked(const Call& call, std::optional<Millis> timeout, InnerOp op) {
  // Called with issue_mutex_ held, so queue order is numbering order.
  return enqueue(call_text(call) + " #" + std::to_string(call.seq),
                         [this, call, timeout, op = std::move(op)] {
                           exchange_and_compare(call, timeout);
                           wait_inner(op());
                         });
}

CheckedProcessGroup::Call CheckedProcessGroup::collective(int64_t kind, const Tensor* tensor) {
  Call call;
  call.seq = ++collectives_;
  call.kind = kind;
  if (tensor) {
    call.dtype = static_cast<int64_t>(tensor->dtype());
    call.count = tensor->numel();
  }
  return call;
}

std::shared_ptr<Work> CheckedProcessGroup::allreduce(Tensor& tensor, const AllreduceOptions& options) {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  Call call = collective(kAllreduce, &tensor);
  call.reduce_op = static_cast<int64_t>(options.op);
  return checked(call, options.timeout, [this, tensor, options]() mutable { return inner_->allreduce(tensor, options); });
}

std::shared_ptr<Work> CheckedProcessGroup::broadcast(Tensor& tensor, const BroadcastOptions& options) {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  Call call = collective(kBroadcast, &tensor);
  call.root = options.root;
  return checked(call, options.timeout, [this, tensor, options]() mutable { return inner_->broadcast(tensor, options); });
}

std::shared_ptr<Work> CheckedProcessGroup::allgather(const Tensor& in, Tensor& out, const CollectiveOptions& options) {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  const Call call = collective(kAllgather, &in);
  return checked(call, options.timeout,
                 [this, in, out, options]() mutable { return inner_->allgather(in, out, options); });
}

std::shared_ptr<Work> CheckedProcessGroup::reduce_scatter(const Tensor& in, Tensor& out, const AllreduceOptions& options) {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  Call call = collective(kReduceScatter, &out);
  call.reduce_op = static_cast<int64_t>(options.op);
  return checked(call, options.timeout,
                 [this, in, out, options]() mutable { return inner_->reduce_scatter(in, out, options); });
}

std::shared_ptr<Work> CheckedProcessGroup::barrier(const CollectiveOptions& options) {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  const Call call = collective(kBarrier, nullptr);
  return checked(call, options.timeout, [this, options] { return inner_->barrier(options); });
}

std::shared_ptr<Work> CheckedProcessGroup::send(const Tensor& tensor, int dst, int tag, const CollectiveOptions& options) {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  Call call;
  call.seq = ++sends_[dst];
  call.kind = kSend;
  call.dtype = static_cast<int64_t>(tensor.dtype());
  call.count = tensor.numel();
  call.root = dst;
  call.tag = tag;
  return enqueue(call_text(call), [this, call, tensor, dst, tag, options] {
    Tensor fingerprint = Tensor::empty({kFingerprintFloats});
    encode(call, fingerprint.data());
    wait_inner(inner_->send(fingerprint, dst, kFingerprintTag, options));
    wait_inner(inner_->send(tensor, dst, tag, options));
  });
}

std::shared_ptr<Work> CheckedProcessGroup::recv(Tensor& tensor, int src, int tag, const CollectiveOptions& options) {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  Call call;
  call.seq = ++recvs_[src];
  call.kind = kRecv;
  call.dtype = static_cast<int64_t>(tensor.dtype());
  call.count = tensor.numel();
  call.root = src;
  call.tag = tag;
  const int me = inner_->rank();
  return enqueue(call_text(call), [this, call, tensor, src, tag, options, me]() mutable {
    Tensor fingerprint = Tensor::empty({kFingerprintFloats});
    wait_inner(inner_->recv(fingerprint, src, kFingerprintTag, options));
    const Call sent = decode(fingerprint.data());
    if (sent.kind != kSend || sent.root != me || sent.dtype != call.dtype || sent.count != call.count ||
        sent.tag != call.tag || sent.seq != call.seq)
      throw Error(ErrorKind::kComm, "point-to-point mismatch: rank " + std::to_string(src) + " called " +
                                        call_text(sent) + " as its send #" + std::to_string(sent.seq) + " to rank " +
                                        std::to_string(me) + ", rank " + std::to_string(me) + " called " +
                                        call_text(call) + " as its recv #" + std::to_string(call.seq) +
                                        " from rank " + std::to_string(src));
    wait_inner(inner_->recv(tensor, src, tag, options));
  });
}

std::shared_ptr<ProcessGroup> CheckedProcessGroup::new_group(const std::vector<int>& ranks) {
  auto result = std::make_shared<std::shared_ptr<ProcessGroup>>();
  std::shared_ptr<Work> work;
  {
    std::lock_guard<std::mutex> lock(issue_mutex_);
    Call call = collective(kNewGroup, nullptr);
    call.count = static_cast<int64_t>(ranks.size());
    call.extra = static_cast<int64_t>(XXH3_64bits(ranks.data(), ranks.size() * sizeof(int)));
    work = enqueue(call_text(call) + " #" + std::to_string(call.seq), [this, call, ranks, result] {
      exchange_and_compare(call, std::nullopt);  // the inner group's timeout
      *result = inner_->new_group(ranks);
    });
  }
  wait_inner(work);
  return make_checked(*result);
}

std::shared_ptr<ProcessGroup> make_checked(std::shared_ptr<ProcessGroup> inner) {
  if (!inner) return nullptr;
  return std::make_shared<CheckedProcessGroup>(std::move(inner));
}

}  // namespace gradmesh::comm
