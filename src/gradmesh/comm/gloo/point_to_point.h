// The gloo backend's send and recv.
//
// A message posts an unbound buffer at once on the caller's thread: it does
// not wait behind queued collectives, so two ranks may exchange messages in
// either order. A waiter thread per message then waits for the transfer and
// finishes its Work. A message matches the one with the same (peer, tag) in
// posting order; tags 0 .. 2^32-1 map onto transport slots (slots.h).
//
// A message that fails (its timeout passes, or the connection closes) breaks
// the whole group through the owner's `fail` hook: the peers see the
// connections close and fail at once instead of at their own deadlines.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gradmesh/comm/process_group.h"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}
}  // namespace gloo

namespace gradmesh::comm::gloo_backend {

class PointToPoint {
 public:
  struct Hooks {
    std::function<std::string(int rank)> rank_text;  // "2 (global rank 5)", for messages
    std::function<bool()> broken;                    // whether the group failed earlier
    // Shuts the group's connections down and marks it broken with `message`.
    std::function<void(const std::string& message)> fail;
  };

  PointToPoint(int rank, int size, Hooks hooks) : rank_(rank), size_(size), hooks_(std::move(hooks)) {}
  ~PointToPoint() { abort_pending(); }
  PointToPoint(const PointToPoint&) = delete;
  PointToPoint& operator=(const PointToPoint&) = delete;

  // Sends `tensor` to `peer` (or receives into it) over `context` (null only
  // in a group of one rank, where no peer is valid). A bad peer or tag is
  // Error(kUsage) thrown here; a transfer that fails or outlasts `timeout`
  // fails the returned Work. REQUIRES: tensor is defined.
  std::shared_ptr<Work> post(gloo::Context* context, bool sending, const Tensor& tensor, int peer, int tag,
                             Millis timeout);

  // Aborts every message still waiting and joins the waiter threads; returns
  // whether any was still waiting. For the owner's destructor.
  bool abort_pending();

 private:
  struct Waiter {  // one pending send or recv
    std::thread thread;
    std::shared_ptr<gloo::transport::UnboundBuffer> buffer;
    bool sending;
    std::shared_ptr<std::atomic<bool>> done;
  };
  void finish(const std::shared_ptr<Work>& work, gloo::transport::UnboundBuffer& buffer, bool sending, int peer,
              Millis timeout);

  const int rank_, size_;
  const Hooks hooks_;
  std::mutex mutex_;
  int64_t send_seq_ = 0, recv_seq_ = 0;
  std::vector<Waiter> waiters_;
};

}  // namespace gradmesh::comm::gloo_backend
