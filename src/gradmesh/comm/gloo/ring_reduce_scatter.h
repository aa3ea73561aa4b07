// Ring reduce-scatter over Gloo's unbound buffers.
//
// This Gloo snapshot has no option-style reduce-scatter, and its
// ReduceScatterHalvingDoubling reduces in place (our input is const) with
// per-pair timeouts only. The ring is short to write and bandwidth-optimal:
//
//   n ranks, rank r owns chunk r (elements [r*count, (r+1)*count) of `in`).
//   Step s = 0 .. n-2: send the running partial sum of chunk (r-s-1) mod n to
//   the right neighbour; receive the left neighbour's partial sum of chunk
//   (r-s-2) mod n and add this rank's own piece of that chunk to it.
//   After step n-2 the received chunk is (r-n) mod n = r, summed over all n.
//
// Bytes sent per rank: (n-1) x count x 4 (partial sums travel as float32,
// also for BF16 inputs, so BF16 is rounded once, at the end). Two scratch
// halves alternate so a receive never overwrites a partial still being sent.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "gradmesh/comm/process_group.h"

namespace gloo {
class Context;
}

namespace gradmesh::comm::gloo_backend {

// out[count] on rank r := `op` over ranks of their in[r*count .. (r+1)*count).
// `scratch` is resized to 2*count floats and reused across calls.
// `wait_timeout` bounds each wait inside Gloo (the group's watchdog enforces the
// operation's own deadline). Throws gloo exceptions on transport failure.
void ring_reduce_scatter(gloo::Context& context, const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                         std::chrono::milliseconds wait_timeout, std::vector<float>& scratch);

}  // namespace gradmesh::comm::gloo_backend
