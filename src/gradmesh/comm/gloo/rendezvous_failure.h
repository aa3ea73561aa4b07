// Why a Gloo rendezvous failed, in words a user can act on. Gloo reports the
// failed system call ("bind: Address already in use"); at scale the cause is
// usually a resource the full mesh exhausts rather than the network, so the
// hint names it with the numbers that decide it.
#pragma once

#include <string>

namespace gradmesh::comm::gloo_backend {

// The advice appended to a rendezvous failure whose Gloo message is
// `message`, for a group of `ranks` ranks building `meshes` full meshes:
// - out of local TCP ports (EADDRINUSE / EADDRNOTAVAIL on bind or connect):
//   the connections such a group opens on one host against the ephemeral
//   range read from `port_range_file` (net.ipv4.ip_local_port_range);
// - out of file descriptors (EMFILE): the per-process limit;
// - anything else: reachability (GRADMESH_HOSTNAME, firewalls).
std::string rendezvous_failure_hint(const std::string& message, int ranks, int meshes,
                                    const std::string& port_range_file = "/proc/sys/net/ipv4/ip_local_port_range");

}  // namespace gradmesh::comm::gloo_backend
