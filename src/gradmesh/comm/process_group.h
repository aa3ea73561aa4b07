// ProcessGroup: collectives among a fixed set of ranks (as c10d's ProcessGroup).
//
// Every operation is asynchronous: it is queued in call order on the group's
// communication thread and returns a Work to wait on. All ranks must issue
// the same operations in the same order (GRADMESH_COMM_CHECK=1 verifies it).
// Tensors are contiguous F32 or BF16. BF16 travels as 16 bits and is added in
// float32: shm reduces all ranks' values at once and rounds once; gloo, mpi
// and hier's cross-host stage send BF16 partial sums, rounded at each hop
// that forms one (a ring on n ranks: n-1 times; each backend's header says
// how). Every operation has a timeout; when it expires, or a peer dies, the
// Work fails with an error naming the operation, its sequence number and the
// ranks that did not arrive, and the group is marked broken: every later
// call fails at once instead of hanging.
//
// REQUIRES: tensors passed in stay alive and untouched until their Work completes.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gradmesh/comm/store.h"
#include "gradmesh/comm/work.h"
#include "gradmesh/core/tensor.h"

namespace gradmesh::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

struct CollectiveOptions {
  // This operation's deadline; nullopt: the group's timeout. Any value set
  // here is honoured as given, 300 s included.
  std::optional<Millis> timeout;
  // Run on the group's communication thread even when small, so the caller
  // can compute while it runs (the data-parallel reducer sets it). By
  // default, a small operation issued while nothing is queued runs on the
  // caller's thread, which is faster when the caller waits at once.
  bool background = false;
};
struct AllreduceOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::kSum;
};
struct BroadcastOptions : CollectiveOptions {
  int root = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "shm", "gloo", "hier", "mpi"

  // In place: every rank ends with the reduction of all ranks' `tensor`.
  virtual std::shared_ptr<Work> allreduce(Tensor& tensor, const AllreduceOptions& options = {}) = 0;
  // In place: every rank ends with root's `tensor`.
  virtual std::shared_ptr<Work> broadcast(Tensor& tensor, const BroadcastOptions& options = {}) = 0;
  // out [size() * in.numel()]: rank r's `in` lands at offset r * in.numel().
  virtual std::shared_ptr<Work> allgather(const Tensor& in, Tensor& out, const CollectiveOptions& options = {}) = 0;
  // in [size() * out.numel()]: out on rank r = reduction over ranks of their slice r of `in`.
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& in, Tensor& out,
                                               const AllreduceOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> barrier(const CollectiveOptions& options = {}) = 0;
  // Point to point; a send is matched by the recv with the same (src, dst, tag), in order.
  virtual std::shared_ptr<Work> send(const Tensor& tensor, int dst, int tag, const CollectiveOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> recv(Tensor& tensor, int src, int tag, const CollectiveOptions& options = {}) = 0;

  // A group of the listed ranks (ascending, unique), created collectively: every
  // rank of this group calls it with the same list; ranks not in it get nullptr.
  virtual std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) = 0;

  // True once an operation failed: the group cannot be used any more.
  virtual bool broken() const = 0;

  // How an all-reduce of `bytes` bytes of float32 would run, for benchmarks and
  // logs ("ring", "halving-doubling", "ring in 256 KiB pieces"); empty for a
  // backend with a single method.
  virtual std::string allreduce_algorithm(size_t bytes) const {
    (void)bytes;
    return "";
  }
};

struct ProcessGroupOptions {
  std::string backend = "auto";  // auto | shm | gloo | hier | mpi
  // Bounds the rendezvous and is every operation's default deadline;
  // nullopt: GRADMESH_COMM_TIMEOUT (core/env.h), 300 s when that is unset.
  std::optional<Millis> timeout;
  bool check = false;            // fingerprint every collective (also GRADMESH_COMM_CHECK=1)
  std::string hostname;          // this host's address for TCP backends ("" = from the environment)
  int local_rank = -1, local_size = -1;  // ranks on this host (-1 = from the environment)
  // gloo: connect each pair only when an operation first needs it (pair_mesh.h).
  // nullopt: GRADMESH_GLOO_LAZY, whose default "auto" means groups of more than 32 ranks.
  std::optional<bool> lazy_connections;
};

// options.timeout, or GRADMESH_COMM_TIMEOUT when it is unset (a bad value of
// the variable is Error(kUsage) naming it).
Millis group_timeout(const ProcessGroupOptions& options);

// Builds a group of `size` ranks through `store` with the named backend
// (the one registry of backends: comm/registry.cc). An unknown or unavailable
// backend is Error(kUsage) naming it and listing the ones built in.
std::shared_ptr<ProcessGroup> create_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                   const ProcessGroupOptions& options = {});

}  // namespace gradmesh::comm
