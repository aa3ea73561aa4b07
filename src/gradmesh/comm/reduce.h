// Elementwise reductions shared by the backends. Arithmetic is float32; BF16
// inputs are widened, combined and rounded once at the end, so reducing k
// BF16 buffers here rounds once, not k - 1 times. (Backends that send BF16
// partial sums between ranks round each of them: process_group.h.)
#pragma once

#include <cstdint>

#include "gradmesh/comm/process_group.h"

namespace gradmesh::comm {

// out[i] = op over j < k of inputs[j][i]; kAvg divides the sum by `k`.
// `out` may alias inputs[0]. dtype is F32 or BF16 for inputs and out alike.
void reduce_buffers(const void* const* inputs, int k, void* out, int64_t count, DType dtype, ReduceOp op);

// acc[i] = op(acc[i], in[i]) in float32 (kAvg accumulates a sum; finish with divide_buffer).
void combine_into(float* acc, const void* in, int64_t count, DType dtype, ReduceOp op);
// buf[i] /= divisor.
void divide_buffer(float* buf, int64_t count, float divisor);

}  // namespace gradmesh::comm
