// Signals as bytes on a pipe, so the launcher's single event loop can poll()
// worker output, worker exits and user signals together (the self-pipe trick).
//
// While a SignalRelay exists, SIGINT, SIGTERM, SIGHUP and SIGQUIT are caught
// (to be forwarded to the workers), SIGCHLD wakes the loop when a worker exits,
// and SIGPIPE is ignored (a closed launcher stdout must not kill the launcher
// before it has stopped its workers). Handlers use SA_RESTART so blocking
// store calls are not cut short; poll() still returns because the pipe
// becomes readable.
//
// Only one SignalRelay may exist at a time (signal handlers are per process).
// Not thread-safe: construct, poll and drain from one thread.
#pragma once

#include <signal.h>

#include <cstddef>
#include <vector>

namespace gradmesh::elastic {

class SignalRelay {
 public:
  SignalRelay();
  ~SignalRelay();  // restores the previous dispositions and closes the pipe
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;

  // Readable while signals are pending.
  int fd() const { return read_fd_; }
  // The signals received since the last call, in arrival order (SIGCHLD included).
  std::vector<int> drain();

  // The signals that stop the launcher (and are forwarded to workers).
  static bool is_stop_signal(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT; }

  // In a freshly forked child, before exec: puts back the dispositions the
  // launcher had before this relay (so a SIGHUP ignored under nohup stays
  // ignored in workers, and SIGPIPE is not inherited as ignored), then sets
  // `mask`. Call with all signals blocked. Async-signal-safe.
  void restore_in_child(const sigset_t& mask) const;

 private:
  friend class RelaySignalsBlocked;
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE};
  static constexpr size_t kSignalCount = sizeof(kSignals) / sizeof(kSignals[0]);
  int read_fd_ = -1;
  int write_fd_ = -1;
  struct sigaction previous_[kSignalCount] = {};
};

// Blocks the relay's signals in the calling thread while it lives: threads
// started meanwhile (the dashboard's server and feed) inherit the mask, so
// the kernel delivers those signals to the thread that owns the relay. A
// handler running on a helper thread could write to the pipe as the relay
// closes it.
class RelaySignalsBlocked {
 public:
  RelaySignalsBlocked();
  ~RelaySignalsBlocked();  // the previous mask again
  RelaySignalsBlocked(const RelaySignalsBlocked&) = delete;
  RelaySignalsBlocked& operator=(const RelaySignalsBlocked&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace gradmesh::elastic
