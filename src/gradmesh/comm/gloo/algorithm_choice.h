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
#include <cstdint>

namespace gradmesh::comm::gloo_backend {

enum class AllreduceAlgorithm { kRing, kRingChunked, kHalvingDoubling };

const char* algorithm_name(AllreduceAlgorithm algorithm);  // "ring", "ring-chunked", "halving-doubling"

// The algorithm for an all-reduce of `bytes` bytes (float32) among `ranks` ranks.
AllreduceAlgorithm choose_allreduce_algorithm(size_t bytes, int ranks);

// Whether an all-reduce of `bytes` bytes with `algorithm` runs over the
// group's second set of connections, the ones in Gloo's synchronous mode,
// given the group's agreed `sync_max_bytes` (sync_max_bytes_for()).
//
// In its default (asynchronous) mode a Gloo pair is read by the device's
// event-loop thread, which then wakes the waiting caller: every message costs
// two thread wake-ups. In synchronous mode the caller reads and writes the
// socket itself, with blocking calls. Measured with the shared anchor on 2
// ranks over loopback (4 alternating runs, microseconds per all-reduce):
//
//   bytes      ring async  sync  | halving-doubling async  sync
//   4 KB           87-142  35-38 |                  157-292  63-85
//   64 KB         121-166  72-79 |                  184-272 111-138
//   256 KB        235-333  94-118|                  290-343 128-148
//   1 MB          691-784 380-425|                  572-728 429-456
//
// The catch: a blocking write returns only once the kernel has taken every
// byte, and both ranks write before they read, so a message larger than
// what the socket buffers hold deadlocks the pair (seen at 64 MB with
// wmem_max at 4 MiB: both writes block until the timeout). Gloo sizes each
// socket's send buffer to the message it sends, capped at the kernel's
// net.core.wmem_max, and the kernel doubles that. A synchronous message is
// sent only if that buffer holds it 1.5 times over (room for the kernel's
// per-packet accounting overhead, small with segmentation offload, up to
// about half the payload for MSS-sized packets), so its write completes
// whatever the receiver does:
// 2 x min(M, wmem_max) >= 1.5 M, i.e. M <= 4/3 wmem_max. The default
// wmem_max (208 KiB) allows 277 KiB.
// Ring-chunked keeps several sends in flight and is never run synchronously.
bool runs_synchronously(size_t bytes, AllreduceAlgorithm algorithm, size_t sync_max_bytes);

// This host's limit for synchronous all-reduces: kSyncMaxBytes, or less when
// `wmem_max` (net.core.wmem_max, 0 if unknown) is small. Every rank must use
// the same limit, so the group agrees on the smallest over its hosts.
size_t sync_max_bytes_for(size_t wmem_max);

// The piece size for an all-reduce of `bytes` bytes, or 0 to run it whole.
//
// When every peer is on this host (each connection has the same address at
// both ends, so the kernel carries it over loopback), an all-reduce larger
// than `sync_max_bytes` runs as consecutive pieces of `sync_max_bytes` on the
// synchronous connections, each piece an all-reduce of its own with the
// algorithm for its size. Each piece fits the socket buffers, so the
// deadlock above cannot happen, and the event-loop threads stay idle: on
// loopback the copies through the kernel are the whole cost, and two more
// busy threads per rank only compete with them for cores. Measured with
// `gradmesh bench comm` (microseconds, median of alternating runs: whole /
// in 256 KiB pieces / raw Gloo's fastest algorithm):
//
//   bytes   2 ranks (5 runs)          3 ranks (5 runs)          4 ranks (3 runs)
//   1 MB     1043 /   417 /   953      1277 /  1061 /  2124      2831 /  1770 /  2988
//   4 MB     4270 /  2077 /  3660      6196 /  5563 /  7308      9675 /  6887 /  9881
//   16 MB   16274 /  9413 / 16893     25156 / 20156 / 25268     35028 / 26864 / 37008
//   64 MB   63100 / 31533 / 63833     98087 / 79132 / 93767    123396 /116711 /131996
//
// Across hosts the pieces would each wait a network round trip (tens of
// microseconds, against ~200 us to send 256 KiB at 10 Gbit/s) and give up
// the event loop's overlap of sending and receiving, so there all-reduces
// run whole. Summation order: pieces are reduced separately, so with 3 or
// more ranks an element may be added in a different order than whole; the
// choice depends only on where the ranks run, so it is the same in every run
// of the same job.
size_t allreduce_piece_bytes(size_t bytes, bool peers_on_this_host, size_t sync_max_bytes);

// Whether a BF16 all-reduce of `count` elements is widened to float32 and run
// by Gloo's algorithms above instead of the ring that keeps BF16 on the wire
// (bf16_ring.h): only when every peer is on this host and the float32 message
// runs whole on the synchronous connections, where one exchange of twice the
// bytes beats the ring's 2(n-1) messages (measurements: process_group.h).
bool bf16_runs_widened(int64_t count, bool peers_on_this_host, size_t sync_max_bytes);

inline constexpr size_t kSyncMaxBytes = size_t{256} << 10;
// Groups of more ranks than this build no synchronous mesh: it doubles every
// rank's connections (N - 1 more each), and 128 ranks on one host would need
// 16,256 connections per mesh against about 28,000 ephemeral ports. Small
// all-reduces then run in the asynchronous mode (tens of microseconds more).
inline constexpr int kSyncMeshMaxRanks = 32;
inline constexpr size_t kSyncMaxBytesUnknownHost = size_t{64} << 10;  // wmem_max unreadable

}  // namespace gradmesh::comm::gloo_backend
