#include "gradmesh/train/stop_request.h"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "gradmesh/core/error.h"

namespace gradmesh::train {
namespace {

std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void record_stop(int) { g_stop_requested.store(true, std::memory_order_relaxed); }

}  // namespace

void catch_stop_signal() {
  struct sigaction action = {};
  action.sa_handler = record_stop;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a blocking read or poll in a collective goes on; the loop
  // looks at the flag between steps.
  action.sa_flags = SA_RESTART;
  if (::sigaction(SIGTERM, &action, nullptr) != 0) throw_error(ErrorKind::kInternal, "sigaction(SIGTERM)", std::strerror(errno));
}

bool stop_signal_received() { return g_stop_requested.load(std::memory_order_relaxed); }

void clear_stop_signal() { g_stop_requested.store(false, std::memory_order_relaxed); }

void StopVote::begin_step(bool want_save) {
  local_ = stop_signal_received();
  save_ = want_save;
  if (group_ == nullptr || group_->size() == 1) return;
  flag_ = Tensor::from_vector({2}, {local_ ? 1.0f : 0.0f, want_save ? 1.0f : 0.0f});
  comm::AllreduceOptions options;
  options.op = comm::ReduceOp::kMax;
  work_ = group_->allreduce(flag_, options);
}

bool StopVote::finish_step() {
  if (!work_) return local_;
  std::exchange(work_, nullptr)->wait_or_throw();
  save_ = flag_.data()[1] > 0;
  return flag_.data()[0] > 0;
}

}  // namespace gradmesh::train
