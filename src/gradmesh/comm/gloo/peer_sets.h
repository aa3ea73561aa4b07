// Which peers each of the gloo backend's algorithms talks to, so a group with
// lazy connections (pair_mesh.h) connects exactly those before it first runs
// one, rather than every pair at start-up.
//
// Each set is what the algorithm's code addresses on this rank, transcribed
// from Debian's Gloo snapshot (allreduce_halving_doubling.h, broadcast.cc,
// barrier.cc, allgather.cc) and this backend's own rings (bf16_ring.h,
// ring_reduce_scatter.h). Every relation is symmetric: if rank a's set for an
// operation holds b, b's set for the same operation holds a (tested for every
// group size to 300), which is what lets two ranks meet in the store when
// they first need their pair. A missed peer is not silent: the lazy context
// reports the missing connection by rank (pair_mesh.h).
//
// Sizes for a group of N ranks: a ring needs 2 peers; halving-doubling
// log2(N) for a power of two, and otherwise at most 1.13 ceil(log2 N) on
// average, but a rank of a small binary block exchanges with as many ranks of
// the next larger block (in 2^k + 1 ranks the lone rank pairs with all 2^k
// others); the dissemination barrier up to 2 ceil(log2 N); a broadcast's
// binomial tree at most ceil(log2 N) on the root and fewer elsewhere.
#pragma once

#include <vector>

namespace gradmesh::comm::gloo_backend {

// The ring's neighbours (rank - 1 and rank + 1, modulo size), ascending, without duplicates.
std::vector<int> ring_peers(int rank, int size);
// Gloo's AllreduceHalvingDoubling: the XOR partners within this rank's binary
// block and the ranks it exchanges with in the next smaller and larger blocks.
std::vector<int> halving_doubling_peers(int rank, int size);
// gloo::broadcast's binomial tree rooted at `root`: this rank's parent and children.
std::vector<int> broadcast_peers(int rank, int size, int root);
// gloo::barrier's dissemination rounds: rank +- 2^k for 2^k < size.
std::vector<int> barrier_peers(int rank, int size);

}  // namespace gradmesh::comm::gloo_backend
