#pragma once
// Waiting on Gloo unbound buffers in the hand-written rings (bf16 ring,
// float reduce-scatter): an aborted wait becomes an exception naming the
// collective, and an error never frees a buffer that Gloo may still touch.

#include <gloo/transport/unbound_buffer.h>

#include <chrono>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>

namespace gradmesh::comm::gloo_backend {

inline void wait_recv_or_throw(gloo::transport::UnboundBuffer& buffer, std::chrono::milliseconds timeout,
                               const char* collective) {
  if (!buffer.waitRecv(timeout)) throw std::runtime_error(std::string(collective) + " receive was aborted");
}

inline void wait_send_or_throw(gloo::transport::UnboundBuffer& buffer, std::chrono::milliseconds timeout,
                               const char* collective) {
  if (!buffer.waitSend(timeout)) throw std::runtime_error(std::string(collective) + " send was aborted");
}

// Keeps the buffers alive for the rest of the process. Gloo cannot cancel an
// operation posted on an unbound buffer: after a wait fails (a dead peer, or
// the group shutting its sockets down), the loop thread may still complete a
// send or receive on it, so freeing it then is a use after free. A failure
// breaks the group for good, so this happens at most a few times per process.
void park_for_process_lifetime(std::initializer_list<std::unique_ptr<gloo::transport::UnboundBuffer>*> buffers);

// Runs `body`; if it throws, parks `buffers` before the error propagates.
template <class Body>
void parking_buffers_on_error(std::initializer_list<std::unique_ptr<gloo::transport::UnboundBuffer>*> buffers,
                              Body body) {
  try {
    body();
  } catch (...) {
    park_for_process_lifetime(buffers);
    throw;
  }
}

}  // namespace gradmesh::comm::gloo_backend
