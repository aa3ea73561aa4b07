// Ring reduce-scatter over Gloo's unbound buffers.
//
// This Gloo snapshot has no option-style reduce-scatter, and its
// ReduceScatterHalvingDoubling reduces in place (our input is const) with
// per-pair timeouts only. The ring is short to write and bandwidth-optimal:
//
//   n ranks, rank r owns chunk r (elements [r*count, (r+1)*count) of `in`).
//   Step s = 0 .. n-2: send the running partial of chunk (r-s-1) mod n to
//   the right neighbour; receive the left neighbour's partial of chunk
//   (r-s-2) mod n and combine this rank's own piece of that chunk with it.
//   After step n-2 the received chunk is (r-n) mod n = r, reduced over all n.
//
// Partials travel in the tensor's dtype: (n-1) x count x 4 bytes sent per
// rank for F32, x 2 for BF16. F32 partials are exact float32 sums. BF16
// partials are BF16 (bf16_ring.h, which runs that case): each hop widens the
// received partial, adds in float32 and rounds to BF16, so a chunk is rounded
// at each of the n-1 hops. avg divides the final float32 sum by n before the
// last rounding. Two scratch halves alternate so a receive never overwrites a
// partial still being sent.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "gradmesh/comm/process_group.h"

namespace gloo {
class Context;
}

namespace gradmesh::comm::gloo_backend {

// The partials a ring keeps between its steps, reused across calls.
struct RingScratch {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
};

// out[count] on rank r := `op` over ranks of their in[r*count .. (r+1)*count).
// `scratch` grows to 2*count values of the dtype.
// `wait_timeout` bounds each wait inside Gloo (the group's watchdog enforces the
// operation's own deadline). Throws gloo exceptions on transport failure.
void ring_reduce_scatter(gloo::Context& context, const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                         std::chrono::milliseconds wait_timeout, RingScratch& scratch);

}  // namespace gradmesh::comm::gloo_backend
