#include "gradmesh/pytorch/completion.h"

#include <ATen/core/ivalue.h>

#include <condition_variable>
#include <deque>
#include <stdexcept>
#include <thread>

namespace gradmesh::pytorch {

namespace {

// Threads that complete futures. A task may block (a callback waiting for
// another collective), so a task posted while no thread is idle gets a new
// thread; idle threads wait for the next task. The pool lives as long as the
// process: its threads are detached and never joined.
class CompletionThreads {
 public:
  static CompletionThreads& instance() {
    static auto* pool = new CompletionThreads();
    return *pool;
  }
  void post(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
    if (idle_ == 0) {
      std::thread([this] { serve(); }).detach();
    } else {
      wake_.notify_one();
    }
  }

 private:
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ++idle_;
      wake_.wait(lock, [this] { return !tasks_.empty(); });
      --idle_;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  int idle_ = 0;
};

}  // namespace

GradmeshWork::GradmeshWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type), outputs_(std::move(outputs)) {}

c10::intrusive_ptr<c10::ivalue::Future> GradmeshWork::getFuture() {
  std::lock_guard<std::mutex> lock(future_mutex_);
  if (!future_) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    if (finishing_) complete_future(future_);  // no callback can be on it yet
  }
  return future_;
}

void GradmeshWork::complete_future(const c10::intrusive_ptr<c10::ivalue::Future>& future) const {
  if (failure_)
    future->setError(failure_);
  else
    future->markCompleted(c10::IValue(outputs_));
}

void GradmeshWork::complete(std::exception_ptr error) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(future_mutex_);
    if (finishing_) return;
    failure_ = error;
    finishing_ = true;
    future = future_;
  }
  if (!future) {
    finish(error);
    return;
  }
  c10::intrusive_ptr<GradmeshWork> self = c10::intrusive_ptr<GradmeshWork>::reclaim_copy(this);
  CompletionThreads::instance().post([self, future, error] {
    try {
      self->complete_future(future);
    } catch (...) {  // a callback that threw: its own future carries it; the work still ends
    }
    self->finish(error);
  });
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
      RawWrites raw;  // this thread's autograd state is not the caller's
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
