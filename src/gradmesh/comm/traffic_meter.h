// Bytes this process sent and received through its process groups, per
// backend, split by whether the peer is on another host (network egress,
// which clouds bill) or this one. Metering (obs/metering.h) reads it.
//
// How each backend counts, so the figures mean what they say:
//   gloo  the kernel's own count for each TCP connection (TCP_INFO:
//         bytes acknowledged by the peer, bytes received), summed over the
//         group's connections; a connection whose two ends have different
//         addresses is inter-host. Gloo's framing is included.
//   shm   bytes copied into and out of the shared segments; never inter-host.
//   mpi   MPI reports no wire bytes: the payload a bandwidth-optimal
//         algorithm moves (2(n-1)/n of the buffer for an all-reduce, ...),
//         all counted as inter-host unless the group is on one host.
// hier is made of shm and gloo groups, which count themselves.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace gradmesh::comm {

struct Traffic {
  uint64_t sent = 0, received = 0;
  uint64_t inter_host_sent = 0, inter_host_received = 0;  // included in sent/received
  Traffic& operator+=(const Traffic& other);
};

enum class TrafficBackend { kGloo, kShm, kMpi, kNccl };
const char* traffic_backend_name(TrafficBackend backend);  // "gloo", ...

// Adds bytes that moved just now (shm, mpi). Thread-safe, lock-free.
void count_traffic(TrafficBackend backend, uint64_t sent, uint64_t received, bool inter_host);

// Everything so far: the pushed counts plus every live source's current
// reading, by backend name; backends with no traffic are left out.
std::map<std::string, Traffic> traffic_by_backend();

// A counter the meter polls (a gloo group's connections). While it lives,
// traffic_by_backend() calls `read`; destroying it adds its last reading to
// the backend's total, so a group's bytes outlive the group. `read` must stay
// callable until the destructor returns.
class TrafficSource {
 public:
  TrafficSource(TrafficBackend backend, std::function<Traffic()> read);
  ~TrafficSource();
  TrafficSource(const TrafficSource&) = delete;
  TrafficSource& operator=(const TrafficSource&) = delete;

 private:
  TrafficBackend backend_;
  std::function<Traffic()> read_;
};

}  // namespace gradmesh::comm
