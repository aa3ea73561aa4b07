#include "gradmesh/comm/mpi/bf16_ops.h"

#include <cstdint>
#include <mutex>

#include "gradmesh/core/bf16.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm::mpi_backend {
namespace {

// MPI's contract for a user operation: inout[i] = in[i] op inout[i].
template <class Apply>
void combine(void* in, void* inout, int* length, Apply apply) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *length; ++i) b[i] = float_to_bf16(apply(bf16_to_float(a[i]), bf16_to_float(b[i])));
}

void bf16_sum(void* in, void* inout, int* length, MPI_Datatype*) {
  combine(in, inout, length, [](float a, float b) { return a + b; });
}
void bf16_max(void* in, void* inout, int* length, MPI_Datatype*) {
  combine(in, inout, length, [](float a, float b) { return a > b ? a : b; });
}
void bf16_min(void* in, void* inout, int* length, MPI_Datatype*) {
  combine(in, inout, length, [](float a, float b) { return a < b ? a : b; });
}

struct Bf16Ops {
  MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL, min = MPI_OP_NULL;
};

std::mutex ops_mutex;
Bf16Ops ops;

void create(MPI_User_function* function, MPI_Op* op) {
  if (MPI_Op_create(function, /*commute=*/1, op) != MPI_SUCCESS)
    throw_error(ErrorKind::kComm, "mpi", "MPI_Op_create failed for a bf16 reduction");
}

}  // namespace

MPI_Op bf16_op(ReduceOp op) {
  std::lock_guard<std::mutex> lock(ops_mutex);
  if (ops.sum == MPI_OP_NULL) {
    create(&bf16_sum, &ops.sum);
    create(&bf16_max, &ops.max);
    create(&bf16_min, &ops.min);
  }
  switch (op) {
    case ReduceOp::kMax: return ops.max;
    case ReduceOp::kMin: return ops.min;
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return ops.sum;
  }
  return ops.sum;
}

void free_bf16_ops() {
  std::lock_guard<std::mutex> lock(ops_mutex);
  for (MPI_Op* op : {&ops.sum, &ops.max, &ops.min})
    if (*op != MPI_OP_NULL) MPI_Op_free(op);
}

}  // namespace gradmesh::comm::mpi_backend
