#include "gradmesh/comm/gloo/transport_access.h"

#include <fcntl.h>
#include <gloo/config.h>
#include <gloo/context.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/tcp/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/pair.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gradmesh/core/error.h"

// The protected members named below are Gloo 0.5's: another Gloo may have
// moved or renamed them, which compiles and then corrupts memory. A new Gloo
// is a deliberate port of this file (and tests/comm/gloo_*_test.cc), so the
// build stops here until the version below is raised with it.
static_assert(GLOO_VERSION_MAJOR == 0 && GLOO_VERSION_MINOR == 5,
              "comm/gloo/transport_access.cc reaches into Gloo 0.5's TCP transport: port it to this Gloo version");

namespace gradmesh::comm::gloo_backend {
namespace {

// Never instantiated: deriving only grants the right to name the protected
// member through a member pointer, which then applies to any Buffer.
class BufferAccess : public gloo::transport::Buffer {
 public:
  static void set_ptr(gloo::transport::Buffer& buffer, void* ptr) { buffer.*(&BufferAccess::ptr_) = ptr; }
};

// Never instantiated, like BufferAccess: names the protected socket member.
class PairAccess : public gloo::transport::tcp::Pair {
 public:
  static int socket_of(gloo::transport::tcp::Pair& pair) { return pair.*(&PairAccess::fd_); }
};

class LazyTcpContext final : public gloo::transport::tcp::Context {
 public:
  using gloo::transport::tcp::Context::Context;

  std::unique_ptr<gloo::transport::Pair>& getPair(int peer) override {
    auto& pair = pairs_.at(static_cast<size_t>(peer));
    if (!pair)
      throw std::runtime_error("rank " + std::to_string(rank) + " has no connection to rank " + std::to_string(peer) +
                               ": an operation used a peer its lazy connection step did not connect");
    return pair;
  }
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

// Both ends have the same address: the kernel carries it over loopback.
bool on_this_host(int fd) {
  sockaddr_storage mine{}, theirs{};
  socklen_t mine_length = sizeof mine, their_length = sizeof theirs;
  return ::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mine_length) == 0 &&
         ::getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &their_length) == 0 && same_ip(mine, theirs);
}

}  // namespace

void rebind_send_buffer(gloo::transport::Buffer& buffer, void* ptr) { BufferAccess::set_ptr(buffer, ptr); }

std::shared_ptr<gloo::transport::Context> make_lazy_tcp_context(const std::shared_ptr<gloo::transport::Device>& device,
                                                                int rank, int size) {
  auto tcp = std::dynamic_pointer_cast<gloo::transport::tcp::Device>(device);
  if (!tcp) throw_error(ErrorKind::kComm, "gloo rank " + std::to_string(rank), "lazy connections need a TCP device");
  return std::make_shared<LazyTcpContext>(std::move(tcp), rank, size);
}

PairSockets::PairSockets() { start_metering(); }

PairSockets::PairSockets(gloo::Context& context) {
  start_metering();
  std::vector<int> peers;
  for (int peer = 0; peer < context.size; ++peer)
    if (peer != context.rank) peers.push_back(peer);
  add(context, peers);
}

void PairSockets::add(gloo::Context& context, const std::vector<int>& peers) {
  std::vector<int> added;
  for (int peer : peers) {
    auto* pair = dynamic_cast<gloo::transport::tcp::Pair*>(context.getPair(peer).get());
    const int fd = pair ? PairAccess::socket_of(*pair) : -1;
    const int own = fd < 0 ? -1 : ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) {
      for (int opened : added) ::close(opened);
      throw_error(ErrorKind::kComm, "gloo rank " + std::to_string(context.rank),
                  "the connection to rank " + std::to_string(peer) + " is not an open TCP socket" +
                      (fd < 0 ? std::string() : std::string(" (") + std::strerror(errno) + ")"));
    }
    added.push_back(own);
  }
  // Decided now, while connected: a reset connection has no peer address.
  std::vector<bool> remote;
  for (int fd : added) remote.push_back(!on_this_host(fd));
  std::lock_guard<std::mutex> lock(mutex_);
  fds_.insert(fds_.end(), added.begin(), added.end());
  remote_.insert(remote_.end(), remote.begin(), remote.end());
}

PairSockets::~PairSockets() {
  meter_.reset();  // its last reading needs the sockets open
  for (int fd : fds_) ::close(fd);
}

void PairSockets::start_metering() {
  meter_ = std::make_unique<TrafficSource>(TrafficBackend::kGloo, [this] { return traffic(); });
}

Traffic PairSockets::traffic() const {
  Traffic total;
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < fds_.size(); ++i) {
    // The kernel's byte counts (Linux 4.1+); a shorter tcp_info from an older
    // kernel leaves them zero rather than failing.
    tcp_info info{};
    socklen_t length = sizeof info;
    if (::getsockopt(fds_[i], IPPROTO_TCP, TCP_INFO, &info, &length) != 0) continue;
    Traffic t;
    t.sent = info.tcpi_bytes_acked, t.received = info.tcpi_bytes_received;
    if (remote_[i]) t.inter_host_sent = t.sent, t.inter_host_received = t.received;
    total += t;
  }
  return total;
}

void PairSockets::shut_down() const {
  // Shutdown (unlike close) leaves Gloo's descriptor to Gloo, which closes it
  // when it handles the end-of-file this produces.
  std::lock_guard<std::mutex> lock(mutex_);
  for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
}

bool PairSockets::all_open() const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int fd : fds_) {
    pollfd probe{fd, POLLRDHUP, 0};
    if (::poll(&probe, 1, 0) > 0 && (probe.revents & (POLLRDHUP | POLLHUP | POLLERR))) return false;
  }
  return true;
}

bool PairSockets::all_on_this_host() const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (bool remote : remote_)
    if (remote) return false;
  return true;
}

}  // namespace gradmesh::comm::gloo_backend
