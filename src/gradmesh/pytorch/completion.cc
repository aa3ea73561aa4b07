#include "gradmesh/pytorch/completion.h"

#include <ATen/core/ivalue.h>

#include <stdexcept>

namespace gradmesh::pytorch {

GradmeshWork::GradmeshWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type), outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void GradmeshWork::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return;
  }
  // The future first: a thread woken by finish() may read it at once.
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
  finish(error);
}

std::shared_ptr<Completion> Completion::make(c10::intrusive_ptr<GradmeshWork> work) {
  return std::shared_ptr<Completion>(new Completion(std::move(work)));
}

Tensor& Completion::hold(const Staged& staged, Tensor lent) {
  held_.push_back(staged.user);
  held_.push_back(staged.buffer);
  lent_.push_back(std::move(lent));
  return lent_.back();
}

Tensor& Completion::lend_native(const Staged& staged) { return hold(staged, pytorch::lend_native(staged)); }
Tensor& Completion::lend_bytes(const Staged& staged) { return hold(staged, pytorch::lend_bytes(staged)); }

void Completion::track(const std::shared_ptr<comm::Work>& part) {
  pending_.fetch_add(1);
  auto self = shared_from_this();
  // on_finish may run the callback at once (an operation that ran inline).
  part->on_finish([self, part] { self->part_done(part->error()); });
}

c10::intrusive_ptr<c10d::Work> Completion::seal() {
  c10::intrusive_ptr<c10d::Work> work = work_;
  part_done(nullptr);
  return work;
}

void Completion::part_done(std::exception_ptr error) {
  if (error) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!first_error_) first_error_ = error;
  }
  if (pending_.fetch_sub(1) != 1) return;
  std::exception_ptr failure;
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    failure = first_error_;
  }
  if (!failure && then_) {
    try {
      then_();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (failure && !note_.empty()) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      failure = std::make_exception_ptr(std::runtime_error(e.what() + note_));
    } catch (...) {
    }
  }
  then_ = nullptr;  // drops the tensors it holds
  lent_.clear();
  held_.clear();
  work_->complete(failure);
}

}  // namespace gradmesh::pytorch
