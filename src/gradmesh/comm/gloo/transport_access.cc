#include "gradmesh/comm/gloo/transport_access.h"
#include "gradmesh/core/parse_number.h"

#include <dirent.h>
#include <gloo/context.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/address.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <poll.h>
#include <sys/stat.h>

#include <cstdlib>
#include <limits>
#include <optional>
#include <cstring>
#include <functional>
#include <vector>

namespace gradmesh::comm::gloo_backend {
namespace {

// Never instantiated: deriving only grants the right to name the protected
// member through a member pointer, which then applies to any Buffer.
class BufferAccess : public gloo::transport::Buffer {
 public:
  static void set_ptr(gloo::transport::Buffer& buffer, void* ptr) { buffer.*(&BufferAccess::ptr_) = ptr; }
};

bool same_ip(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
  }
  return false;
}

in_port_t port_of(const sockaddr_storage& address) {
  return address.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(address).sin6_port
                                       : reinterpret_cast<const sockaddr_in&>(address).sin_port;
}

bool same_endpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  return same_ip(a, b) && port_of(a) == port_of(b);
}

// A connected (not listening) TCP socket whose local address is one of `locals`.
bool is_pair_socket(int fd, const std::vector<sockaddr_storage>& locals) {
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) return false;
  int listening = 0;
  socklen_t length = sizeof listening;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) != 0 || listening) return false;
  sockaddr_storage local{};
  length = sizeof local;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) return false;
  for (const sockaddr_storage& wanted : locals)
    if (same_endpoint(local, wanted)) return true;
  return false;
}

}  // namespace

void rebind_send_buffer(gloo::transport::Buffer& buffer, void* ptr) { BufferAccess::set_ptr(buffer, ptr); }

namespace {

// Calls fn(fd) for every open socket of `context`'s pairs; returns how many.
int for_each_pair_socket(gloo::Context& context, const std::function<void(int)>& fn) {
  std::vector<sockaddr_storage> locals;
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank) continue;
    auto& pair = context.getPair(peer);
    if (!pair) continue;
    const auto* address = dynamic_cast<const gloo::transport::tcp::Address*>(&pair->address());
    if (address) locals.push_back(address->getSockaddr());
  }
  if (locals.empty()) return 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return 0;
  const int own = ::dirfd(dir);
  int found = 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::optional<int64_t> number = try_parse_int(entry->d_name, 0, std::numeric_limits<int>::max());
    if (!number) continue;  // ".", ".."
    const int fd = static_cast<int>(*number);
    if (fd != own && is_pair_socket(fd, locals)) {
      ++found;
      fn(fd);
    }
  }
  ::closedir(dir);
  return found;
}

}  // namespace

void shut_down_connections(gloo::Context& context) {
  // Shutdown (unlike close) leaves the descriptor to Gloo, which closes it
  // when it handles the end-of-file this produces.
  for_each_pair_socket(context, [](int fd) { ::shutdown(fd, SHUT_RDWR); });
}

bool all_connections_open(gloo::Context& context) {
  int hung_up = 0;
  const int found = for_each_pair_socket(context, [&](int fd) {
    pollfd probe{fd, POLLRDHUP, 0};
    if (::poll(&probe, 1, 0) > 0 && (probe.revents & (POLLRDHUP | POLLHUP | POLLERR))) ++hung_up;
  });
  return found == context.size - 1 && hung_up == 0;
}

bool all_peers_on_this_host(gloo::Context& context) {
  int local = 0;
  const int found = for_each_pair_socket(context, [&](int fd) {
    sockaddr_storage mine{}, theirs{};
    socklen_t mine_length = sizeof mine, their_length = sizeof theirs;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mine_length) == 0 &&
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &their_length) == 0 && same_ip(mine, theirs))
      ++local;
  });
  return found == context.size - 1 && local == found;
}

}  // namespace gradmesh::comm::gloo_backend
