#include "gradmesh/comm/op_queue.h"

#include "gradmesh/core/error.h"

namespace gradmesh::comm {

OpQueue::OpQueue(std::string group_name) : name_(std::move(group_name)), thread_([this] { run(); }) {}

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (Item& item : items_)
    item.work->finish(std::make_exception_ptr(
        Error(ErrorKind::kComm, name_ + ": " + item.work->description() + " cancelled: the group was shut down")));
}

std::exception_ptr OpQueue::broken_error_locked() const {
  return std::make_exception_ptr(Error(ErrorKind::kComm, name_ + " is broken: " + broken_reason_));
}

std::shared_ptr<Work> OpQueue::enqueue(const std::string& description, std::function<void()> body) {
  auto work = std::make_shared<Work>(description);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_reason_.empty()) {
      work->finish(broken_error_locked());
      return work;
    }
    items_.push_back({work, std::move(body)});
  }
  wake_.notify_one();
  return work;
}

bool OpQueue::broken() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !broken_reason_.empty();
}

void OpQueue::mark_broken(const std::string& reason) {
  std::deque<Item> failed;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_reason_.empty()) broken_reason_ = reason;
    failed.swap(items_);
    error = broken_error_locked();
  }
  for (Item& item : failed) item.work->finish(error);
}

void OpQueue::run() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !items_.empty(); });
      if (stopping_) return;
      item = std::move(items_.front());
      items_.pop_front();
    }
    item.work->start();
    try {
      item.body();
      item.work->finish();
    } catch (const std::exception& e) {
      // Broken first, so whoever sees the failed Work also sees broken() == true.
      mark_broken(item.work->description() + " failed: " + e.what());
      item.work->finish(std::current_exception());
    }
  }
}

}  // namespace gradmesh::comm
