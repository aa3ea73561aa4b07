// How PyTorch tensors reach gradmesh's process groups.
//
// float32 and bfloat16 are gradmesh's own dtypes: their reductions run in
// the backends' kernels (shm's vectorised sums, the bf16 ring). Every other
// dtype only moves as bytes: broadcast, gathers, all-to-all and send/recv copy
// bits whatever they mean, and a reduction of such a tensor all-gathers the
// ranks' bytes and reduces them here with ATen, in rank order, so every rank
// computes the same bits. A tensor the wire can use as it is (contiguous;
// for bytes, an even count) is lent to the group without a copy; any other
// goes through a contiguous buffer that is copied back when the operation
// finishes.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <string>

#include "gradmesh/core/tensor.h"

namespace gradmesh::pytorch {

// The gradmesh dtype of a torch dtype reduced natively, if it is one.
std::optional<DType> native_dtype(at::ScalarType type);

// The contiguous memory an operation works on for one user tensor.
struct Staged {
  at::Tensor user;    // what the caller passed
  at::Tensor buffer;  // contiguous; `user` itself when it needed no copy
  bool copied = false;
  bool as_bytes = false;  // `buffer` holds user's bytes (and maybe a padding byte)
  // Writes the buffer's contents into `user` (a no-op when not copied).
  void copy_back() const;
};

// In `user`'s dtype (native reductions): a contiguous copy only if needed,
// or always (`fresh`: an output that overlaps the operation's input).
Staged stage_native(const at::Tensor& user, bool copy_in, bool fresh = false);
// As bytes: a uint8 buffer of an even size (a padding byte where needed).
Staged stage_bytes(const at::Tensor& user, bool copy_in);

// A gradmesh tensor over a staged buffer: in its own dtype (native) or as
// bfloat16 words (bytes; the buffer's size is even).
Tensor lend_native(const Staged& staged);
Tensor lend_bytes(const Staged& staged);

// Reduces `gathered` [ranks, ...] over its first dimension with `op`, in the
// dtype of the inputs. An op that is not defined for the dtype (avg of
// integers, bitwise ops on floats, premul_sum) is a c10::Error naming both.
at::Tensor reduce_gathered(const at::Tensor& gathered, c10d::ReduceOp::RedOpType op);

// torch's spelling of a dtype, for messages: "float32", "int64", ...
std::string dtype_label(at::ScalarType type);
// "sum", "avg", ...
std::string reduce_op_label(c10d::ReduceOp::RedOpType op);

// Writes into tensors the caller passed as a backend does: below autograd, so
// a tensor that requires grad, has a history or was made in inference mode
// is written as Gloo writes it (raw memory), with no history recorded.
using RawWrites = at::AutoDispatchBelowADInplaceOrView;

// Throws a c10::Error naming `operation` unless `t` is a dense CPU tensor.
void check_cpu_dense(const at::Tensor& t, const char* operation);

}  // namespace gradmesh::pytorch
