// SIGPIPE held back on one thread for one scope.
//
// A write(2) or send(2) without MSG_NOSIGNAL on a connection the peer has
// reset raises SIGPIPE, whose default action kills the whole process instead
// of letting the caller report a lost connection. Client libraries that write
// that way (hiredis, OpenSSL's socket BIO, cpp-httplib as Debian builds it)
// run their calls inside a ScopedSigpipeBlock: the signal is blocked on this
// thread, a SIGPIPE the scope caused is consumed, and the thread's mask and
// the process's disposition (which other code may rely on) are left as they
// were.
#pragma once

#include <signal.h>

namespace gradmesh {

class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock();
  ~ScopedSigpipeBlock();
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_mask_;
  bool was_pending_ = false;  // a SIGPIPE pending before the scope is not ours to consume
};

}  // namespace gradmesh
