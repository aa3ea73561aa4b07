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
//
// With lazy connections (pair_mesh.h) a message to a peer whose pair is not
// yet connected is held back, in posting order, and its waiter thread
// connects the pair first: the peer's first message for this rank connects it
// from the other side. Posting still returns at once, so two ranks may send
// before they receive in any pattern; the connection is bounded by the
// message's timeout.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
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
    // Lazy connections only (empty otherwise): connects the pair to `peer`
    // if it is not yet; throws when it cannot.
    std::function<void(int peer)> connect;
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
  struct Held {  // a message held back until its peer is connected
    std::shared_ptr<gloo::transport::UnboundBuffer> buffer;
    bool sending;
    uint64_t slot;
  };
  struct Peer {
    bool connected = false;  // its messages are posted as they come
    std::vector<Held> held;  // in posting order
  };
  void finish(const std::shared_ptr<Work>& work, gloo::transport::UnboundBuffer& buffer, bool sending, int peer,
              Millis timeout);
  // Connects `peer` (waiter thread) and posts the messages held for it, in order.
  void connect_and_release(int peer);
  // Fails `work` and breaks the group: `cause` happened before the transfer began.
  void fail_before_transfer(const std::shared_ptr<Work>& work, const std::exception& cause);

  const int rank_, size_;
  const Hooks hooks_;
  std::mutex mutex_;
  int64_t send_seq_ = 0, recv_seq_ = 0;
  std::vector<Waiter> waiters_;
  std::map<int, Peer> peers_;  // lazy connections only
};

}  // namespace gradmesh::comm::gloo_backend
