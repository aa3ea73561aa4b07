#include "gradmesh/elastic/signal_relay.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "gradmesh/core/error.h"

namespace gradmesh::elastic {
namespace {

// The handler's only state: where to write. -1 when no relay exists.
std::atomic<int> g_relay_write_fd{-1};

void on_signal(int sig) {
  const int saved_errno = errno;
  const int fd = g_relay_write_fd.load();
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(sig);
    // A full pipe drops the byte; the loop still wakes for the earlier ones.
    [[maybe_unused]] const ssize_t ignored = ::write(fd, &byte, 1);
  }
  errno = saved_errno;
}

}  // namespace

SignalRelay::SignalRelay() {
  GRADMESH_CHECK(g_relay_write_fd.load() < 0, "only one SignalRelay may exist at a time");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw_error(ErrorKind::kIo, "launch", std::string("pipe2: ") + std::strerror(errno));
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  g_relay_write_fd = write_fd_;
  for (size_t i = 0; i < kSignalCount; ++i) {
    struct sigaction action {};
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    if (kSignals[i] == SIGPIPE) {
      action.sa_handler = SIG_IGN;
    } else {
      action.sa_handler = on_signal;
      if (kSignals[i] == SIGCHLD) action.sa_flags |= SA_NOCLDSTOP;
    }
    ::sigaction(kSignals[i], &action, &previous_[i]);
  }
}

SignalRelay::~SignalRelay() {
  for (size_t i = 0; i < kSignalCount; ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
  g_relay_write_fd = -1;
  ::close(read_fd_);
  ::close(write_fd_);
}

RelaySignalsBlocked::RelaySignalsBlocked() {
  sigset_t relayed;
  sigemptyset(&relayed);
  for (int sig : SignalRelay::kSignals) sigaddset(&relayed, sig);
  ::pthread_sigmask(SIG_BLOCK, &relayed, &previous_);
}

RelaySignalsBlocked::~RelaySignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

std::vector<int> SignalRelay::drain() {
  std::vector<int> out;
  unsigned char buf[64];
  for (;;) {
    const ssize_t n = ::read(read_fd_, buf, sizeof buf);
    if (n > 0) {
      out.insert(out.end(), buf, buf + n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return out;  // EAGAIN: empty
    }
  }
}

void SignalRelay::restore_in_child(const sigset_t& mask) const {
  for (size_t i = 0; i < kSignalCount; ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
}

}  // namespace gradmesh::elastic
