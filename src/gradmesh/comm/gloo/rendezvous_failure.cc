#include "gradmesh/comm/gloo/rendezvous_failure.h"

#include <sys/resource.h>

#include <cstdint>
#include <fstream>

namespace gradmesh::comm::gloo_backend {

std::string rendezvous_failure_hint(const std::string& message, int ranks, int meshes,
                                    const std::string& port_range_file) {
  const bool out_of_ports = message.find("Address already in use") != std::string::npos ||
                              message.find("Cannot assign requested address") != std::string::npos;
  if (out_of_ports) {
    const int64_t connections = static_cast<int64_t>(ranks) * (ranks - 1) / 2 * meshes;
    std::string range = "an ephemeral port range this host did not report";
    std::ifstream in(port_range_file);
    int64_t lo = 0, hi = 0;
    if (in >> lo >> hi && hi >= lo)
      range = std::to_string(hi - lo + 1) + " ephemeral ports (net.ipv4.ip_local_port_range " + std::to_string(lo) +
              "-" + std::to_string(hi) + ")";
    return "; this host ran out of local TCP ports: every rank connects to each of the other " +
           std::to_string(ranks - 1) + " ranks (" + std::to_string(meshes) + (meshes == 1 ? " mesh" : " meshes") +
           "), " + std::to_string(connections) + " connections if all " + std::to_string(ranks) +
           " ranks share one host, against " + range +
           "; connect pairs only when they are used (GRADMESH_GLOO_LAZY=1), run fewer ranks per host, use the " +
           "hier backend (one Gloo rank per host), or widen the range";
  }
  if (message.find("Too many open files") != std::string::npos) {
    rlimit limit{};
    const std::string cap = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                                ? std::to_string(limit.rlim_cur)
                                : "unknown";
    return "; this process ran out of file descriptors (RLIMIT_NOFILE " + cap + "): each rank holds one socket per peer " +
           "per mesh, " + std::to_string(static_cast<int64_t>(ranks - 1) * meshes) +
           " here; raise the limit (ulimit -n) or run fewer ranks per group";
  }
  return "; check that the ranks can reach each other's addresses (GRADMESH_HOSTNAME) and that no firewall blocks TCP";
}

}  // namespace gradmesh::comm::gloo_backend
