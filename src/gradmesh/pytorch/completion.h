// The torch Work a gradmesh operation returns, and what finishes it.
//
// One torch operation may issue several gradmesh operations (an all-to-all
// is a send and a receive per peer; a reduction of int64 is an all-gather),
// and may have work left after they finish (copying into non-contiguous
// outputs, reducing gathered values). A Completion counts the gradmesh
// operations it tracks; when the last one finishes it runs that remaining
// work, then finishes the torch Work, with the first error if any part
// failed, on the thread that finished the last part (the group's
// communication thread, or a message's waiter).
//
// The future is another matter: its callbacks are the script's (DDP's
// hooks), and one may issue a collective on the same group and wait for it,
// as torch's PowerSGD hook does. Run on the communication thread, that
// callback would wait for an operation queued behind itself. So a future
// that exists when the work finishes is completed on a completion thread
// (a pool that grows while all its threads are busy, so nested waits never
// starve it), and the Work finishes after its future, as on Gloo. A future
// asked for after the work finished is made complete at once, and a work
// nobody asked the future of (a plain all_reduce) costs no hand-off.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "gradmesh/comm/work.h"
#include "gradmesh/core/tensor.h"
#include "gradmesh/pytorch/tensor_bridge.h"

namespace gradmesh::pytorch {

class GradmeshWork final : public c10d::Work {
 public:
  GradmeshWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // Finishes this work and its future (once).
  void complete(std::exception_ptr error);

 private:
  void complete_future(const c10::intrusive_ptr<c10::ivalue::Future>& future) const;

  std::vector<at::Tensor> outputs_;
  std::mutex future_mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // made on first request
  bool finishing_ = false;
  std::exception_ptr failure_;  // set before finishing_
};

class Completion : public std::enable_shared_from_this<Completion> {
 public:
  static std::shared_ptr<Completion> make(c10::intrusive_ptr<GradmeshWork> work);

  // Lends a staged buffer to gradmesh, in its own dtype or as bytes
  // (tensor_bridge.h), and holds it, and the gradmesh tensor at a stable
  // address (groups take tensors by reference), until the operation finishes.
  Tensor& lend_native(const Staged& staged);
  Tensor& lend_bytes(const Staged& staged);
  // Runs after every tracked part succeeded, before the torch Work finishes;
  // an exception from it fails the Work.
  void then(std::function<void()> step) { then_ = std::move(step); }
  // Appended to the message of an error that fails the Work.
  void note_on_failure(std::string note) { note_ = std::move(note); }
  // Counts `part` until it finishes.
  void track(const std::shared_ptr<comm::Work>& part);
  // No more parts: the Work finishes when the tracked ones have (at once if none).
  c10::intrusive_ptr<c10d::Work> seal();

 private:
  explicit Completion(c10::intrusive_ptr<GradmeshWork> work) : work_(std::move(work)) {}
  void part_done(std::exception_ptr error);

  c10::intrusive_ptr<GradmeshWork> work_;
  Tensor& hold(const Staged& staged, Tensor lent);
  std::deque<Tensor> lent_;
  std::vector<at::Tensor> held_;
  std::function<void()> then_;
  std::string note_;
  std::atomic<int> pending_{1};  // the seal counts as one
  std::mutex error_mutex_;
  std::exception_ptr first_error_;
};

}  // namespace gradmesh::pytorch
