// BF16 collectives that keep BF16 on the wire: a ring reduce-scatter, a ring
// all-gather, and the all-reduce made of the two, over Gloo's unbound buffers.
//
// Gloo's tuned all-reduces (allreduce_cache.h) take float32 only; a BF16
// tensor widened for them puts 4 bytes per element on the wire, so bf16
// gradients would cost what float32 ones do. These rings send 2 bytes per
// element and do the arithmetic in float32 on the rank that receives:
//
//   n ranks, rank r; the elements are cut into n chunks (RingChunks: any
//   sizes, the same on every rank; rank r owns chunk r).
//   Reduce-scatter, steps s = 0 .. n-2: send the running partial of chunk
//     (r-s-1) mod n to the right neighbour (at step 0 this rank's own BF16
//     value, unrounded); receive the left neighbour's partial of chunk
//     (r-s-2) mod n, widen it, combine this rank's value in float32 and round
//     to BF16: the partial the next step sends. At step n-2 the received chunk
//     is r and the combination is final: avg divides by n in float32 there,
//     then the result is rounded once more.
//   All-gather, steps s = 0 .. n-2: send chunk (r-s) mod n to the right,
//     receive chunk (r-s-1) mod n from the left, verbatim.
//
// Rounding: chunk c is accumulated in the fixed order c+1, c+2, ..., c
// (mod n), starting from rank c+1's own value, and rounded to BF16 at each of
// the n-1 hops (once for 2 ranks, like a float32 sum rounded at the end).
// Every chunk is finished on one rank and copied bit for bit to the others,
// so every rank ends with identical bits, and a given world size gives the
// same bits in every run.
//
// Bytes sent per rank for an all-reduce: 2 (n-1)/n x 2 bytes x count, half
// of what the widened float32 all-reduce sends. Messages for empty chunks
// (count < n) are skipped on both sides. Each step waits for its message
// before it combines, so the link idles while this rank adds (~0.1 ns per
// byte against ~40 ns per byte at 200 Mbit/s); a pipelined ring would only
// pay off where the network is as fast as the memory.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "gradmesh/comm/process_group.h"

namespace gloo {
class Context;
}

namespace gradmesh::comm::gloo_backend {

// The n chunks of `count` elements a ring works on: chunk c is elements
// [begin(c), begin(c) + size(c)); the first count % n chunks hold one
// element more than the others.
class RingChunks {
 public:
  RingChunks(int64_t count, int n) : count_(count), n_(n) {}
  int64_t begin(int c) const { return c * (count_ / n_) + (c < extra() ? c : extra()); }
  int64_t size(int c) const { return count_ / n_ + (c < extra() ? 1 : 0); }
  int64_t largest() const { return size(0); }
  int64_t count() const { return count_; }

 private:
  int extra() const { return static_cast<int>(count_ % n_); }
  int64_t count_;
  int n_;
};

// out[chunks.size(r)] on rank r := `op` over ranks of their chunk r of `in`,
// rounded as the header says; the messages use transport slot `slot`.
// `out` may be `in` + chunks.begin(r) (in place). `scratch` holds the
// partials (2 x chunks.largest() BF16 values) and is reused across calls.
// Throws Gloo's exceptions on transport failure.
void bf16_ring_reduce_scatter(gloo::Context& context, const uint16_t* in, const RingChunks& chunks, uint16_t* out,
                              ReduceOp op, uint64_t slot, std::chrono::milliseconds wait_timeout,
                              std::vector<uint16_t>& scratch);

// data := every rank's chunk of data, each from its owner: rank c's chunk c
// travels around the ring unchanged.
void bf16_ring_allgather(gloo::Context& context, uint16_t* data, const RingChunks& chunks, uint64_t slot,
                         std::chrono::milliseconds wait_timeout);

// Largest number of elements one ring all-reduce handles at once: longer
// tensors run as consecutive segments of this many, which bounds the scratch
// (2 x segment / n values) and every message below 2^31 bytes.
inline constexpr int64_t kBf16RingSegment = int64_t{1} << 24;

// data[count] := `op` over all ranks of their data[count], in place; 16 bits
// on the wire. `segment` (> 0) is for tests: any value gives the same result
// only where no sum is rounded (a different segment length cuts chunks
// differently, and so changes which rank starts each element's sum).
void bf16_ring_allreduce(gloo::Context& context, uint16_t* data, int64_t count, ReduceOp op,
                         std::chrono::milliseconds wait_timeout, std::vector<uint16_t>& scratch,
                         int64_t segment = kBf16RingSegment);

}  // namespace gradmesh::comm::gloo_backend
