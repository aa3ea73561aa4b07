#include "gradmesh/comm/gloo/point_to_point.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "gradmesh/comm/gloo/messages.h"
#include "gradmesh/comm/gloo/slots.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm::gloo_backend {

std::shared_ptr<Work> PointToPoint::post(gloo::Context* context, bool sending, const Tensor& tensor, int peer, int tag,
                                         Millis timeout) {
  const char* name = sending ? "send" : "recv";
  if (peer < 0 || peer >= size_ || peer == rank_ || tag < 0)
    throw_error(ErrorKind::kUsage, std::string("gloo ") + name,
                (peer == rank_ ? "rank " + std::to_string(peer) + " is this rank"
                               : "peer " + std::to_string(peer) + " / tag " + std::to_string(tag) + " out of range") +
                    "; peers are the other ranks 0.." + std::to_string(size_ - 1) + ", tags >= 0");
  int64_t seq;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    seq = sending ? ++send_seq_ : ++recv_seq_;
  }
  auto work = std::make_shared<Work>(std::string(name) + " #" + std::to_string(seq) + " (" + tensor_text(tensor) +
                                     (sending ? " to rank " : " from rank ") + hooks_.rank_text(peer) + ", tag " +
                                     std::to_string(tag) + ")");
  work->start();
  if (hooks_.broken()) {
    work->finish(std::make_exception_ptr(
        Error(ErrorKind::kComm,
              "gloo " + work->description() + ": the group is broken by an earlier failure; see its error")));
    return work;
  }
  if (tensor.nbytes() == 0) {
    work->finish();
    return work;
  }
  // The waiter holds the tensor's storage until the transfer is done.
  Tensor held = tensor;
  std::shared_ptr<gloo::transport::UnboundBuffer> buffer =
      context->createUnboundBuffer(const_cast<void*>(tensor.raw()), tensor.nbytes());
  const uint64_t slot = kPointToPointSlotBase + static_cast<uint64_t>(tag);
  std::lock_guard<std::mutex> lock(mutex_);
  bool waits_for_connection = false;
  if (hooks_.connect) {
    Peer& state = peers_[peer];
    waits_for_connection = !state.connected;
    if (waits_for_connection) state.held.push_back(Held{buffer, sending, slot});
  }
  if (!waits_for_connection) {
    try {
      sending ? buffer->send(peer, slot) : buffer->recv(peer, slot);
    } catch (const std::exception& e) {
      work->finish(std::make_exception_ptr(
          Error(ErrorKind::kComm, "gloo " + work->description() + ": " + without_source_location(e.what()))));
      return work;
    }
  }
  // Reap finished waiters so a long run does not accumulate threads.
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (*it->done) {
      it->thread.join();
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread thread([this, work, buffer, held, sending, peer, timeout, done, waits_for_connection] {
    if (waits_for_connection) {
      try {
        connect_and_release(peer);
      } catch (const std::exception& e) {
        fail_before_transfer(work, e);
        *done = true;
        return;
      }
    }
    finish(work, *buffer, sending, peer, timeout);
    *done = true;
  });
  waiters_.push_back(Waiter{std::move(thread), buffer, sending, done});
  return work;
}

void PointToPoint::connect_and_release(int peer) {
  hooks_.connect(peer);  // several waiters for one peer share one connection (pair_mesh.h)
  std::lock_guard<std::mutex> lock(mutex_);
  Peer& state = peers_[peer];
  if (state.connected) return;  // another waiter released them
  state.connected = true;
  for (const Held& message : state.held)
    message.sending ? message.buffer->send(peer, message.slot) : message.buffer->recv(peer, message.slot);
  state.held.clear();
}

void PointToPoint::fail_before_transfer(const std::shared_ptr<Work>& work, const std::exception& cause) {
  const auto* error = dynamic_cast<const Error*>(&cause);
  const std::string message = "gloo " + work->description() + ": " + without_source_location(cause.what());
  hooks_.fail(message);
  work->finish(std::make_exception_ptr(Error(error ? error->kind() : ErrorKind::kComm, message)));
}

void PointToPoint::finish(const std::shared_ptr<Work>& work, gloo::transport::UnboundBuffer& buffer, bool sending,
                          int peer, Millis timeout) {
  std::string message;
  bool timed_out = false;
  try {
    const bool completed = sending ? buffer.waitSend(timeout) : buffer.waitRecv(timeout);
    if (completed) {
      work->finish();
      return;
    }
    message = "cancelled: the group was destroyed";
  } catch (const std::exception& e) {
    const std::string cause = without_source_location(e.what());
    timed_out = mentions_timeout(cause);
    message = timed_out ? "timed out after " + duration_text(timeout) + " waiting for rank " + hooks_.rank_text(peer) +
                              " to post the matching " + (sending ? "recv" : "send")
                        : "lost the connection to rank " + hooks_.rank_text(peer) + " (" + cause + ")";
  }
  message = "gloo " + work->description() + ": " + message;
  hooks_.fail(message);
  work->finish(std::make_exception_ptr(Error(timed_out ? ErrorKind::kTimeout : ErrorKind::kComm, message)));
}

bool PointToPoint::abort_pending() {
  std::lock_guard<std::mutex> lock(mutex_);
  bool pending = false;
  for (Waiter& waiter : waiters_) {
    if (!*waiter.done) {
      pending = true;
      waiter.sending ? waiter.buffer->abortWaitSend() : waiter.buffer->abortWaitRecv();
    }
    waiter.thread.join();
  }
  waiters_.clear();
  return pending;
}

}  // namespace gradmesh::comm::gloo_backend
