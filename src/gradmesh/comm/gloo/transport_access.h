// The three places where the gloo backend reaches past Gloo's public API.
//
// All rely on details of Gloo's TCP transport in Debian's 2022 snapshot
// (gloo 0.5.0; transport_access.cc stops the build on any other version),
// and this is the only file that reaches past Gloo's public API. Each is the
// smallest thing that makes one backend property possible, and
// tests/comm/gloo_*_test.cc exercise each:
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
// - PairSockets: a timed-out or abandoned operation must not wait for
//   Gloo's per-pair timeout (fixed when the pairs connect). Shutting the
//   sockets down makes Gloo's event loop see end-of-file on every pair, which
//   fails every pending wait in this process with gloo::IoException at once
//   and tells every peer the same within a round trip, so the whole group
//   fails fast instead of each rank waiting out its own timeout. Each pair's
//   descriptor is the protected tcp::Pair::fd_ (reached like the buffer's
//   pointer above; Debian's package lacks a header tcp/pair.h includes, so
//   compat/ supplies its declarations). It is read once, while the freshly
//   connected mesh is idle, and duplicated: later shutdowns and probes use
//   descriptors that only this code closes, so they can never act on a
//   descriptor Gloo (or any other thread) has closed and the kernel has
//   handed out again. A shutdown acts on the socket, so it reaches Gloo's
//   descriptor too. (An earlier version matched /proc/self/fd against the
//   pairs' addresses; ThreadSanitizer rightly reported that scan racing with
//   other threads' close().) With lazy connections the pairs connect one
//   operation at a time, so their descriptors are added the same way, each
//   while its pair is freshly connected and idle.
//
// - make_lazy_tcp_context: a group with lazy connections (pair_mesh.h)
//   creates its pairs one at a time, so some stay null. Gloo's algorithms
//   call getPair() and use the result; a null pair would crash the process.
//   This TCP context derives from Gloo's and overrides the virtual getPair()
//   to throw an error naming the missing connection instead.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "gradmesh/comm/traffic_meter.h"

namespace gloo {
class Context;
namespace transport {
class Buffer;
class Context;
class Device;
}
}  // namespace gloo

namespace gradmesh::comm::gloo_backend {

// Points a send buffer at `ptr` (same size as before).
// REQUIRES: no send on `buffer` is in flight (the algorithm's run() returned).
void rebind_send_buffer(gloo::transport::Buffer& buffer, void* ptr);

// A TCP transport context with no pairs yet, for `device` (a TCP device);
// getPair() of a rank with no pair throws std::runtime_error naming both ranks.
std::shared_ptr<gloo::transport::Context> make_lazy_tcp_context(const std::shared_ptr<gloo::transport::Device>& device,
                                                                int rank, int size);

// The TCP connections of one connected Gloo context, through descriptors of
// its own (duplicates, closed by the destructor).
// Thread-safety: after construction every member may be called from any thread.
class PairSockets {
 public:
  // REQUIRES: context.connectFullMesh() returned and no operation has run yet.
  // Error(kComm) if a pair is not a connected TCP pair.
  explicit PairSockets(gloo::Context& context);
  // None yet: a group with lazy connections adds them as they connect.
  PairSockets();
  ~PairSockets();
  PairSockets(const PairSockets&) = delete;
  PairSockets& operator=(const PairSockets&) = delete;

  // Adds the pairs to `peers`, connected just now and not used yet.
  // Error(kComm) as the constructor.
  void add(gloo::Context& context, const std::vector<int>& peers);
  // Shuts down (does not close) every connection: every pending Gloo wait on
  // them fails, here and on the peers.
  void shut_down() const;
  // Whether the connection to every peer is still open (none shut down, closed or reset).
  bool all_open() const;
  // Whether every connection has the same IP address at both ends, so the
  // kernel carries it over loopback, not a network: the peers run on this
  // host (in this network namespace).
  bool all_on_this_host() const;
  // Bytes moved over the connections so far, by the kernel's count; those to
  // peers at another address are inter-host. The traffic meter
  // (comm/traffic_meter.h) reads this while the group lives, and once more
  // when it is destroyed.
  Traffic traffic() const;

 private:
  void start_metering();
  mutable std::mutex mutex_;  // add() may run while another thread shuts the connections down
  std::vector<int> fds_;      // one per connected peer
  std::vector<bool> remote_;  // per fd: the peer has another address (another host)
  std::unique_ptr<TrafficSource> meter_;
};

}  // namespace gradmesh::comm::gloo_backend
