#include "gradmesh/comm/mpi/process_group.h"

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "gradmesh/comm/arrival_report.h"
#include "gradmesh/comm/mpi/bf16_ops.h"
#include "gradmesh/comm/op_queue.h"
#include "gradmesh/comm/traffic_meter.h"
#include "gradmesh/core/bf16.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::comm {
namespace {

void check_mpi(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw_error(ErrorKind::kComm, "mpi " + what, std::string(text, static_cast<size_t>(length)));
}

// MPI_Finalize must run once, after every group is gone, before the process exits.
void finalize_at_exit() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    mpi_backend::free_bf16_ops();
    MPI_Finalize();
  }
}

void ensure_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_SERIALIZED)
      throw_error(ErrorKind::kComm, "mpi", "this MPI library cannot be called from a communication thread "
                                          "(thread level " + std::to_string(provided) + "); use another backend");
    std::atexit(finalize_at_exit);
  });
}

// The MPI datatype and operation that reduce `dtype` elements with `op`
// (kAvg: the sum; the caller divides).
MPI_Datatype mpi_type(DType dtype) { return dtype == DType::kF32 ? MPI_FLOAT : mpi_backend::bf16_datatype(); }

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  if (dtype == DType::kBF16) return mpi_backend::bf16_op(op);
  switch (op) {
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return MPI_SUM;
  }
  return MPI_SUM;
}

// t[i] /= n, in float32 (BF16: widened and rounded back).
void divide(Tensor& t, int n) {
  if (t.dtype() == DType::kF32) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] /= static_cast<float>(n);
    return;
  }
  auto* bits = static_cast<uint16_t*>(t.raw());
  for (int64_t i = 0; i < t.numel(); ++i) bits[i] = float_to_bf16(bf16_to_float(bits[i]) / static_cast<float>(n));
}

std::string describe(const std::string& op, int64_t seq, const Tensor& t, const std::string& extra = "") {
  return "mpi " + op + " #" + std::to_string(seq) + " (" + (t.dtype() == DType::kF32 ? "f32" : "bf16") + " x " +
         std::to_string(t.numel()) + (extra.empty() ? "" : ", " + extra) + ")";
}

class MpiProcessGroup : public ProcessGroup {
 public:
  MpiProcessGroup(MPI_Comm comm, Millis timeout)
      : comm_(comm), timeout_(timeout), queue_(std::make_unique<OpQueue>("mpi process group")) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // A private communicator for the timeout census (see census()), created
    // on the group's thread, ordered before every operation.
    queue_->enqueue("mpi census setup", [this] { check_mpi(MPI_Comm_dup(comm_, &census_comm_), "MPI_Comm_dup"); });
  }
  ~MpiProcessGroup() override {
    const bool healthy = !queue_->broken();
    queue_.reset();  // stop the communication thread before its communicators go away
    // After a timeout a census message may still be in flight: leave that communicator to MPI_Finalize.
    if (healthy && census_comm_ != MPI_COMM_NULL) MPI_Comm_free(&census_comm_);
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }

  // MPI reports no wire bytes: the traffic meter gets what a bandwidth-optimal
  // algorithm moves per rank, (n-1)/n of `bytes` per pass over the ring.
  uint64_t ring_share(size_t bytes) const {
    return static_cast<uint64_t>(bytes) * static_cast<uint64_t>(size_ - 1) / static_cast<uint64_t>(size_);
  }
  void meter(uint64_t sent, uint64_t received) const {
    count_traffic(TrafficBackend::kMpi, sent, received, !one_host_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  bool broken() const override { return queue_->broken(); }

  std::shared_ptr<Work> allreduce(Tensor& tensor, const AllreduceOptions& options) override {
    const std::string what = describe("allreduce", ++seq_, tensor, reduce_op_name(options.op));
    return queue_->enqueue(what, [this, tensor, options, what]() mutable {
      // Each dtype travels as itself: BF16 as 16 bits, reduced by bf16_ops.h.
      MPI_Request request;
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, tensor.raw(), static_cast<int>(tensor.numel()), mpi_type(tensor.dtype()),
                               mpi_op(options.op, tensor.dtype()), comm_, &request),
                what);
      complete(request, what, options.timeout, {tensor});
      meter(2 * ring_share(tensor.nbytes()), 2 * ring_share(tensor.nbytes()));
      if (options.op == ReduceOp::kAvg) divide(tensor, size_);
    });
  }

  std::shared_ptr<Work> broadcast(Tensor& tensor, const BroadcastOptions& options) override {
    check_root(options.root, "broadcast");
    const std::string what = describe("broadcast", ++seq_, tensor, "root " + std::to_string(options.root));
    return queue_->enqueue(what, [this, tensor, options, what]() mutable {
      MPI_Request request;
      check_mpi(MPI_Ibcast(tensor.raw(), static_cast<int>(tensor.nbytes()), MPI_BYTE, options.root, comm_, &request),
                what);
      complete(request, what, options.timeout, {tensor});
      meter(ring_share(tensor.nbytes()), ring_share(tensor.nbytes()));
    });
  }

  std::shared_ptr<Work> allgather(const Tensor& in, Tensor& out, const CollectiveOptions& options) override {
    check_sizes(in, out, size_, "allgather");
    const std::string what = describe("allgather", ++seq_, in);
    return queue_->enqueue(what, [this, in, out, options, what]() mutable {
      MPI_Request request;
      const int bytes = static_cast<int>(in.nbytes());
      check_mpi(MPI_Iallgather(in.raw(), bytes, MPI_BYTE, out.raw(), bytes, MPI_BYTE, comm_, &request), what);
      complete(request, what, options.timeout, {in, out});
      meter(ring_share(out.nbytes()), ring_share(out.nbytes()));
    });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& in, Tensor& out, const AllreduceOptions& options) override {
    check_sizes(out, in, size_, "reduce_scatter");
    const std::string what = describe("reduce_scatter", ++seq_, in, reduce_op_name(options.op));
    return queue_->enqueue(what, [this, in, out, options, what]() mutable {
      MPI_Request request;
      check_mpi(MPI_Ireduce_scatter_block(in.raw(), out.raw(), static_cast<int>(out.numel()), mpi_type(in.dtype()),
                                          mpi_op(options.op, in.dtype()), comm_, &request),
                what);
      complete(request, what, options.timeout, {in, out});
      meter(ring_share(in.nbytes()), ring_share(in.nbytes()));
      if (options.op == ReduceOp::kAvg) divide(out, size_);
    });
  }

  std::shared_ptr<Work> barrier(const CollectiveOptions& options) override {
    const std::string what = "mpi barrier #" + std::to_string(++seq_);
    return queue_->enqueue(what, [this, options, what] {
      MPI_Request request;
      check_mpi(MPI_Ibarrier(comm_, &request), what);
      complete(request, what, options.timeout, {});
    });
  }

  std::shared_ptr<Work> send(const Tensor& tensor, int dst, int tag, const CollectiveOptions& options) override {
    check_root(dst, "send");
    const std::string what = describe("send", ++seq_, tensor, "to rank " + std::to_string(dst));
    return queue_->enqueue(what, [this, tensor, dst, tag, options, what] {
      MPI_Request request;
      check_mpi(MPI_Isend(tensor.raw(), static_cast<int>(tensor.nbytes()), MPI_BYTE, dst, tag, comm_, &request), what);
      complete(request, what, options.timeout, {tensor}, /*collective=*/false);
      meter(tensor.nbytes(), 0);
    });
  }

  std::shared_ptr<Work> recv(Tensor& tensor, int src, int tag, const CollectiveOptions& options) override {
    check_root(src, "recv");
    const std::string what = describe("recv", ++seq_, tensor, "from rank " + std::to_string(src));
    return queue_->enqueue(what, [this, tensor, src, tag, options, what]() mutable {
      MPI_Request request;
      check_mpi(MPI_Irecv(tensor.raw(), static_cast<int>(tensor.nbytes()), MPI_BYTE, src, tag, comm_, &request), what);
      complete(request, what, options.timeout, {tensor}, /*collective=*/false);
      meter(0, tensor.nbytes());
    });
  }

  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override {
    bool member = false;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= size_ || (i > 0 && ranks[i] <= ranks[i - 1]))
        throw_error(ErrorKind::kUsage, "mpi new_group", "ranks must be ascending, unique and in [0, " +
                                                            std::to_string(size_) + ")");
      member = member || ranks[i] == rank_;
    }
    // Collective over the parent: queue it so it stays ordered with the parent's other operations.
    MPI_Comm sub = MPI_COMM_NULL;
    auto work = queue_->enqueue("mpi new_group #" + std::to_string(++seq_), [this, member, &sub, &ranks] {
      const int color = member ? 0 : MPI_UNDEFINED;
      int key = 0;
      for (size_t i = 0; i < ranks.size(); ++i)
        if (ranks[i] == rank_) key = static_cast<int>(i);
      check_mpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    });
    work->wait(timeout_);
    if (!member) return nullptr;
    return std::make_shared<MpiProcessGroup>(sub, timeout_);
  }

 private:
  // Polls `request` until done or the deadline, backing off from spinning to
  // short sleeps. On timeout, `buffers` (what the request reads and writes)
  // are kept alive with the group, since MPI may still complete the abandoned
  // request; a collective's error then names the ranks that never arrived.
  // An empty `requested` timeout means the group's.
  void complete(MPI_Request& request, const std::string& what, std::optional<Millis> requested,
                std::vector<Tensor> buffers, bool collective = true) {
    const Millis timeout = requested.value_or(timeout_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int done = 0;
    for (int polls = 0;; ++polls) {
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      if (std::chrono::steady_clock::now() > deadline) {
        abandoned_.insert(abandoned_.end(), buffers.begin(), buffers.end());
        const std::string waited = "timed out after " + duration_text(timeout);
        throw_error(ErrorKind::kTimeout, what, collective ? waited + "; " + census(what, timeout) : waited);
      }
      if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(polls > 10000 ? 1000 : 50));
    }
  }

  // Which ranks reached the timed-out collective `what`. MPI cannot say, so
  // every rank that times out tells all others which operation it waited in
  // (over a private communicator, so nothing mixes with the job's messages)
  // and listens for their reports for a grace period: a rank that sent the
  // same operation arrived, one that sent nothing did not. Ranks that arrived
  // time out within the skew of their arrivals, which the grace covers.
  std::string census(const std::string& what, Millis timeout) {
    if (census_comm_ == MPI_COMM_NULL) return "MPI cannot tell which ranks are missing; check every rank's log";
    census_sent_ = std::hash<std::string>{}(what);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      MPI_Request request;
      if (MPI_Isend(&census_sent_, 1, MPI_UINT64_T, peer, kCensusTag, census_comm_, &request) == MPI_SUCCESS)
        MPI_Request_free(&request);  // an 8-byte message: sent eagerly, its buffer is a member
    }
    std::vector<bool> reached(static_cast<size_t>(size_), false);
    reached[static_cast<size_t>(rank_)] = true;
    int arrived = 1;
    const auto grace = std::chrono::steady_clock::now() + std::min<Millis>(timeout, kCensusGrace);
    while (arrived < size_ && std::chrono::steady_clock::now() < grace) {
      int flag = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kCensusTag, census_comm_, &flag, &status) != MPI_SUCCESS) break;
      if (!flag) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      uint64_t report = 0;
      MPI_Recv(&report, 1, MPI_UINT64_T, status.MPI_SOURCE, kCensusTag, census_comm_, MPI_STATUS_IGNORE);
      if (report == census_sent_ && !reached[static_cast<size_t>(status.MPI_SOURCE)]) {
        reached[static_cast<size_t>(status.MPI_SOURCE)] = true;
        ++arrived;
      }
    }
    std::vector<int> missing, present;
    for (int r = 0; r < size_; ++r) (reached[static_cast<size_t>(r)] ? present : missing).push_back(r);
    if (missing.empty()) return "every rank reached this operation, so MPI itself failed to complete it";
    return arrival_report(missing, present, [](int r) { return std::to_string(r); });
  }

  void check_root(int r, const char* op) const {
    if (r < 0 || r >= size_)
      throw_error(ErrorKind::kUsage, std::string("mpi ") + op,
                  "rank " + std::to_string(r) + " outside a group of " + std::to_string(size_));
  }

  static void check_sizes(const Tensor& part, const Tensor& whole, int n, const char* op) {
    if (part.dtype() != whole.dtype() || whole.numel() != part.numel() * n)
      throw_error(ErrorKind::kShape, std::string("mpi ") + op,
                  "expected the larger tensor to hold " + std::to_string(n) + " x " + std::to_string(part.numel()) +
                      " elements of the same dtype, got " + std::to_string(whole.numel()));
  }

  static constexpr int kCensusTag = 7001;
  static constexpr Millis kCensusGrace{3000};

  MPI_Comm comm_;
  MPI_Comm census_comm_ = MPI_COMM_NULL;  // a duplicate of comm_, for census() only
  uint64_t census_sent_ = 0;              // what census() sent (MPI reads it after the call returns)
  std::vector<Tensor> abandoned_;         // buffers of timed-out requests MPI may still touch
  Millis timeout_;
  int rank_ = 0, size_ = 1;
  // Open MPI says how many of the job's ranks share this host: if all of
  // them, no byte leaves it. Otherwise every byte counts as inter-host.
  const bool one_host_ = [] {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const char* world = std::getenv("OMPI_COMM_WORLD_SIZE");
    return local != nullptr && world != nullptr && std::string(local) == world;
  }();
  int64_t seq_ = 0;
  std::unique_ptr<OpQueue> queue_;
};

}  // namespace

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

std::shared_ptr<ProcessGroup> make_mpi_process_group(Millis timeout) {
  if (!launched_by_mpi())
    throw_error(ErrorKind::kUsage, "backend mpi", "this process was not started by mpirun/srun (no OMPI_COMM_WORLD_RANK, "
                                                 "PMI_RANK or PMIX_RANK); use gradmesh launch or another backend");
  ensure_initialized();
  return std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD, timeout);
}

}  // namespace gradmesh::comm
