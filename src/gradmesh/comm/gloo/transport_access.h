// The two places where the gloo backend reaches past Gloo's public API.
//
// Both rely on details of Gloo's TCP transport in Debian's 2022 snapshot
// (gloo 0.5.0); each is the smallest thing that makes one backend property
// possible, and tests/comm/gloo_*_test.cc exercise both:
//
// - rebind_send_buffer: Gloo's allreduce algorithm objects (ring, ring-
//   chunked, halving-doubling) bind their send buffers to the user's pointer
//   at construction, and constructing one per call costs up to 2x the
//   collective itself (their scratch allocations, see allreduce_cache.h).
//   Keeping one object per (algorithm, count, op) and pointing its send
//   buffers at the next call's tensor gives raw-Gloo speed on any tensor.
//   Every rank rebinds only its own buffers, so ranks still agree on slots.
//   The buffer's pointer is protected state, reached through the standard
//   derived-class member-pointer idiom.
//
// - shut_down_connections: a timed-out or abandoned operation must not wait
//   for Gloo's per-pair timeout (fixed when the pairs connect). Shutting the
//   sockets down makes Gloo's event loop see end-of-file on every pair, which
//   fails every pending wait in this process with gloo::IoException at once
//   and tells every peer the same within a round trip, so the whole group
//   fails fast instead of each rank waiting out its own timeout. Debian's
//   package lacks a header tcp/pair.h needs (gloo/common/memory.h), so the
//   sockets are found by address instead: each connected pair reports its
//   socket's local address (Pair::address(), unique per pair because every
//   pair listens or connects on its own port), and the process's descriptors
//   are matched against those with getsockname().
#pragma once

namespace gloo {
class Context;
namespace transport {
class Buffer;
}
}  // namespace gloo

namespace gradmesh::comm::gloo_backend {

// Points a send buffer at `ptr` (same size as before).
// REQUIRES: no send on `buffer` is in flight (the algorithm's run() returned).
void rebind_send_buffer(gloo::transport::Buffer& buffer, void* ptr);

// Shuts down (does not close) the TCP connection to every peer of `context`:
// every pending Gloo wait on it fails, here and on the peers.
// Safe from any thread while other threads wait in Gloo calls on `context`.
void shut_down_connections(gloo::Context& context);

// Whether the connection to every peer is still open (none closed or reset by the peer).
bool all_connections_open(gloo::Context& context);

// Whether every peer's connection has the same IP address at both ends, so the
// kernel carries it over loopback, not a network: the peers run on this host
// (in this network namespace). False if any connection cannot be inspected.
bool all_peers_on_this_host(gloo::Context& context);

}  // namespace gradmesh::comm::gloo_backend
