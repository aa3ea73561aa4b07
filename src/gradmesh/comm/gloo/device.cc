#include "gradmesh/comm/gloo/device.h"

#include <arpa/inet.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "gradmesh/comm/gloo/messages.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm::gloo_backend {
namespace {

std::vector<sockaddr_storage> resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::vector<sockaddr_storage> addresses;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return addresses;
  for (const addrinfo* it = found; it; it = it->ai_next) {
    sockaddr_storage address{};
    std::memcpy(&address, it->ai_addr, it->ai_addrlen);
    addresses.push_back(address);
  }
  ::freeaddrinfo(found);
  return addresses;
}

socklen_t length_of(const sockaddr_storage& address) {
  return address.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

void set_port(sockaddr_storage& address, uint16_t port) {
  if (address.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6&>(address).sin6_port = htons(port);
  else
    reinterpret_cast<sockaddr_in&>(address).sin_port = htons(port);
}

// The local address of a route to `host` (a UDP connect sends nothing), or "".
std::string route_source(const std::string& host) {
  for (sockaddr_storage address : resolve(host)) {
    const int fd = ::socket(address.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    set_port(address, 9);
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), length_of(address)) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    ::close(fd);
    if (!ok) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw = local.ss_family == AF_INET6
                          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6&>(local).sin6_addr)
                          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in&>(local).sin_addr);
    if (::inet_ntop(local.ss_family, raw, text, sizeof text)) return text;
  }
  return "";
}

}  // namespace

bool is_local_address(const std::string& host) {
  for (sockaddr_storage address : resolve(host)) {
    const int fd = ::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    set_port(address, 0);
    const bool bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), length_of(address)) == 0;
    ::close(fd);
    if (bound) return true;
  }
  return false;
}

std::string choose_listen_address(const ProcessGroupOptions& options) {
  if (!options.hostname.empty()) return options.hostname;
  std::string configured = env_string("GRADMESH_HOSTNAME");
  if (!configured.empty()) return configured;
  const char* master = std::getenv("MASTER_ADDR");
  if (master && *master) {
    if (is_local_address(master)) return master;
    std::string source = route_source(master);
    if (!source.empty()) return source;
  }
  return "";
}

std::shared_ptr<gloo::transport::Device> create_device(const std::string& address) {
  // Checked here rather than left to Gloo, whose error path for an address it
  // cannot bind leaks the resolver's result and says less.
  if (!address.empty() && !is_local_address(address))
    throw_error(ErrorKind::kComm, "gloo",
                "cannot listen on '" + address +
                    "': it does not resolve to an address of this machine; set GRADMESH_HOSTNAME to an address of "
                    "this machine that the other ranks can reach");
  gloo::transport::tcp::attr attr;
  attr.hostname = address;
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw_error(ErrorKind::kComm, "gloo",
                "cannot listen on " +
                    (address.empty() ? std::string("this machine's host name") : "'" + address + "'") + ": " +
                    without_source_location(e.what()) +
                    "; set GRADMESH_HOSTNAME to an address of this machine that the other ranks can reach");
  }
}

}  // namespace gradmesh::comm::gloo_backend
