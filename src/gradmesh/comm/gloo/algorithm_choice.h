// Which of Gloo's three all-reduce algorithms runs a given message.
//
// Gloo ships three in-place all-reduces (docs/algorithms.md in Gloo):
//   ring             n-1 rounds; each round every rank sends its whole
//                    buffer to the right and adds what arrives from the left.
//                    Fewest messages, so the lowest latency for small
//                    buffers, but (n-1) x bytes on the wire per rank.
//   ring-chunked     reduce-scatter then all-gather around the ring in 2n
//                    chunks, two in flight: 2(n-1)/n x bytes per rank, the
//                    bandwidth optimum, at the price of 4n small rounds.
//   halving-doubling reduce-scatter by recursive halving then all-gather by
//                    recursive doubling: 2 log2(n) rounds, 2(n-1)/n x bytes.
//                    For n that is not a power of two this snapshot splits the
//                    ranks into binary blocks (e.g. 3 = 2 + 1) and adds one
//                    exchange between blocks; results stay correct (tested for
//                    n = 2..7 and counts 1, 2, 3, 7, 100, 1M+3) but the small
//                    block does the largest share of the work.
//
// Rounding: ring adds the ranks' values in a different order on every rank,
// so for n >= 3 the replicas could differ in the last bit (and drift apart
// over a training run). With n = 2 both ranks compute a + b = b + a. The
// other two reduce each element once, on one rank, and copy the result to
// all, so every rank holds bit-identical values. Ring is therefore used only
// for 2 ranks.
//
// The thresholds below come from bench/gloo_crossover.sh on the development
// machine (the table is in algorithm_choice.cc). Across hosts the balance
// moves towards the bandwidth-optimal algorithms; re-measure there.
#pragma once

#include <cstddef>

namespace gradmesh::comm::gloo_backend {

enum class AllreduceAlgorithm { kRing, kRingChunked, kHalvingDoubling };

const char* algorithm_name(AllreduceAlgorithm algorithm);  // "ring", "ring-chunked", "halving-doubling"

// The algorithm for an all-reduce of `bytes` bytes (float32) among `ranks` ranks.
AllreduceAlgorithm choose_allreduce_algorithm(size_t bytes, int ranks);

}  // namespace gradmesh::comm::gloo_backend
