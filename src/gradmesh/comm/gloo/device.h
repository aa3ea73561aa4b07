// The address a gloo rank listens on, and the Gloo TCP device bound to it.
//
// Other ranks connect to whatever address this rank publishes, so it must be
// one of this machine's addresses that they can reach. In order:
//   1. ProcessGroupOptions::hostname, if set;
//   2. GRADMESH_HOSTNAME, if set;
//   3. MASTER_ADDR, if it is an address of this machine (the master's host,
//      or every host when MASTER_ADDR is loopback);
//   4. the address this machine would use to reach MASTER_ADDR (the source
//      address of a route to it: right for a worker host on the same
//      network as the master);
//   5. this machine's host name, resolved by Gloo (which on Debian may be
//      127.0.1.1: set GRADMESH_HOSTNAME when ranks span hosts without
//      MASTER_ADDR).
#pragma once

#include <memory>
#include <string>

#include "gradmesh/comm/process_group.h"

namespace gloo::transport {
class Device;
}

namespace gradmesh::comm::gloo_backend {

// The listening address by the rules above; "" means rule 5.
std::string choose_listen_address(const ProcessGroupOptions& options);

// Whether `host` (a name or literal address) is an address of this machine.
bool is_local_address(const std::string& host);

// A Gloo TCP device listening on `address` ("" = the host name). An address
// that cannot be bound is Error(kComm) that names it and points at GRADMESH_HOSTNAME.
std::shared_ptr<gloo::transport::Device> create_device(const std::string& address);

}  // namespace gradmesh::comm::gloo_backend
