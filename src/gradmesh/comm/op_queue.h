// OpQueue: a process group's communication thread.
//
// Operations run one at a time in the order they were enqueued, which is what
// keeps every rank's sequence of collectives aligned. The first failure marks
// the queue broken: it fails every operation still queued and every later
// enqueue at once with an error that repeats the first one, so nothing waits
// on a group that can no longer make progress.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "gradmesh/comm/work.h"

namespace gradmesh::comm {

class OpQueue {
 public:
  explicit OpQueue(std::string group_name);
  // Fails queued operations (the group is shutting down) and joins the thread.
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Queues `body` (run on the communication thread) and returns its Work.
  // An exception from `body` fails the Work and breaks the queue.
  std::shared_ptr<Work> enqueue(const std::string& description, std::function<void()> body);

  bool broken() const;
  // Breaks the queue from outside (e.g. a peer was found dead).
  void mark_broken(const std::string& reason);

 private:
  struct Item {
    std::shared_ptr<Work> work;
    std::function<void()> body;
  };
  void run();
  std::exception_ptr broken_error_locked() const;

  std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Item> items_;
  std::string broken_reason_;  // empty while healthy
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace gradmesh::comm
