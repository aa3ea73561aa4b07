// The gloo backend: ProcessGroup over Gloo's TCP transport, for ranks on
// several machines (on one machine the shm backend is ~100x faster for
// small messages).
//
// Rendezvous: every rank listens on one address and publishes it through our
// Store (store_adapter.h), under "gloo/<n>/" for the n-th gloo group this rank
// creates on that store (so several groups can share one store); Gloo then
// connects a TCP pair between every two ranks. The address comes from
// options.hostname, GRADMESH_HOSTNAME or MASTER_ADDR (device.h has the rules).
//
// Operations run one at a time in call order on the group's communication
// thread (OpQueue), except that a collective issued while none is queued or
// running runs on the caller's thread and is complete when the call returns
// (the thread hand-off would cost ~50 us, half a 4 KB all-reduce; such a call
// blocks until the peers arrive, so work meant to overlap computation sets
// options.background, which always queues it).
//
// Connections: two meshes. Gloo's default (asynchronous) pairs carry every
// operation but the small all-reduces, which run on a second mesh of pairs in
// Gloo's synchronous mode, where the caller does its own socket reads and
// writes (2-3x faster up to 256 KiB; algorithm_choice.h says why only there).
// When every rank runs on this host, larger all-reduces run there too, as
// consecutive 256 KiB pieces (allreduce_piece_bytes()).
//   allreduce       F32: Gloo ring / ring-chunked / halving-doubling, picked
//                   by message size (algorithm_choice.h), in place with no
//                   copy; avg = sum, then / n.
//                   BF16: our ring reduce-scatter + all-gather with BF16 on
//                   the wire (bf16_ring.h), half the bytes of widening to
//                   float32: each hop widens the received partial sum, adds
//                   this rank's value in float32 and rounds to BF16, so a ring
//                   on n ranks rounds each partial sum at each of its n-1 hops
//                   (once for 2 ranks); avg divides the final float32 sum by n
//                   before the last rounding. Every rank ends with the same
//                   bits, the same in every run of a given world size.
//                   Except on one host: when every peer is on this host
//                   (loopback) and the message in float32 runs whole on the
//                   synchronous mesh (up to 64 Ki elements at the default
//                   256 KiB; bf16_runs_widened()), it is widened, reduced by
//                   Gloo's algorithms in float32 and rounded once. Loopback
//                   has no wire to save, and there one synchronous exchange
//                   of twice the bytes beats the ring's 2(n-1) messages,
//                   each a handshake and two thread wake-ups on the event
//                   loop; from 256 KB on the ring's halved copies win.
//                   GlooBench.DISABLED_Bf16RingAgainstWidened, loopback, 2
//                   busy cores, median of 7 alternating rounds, us per
//                   all-reduce (ring / widened), by BF16 bytes:
//                     bytes    2 ranks         3 ranks
//                     4 KB     578 / 61        2100 / 153
//                     64 KB    530 / 323       2004 / 441
//                     256 KB   702 / 1513      2400 / 6884
//                     1 MB    1317 / 6335      3320 / 29731
//                     16 MB  30130 / 103054   41062 / 174182
//   broadcast       gloo::broadcast (root sends to each rank).
//   allgather       gloo::allgather (ring).
//   reduce_scatter  a ring over unbound buffers (ring_reduce_scatter.h);
//                   BF16 partials travel and round as in the BF16 all-reduce.
//   barrier         gloo::barrier.
//   send / recv     unbound buffers posted at once on the caller's thread
//                   (point_to_point.h: they do not wait behind queued
//                   collectives); a waiter thread finishes the Work.
//   new_group       a new Gloo context among the members, rendezvousing under
//                   "<this group's prefix>/sub<k>/" (k counts new_group calls),
//                   sharing this group's device.
//
// Timeouts: an operation's deadline is its options.timeout, counted from
// when it starts; left empty it means the group's timeout (options.timeout
// at construction, or GRADMESH_COMM_TIMEOUT), as in the shm backend. A watchdog
// (op_watchdog.h) enforces it by shutting the group's connections down.
// Gloo's own per-wait timeouts are the group's timeout + 1 s, a backstop
// that also caps any single wait of the tuned all-reduce: an operation may
// ask for a longer timeout than the group's, but only the other operations
// honour all of it.
// Any failure (timeout, a peer's connection closing) shuts this rank's
// connections down too, so every peer fails at once rather than at its own
// deadline, runs a failure census (failure_census.h) and fails the Work with
//   Error(kTimeout or kComm): "gloo allreduce #3 (f32 x 1000003, sum): timed
//   out after 2.0 s; rank 2 did not arrive (ranks 0, 1 did)"
// The group is then broken: later calls fail at once.
//
// Mismatched calls across ranks (different counts for the same collective)
// are a usage error Gloo does not detect; use GRADMESH_COMM_CHECK=1 to find them.
#pragma once

#include <memory>

#include "gradmesh/comm/process_group.h"

namespace gradmesh::comm {

// Builds rank `rank` of a gloo group of `size` ranks. Blocks until all ranks
// have connected, at most options.timeout; a rank that does not arrive is
// Error(kTimeout) naming it, an address that cannot be bound Error(kComm).
// REQUIRES: 0 <= rank < size; every rank passes the same store and size.
std::shared_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      const ProcessGroupOptions& options = {});

}  // namespace gradmesh::comm
