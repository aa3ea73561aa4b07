// BF16 reductions for MPI, which has no bfloat16 type.
//
// A BF16 tensor travels as MPI_UINT16_T, 2 bytes per element, and is reduced
// by our own commutative MPI operations: each combination widens both
// operands, adds (or takes the max or min) in float32 and rounds to BF16. MPI
// applies an operation once per partial result it forms, so a sum is rounded
// at each step of MPI's algorithm (2 ranks: once; n ranks: at most n-1 times
// along any element's path), where widening the whole tensor to float32
// would round once but send twice the bytes. avg is a sum whose result the
// caller widens, divides by n in float32 and rounds again.
//
// Only the mpi backend includes this header (it needs <mpi.h>).
#pragma once

#include <mpi.h>

#include "gradmesh/comm/process_group.h"

namespace gradmesh::comm::mpi_backend {

// The BF16 elements' MPI datatype.
inline MPI_Datatype bf16_datatype() { return MPI_UINT16_T; }

// The operation for `op` on BF16 elements (kAvg: the sum). Created on first
// use; REQUIRES: MPI is initialized.
MPI_Op bf16_op(ReduceOp op);

// Frees the operations bf16_op() created; call before MPI_Finalize.
void free_bf16_ops();

}  // namespace gradmesh::comm::mpi_backend
