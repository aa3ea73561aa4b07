// Cross-process synchronisation for the shared-memory backend.
//
// Ranks coordinate through monotonic 32-bit counters that live in the shared
// segment: a rank publishes progress by storing a larger value into its own
// counter, and a waiter waits until the counters it depends on have reached
// a target. Waiting spins for up to 100 us (a peer that is a step behind
// usually arrives within that time, and a sleep/wake round trip costs more
// than the whole small-message collective), then sleeps on the counter with
// futex(2), so an idle rank burns no core. While it spins it yields the core
// (sched_yield) only when the rank it waits for last published from this
// same CPU, i.e. is probably queued behind the waiter. Every sleep is bounded (at
// most 100 ms) so the waiter can check its deadline, whether the ranks it
// waits for are still alive, and whether another rank aborted the group.
//
// Memory ordering: a publisher writes its data, then stores the counter with
// release (seq_cst) semantics; a waiter that observes the value with acquire
// semantics sees the data. The futex handshake is a Dekker pattern on
// (value, waiters): the publisher stores value then reads waiters, the waiter
// increments waiters then reads value, both seq_cst, so either the waiter sees
// the new value or the publisher sees the waiter and wakes it.
//
// Counters wrap at 2^32; comparisons are modular, which is exact while ranks
// are fewer than 2^31 steps apart (they are never more than a few apart).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

namespace gradmesh::comm::shm {

using Clock = std::chrono::steady_clock;

// One counter per cache line, so ranks publishing their own counters never
// contend for a line. Lives in shared memory; zero-filled memory is a valid
// initial state (value 0, no waiters).
struct alignas(64) SharedCounter {
  std::atomic<uint32_t> value;
  std::atomic<uint32_t> waiters;
  // 1 + the CPU its writer last published from (0: not known yet). A hint
  // for waiters (see wait_reached), so it is read and written relaxed.
  std::atomic<int32_t> cpu;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be lock-free");
static_assert(sizeof(SharedCounter) == 64);

// now + timeout, saturating (a timeout of Millis::max() means "never").
inline Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  const Clock::time_point now = Clock::now();
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now))
    return Clock::time_point::max();
  return now + timeout;
}

// Whether `value` has reached `target` (modular, see above).
inline bool reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

// Stores `value` and wakes every waiter. REQUIRES: only one writer of the counter at a time.
void publish(SharedCounter& counter, uint32_t value);
// Atomically adds `delta` (several writers allowed) and wakes every waiter; returns the new value.
uint32_t publish_add(SharedCounter& counter, uint32_t delta);
// Wakes every sleeping waiter without changing the value (they recheck their
// conditions); one that is about to sleep notices within its bounded sleep.
void wake_all(SharedCounter& counter);

// Called while a wait blocks; either may throw to abandon the wait.
class WaitHooks {
 public:
  virtual ~WaitHooks() = default;
  // After every sleep that did not end the wait (cheap checks: an abort flag, a shutdown flag).
  virtual void after_sleep() = 0;
  // About every 100 ms; `pending` are the indices of the counters still short of the target.
  virtual void periodic(std::span<const int> pending) = 0;
};

// Waits until every counters[i] has reached `target`. Returns true when they
// have, false when `deadline` passed first (the hooks' exceptions propagate).
bool wait_reached(std::span<SharedCounter* const> counters, uint32_t target, Clock::time_point deadline,
                  WaitHooks& hooks);

// A process, identified so that a reused pid is not mistaken for it.
struct ProcessIdentity {
  int32_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (clock ticks since boot)
};
ProcessIdentity this_process();
// False once the process exited (also while it is an unreaped zombie) or its pid was reused.
// REQUIRES: the process is in this process's pid namespace.
bool process_alive(const ProcessIdentity& process);

}  // namespace gradmesh::comm::shm
