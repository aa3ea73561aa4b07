#include "gradmesh/comm/shm/sync.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>

#include "gradmesh/core/parse_number.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace gradmesh::comm::shm {
namespace {

// Waiting has two stages. Up to 100 us, spin: a peer that is a step behind
// on another core arrives within that time. While spinning, yield the core
// only to a peer that last published from this waiter's CPU: on a machine
// with more runnable threads than cores it may be queued behind us, and
// yielding lets it run (measured on 2 busy cores, spinning without yielding
// made 64 KB all-reduces 4x slower whenever the scheduler put both ranks on
// one core). A peer that last ran on another CPU is running, or was
// preempted there, and a yield would only hand this core to an unrelated
// process until the scheduler takes it back (a time slice, ~0.7 ms here).
// The hint can be stale (the peer moved to this CPU since it published); the
// spin's bound caps what that costs. After 100 us, sleep on the futex: a
// peer that late is not coming soon, and an idle rank must not burn a core.
constexpr auto kPureSpin = std::chrono::microseconds(2);  // before yielding to a co-located peer
constexpr auto kSpin = std::chrono::microseconds(100);
constexpr int kPausesPerClockRead = 16;
// The longest single sleep: bounds how late a deadline, a dead peer or an
// abort is noticed.
constexpr auto kMaxSleep = std::chrono::milliseconds(100);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

uint32_t* futex_word(SharedCounter& counter) { return reinterpret_cast<uint32_t*>(&counter.value); }

// Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
void futex_wake(SharedCounter& counter) {
  syscall(SYS_futex, futex_word(counter), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void futex_sleep(SharedCounter& counter, uint32_t seen, Clock::duration limit) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(limit).count();
  timespec relative{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  // EAGAIN (value already changed), EINTR and ETIMEDOUT all mean: look again.
  syscall(SYS_futex, futex_word(counter), FUTEX_WAIT, seen, &relative, nullptr, 0);
}

// Index of the first counter short of the target, or -1.
int first_pending(std::span<SharedCounter* const> counters, uint32_t target) {
  for (size_t i = 0; i < counters.size(); ++i)
    if (!reached(counters[i]->value.load(std::memory_order_acquire), target)) return static_cast<int>(i);
  return -1;
}

// Sleeps on one counter until it changes, `limit` passes or a wake arrives.
void sleep_on(SharedCounter& counter, uint32_t target, Clock::duration limit) {
  counter.waiters.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t seen = counter.value.load(std::memory_order_seq_cst);
  if (!reached(seen, target)) futex_sleep(counter, seen, limit);
  counter.waiters.fetch_sub(1, std::memory_order_seq_cst);
}

struct ProcStat {
  char state = '?';
  uint64_t start_time = 0;
};

// Fields 3 (state) and 22 (starttime) of /proc/<pid>/stat. Field 2 (the
// command name) may contain spaces and parentheses, so parsing starts after
// the last ')'.
std::optional<ProcStat> read_proc_stat(const std::string& path) {
  std::ifstream file(path);
  if (!file) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 1));
  ProcStat stat;
  std::string field;
  for (int index = 3; index <= 22 && (fields >> field); ++index) {
    if (index == 3) stat.state = field.empty() ? '?' : field[0];
    if (index == 22) stat.start_time = static_cast<uint64_t>(try_parse_int(field, 0).value_or(0));  // 0: unknown
  }
  return stat;
}

// 1 + the CPU this thread runs on now (0 when unknown); cheap (rseq / vDSO).
int32_t cpu_hint() {
  const int cpu = sched_getcpu();
  return cpu < 0 ? 0 : cpu + 1;
}

}  // namespace

void publish(SharedCounter& counter, uint32_t value) {
  counter.cpu.store(cpu_hint(), std::memory_order_relaxed);
  counter.value.store(value, std::memory_order_seq_cst);
  if (counter.waiters.load(std::memory_order_seq_cst) != 0) futex_wake(counter);
}

uint32_t publish_add(SharedCounter& counter, uint32_t delta) {
  const uint32_t now = counter.value.fetch_add(delta, std::memory_order_seq_cst) + delta;
  if (counter.waiters.load(std::memory_order_seq_cst) != 0) futex_wake(counter);
  return now;
}

void wake_all(SharedCounter& counter) {
  // A waiter that registers just after this check sleeps at most one bounded
  // sleep before it rechecks whatever changed.
  if (counter.waiters.load(std::memory_order_seq_cst) != 0) futex_wake(counter);
}

bool wait_reached(std::span<SharedCounter* const> counters, uint32_t target, Clock::time_point deadline,
                  WaitHooks& hooks) {
  int pending = first_pending(counters, target);
  if (pending < 0) return true;

  const Clock::time_point start = Clock::now();
  const int32_t here = cpu_hint();
  for (;;) {
    // Look at the counters after every pause: one pause takes ~140 cycles on
    // recent Intel cores, so checking only every 64 pauses noticed a peer up
    // to ~3 us late (a 4 KB all-reduce took 2.3 us). Reading the clock costs
    // more than the look, so it is read every kPausesPerClockRead pauses.
    for (int i = 0; i < kPausesPerClockRead; ++i) {
      cpu_relax();
      pending = first_pending(counters, target);
      if (pending < 0) return true;
    }
    const Clock::time_point now = Clock::now();
    if (now >= start + kSpin) break;
    if (now >= start + kPureSpin && here != 0 && counters[pending]->cpu.load(std::memory_order_relaxed) == here)
      sched_yield();
  }

  Clock::time_point next_tick = Clock::now() + kMaxSleep;
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return first_pending(counters, target) < 0;
    if (now >= next_tick) {
      std::vector<int> short_of;
      for (size_t i = 0; i < counters.size(); ++i)
        if (!reached(counters[i]->value.load(std::memory_order_acquire), target)) short_of.push_back(static_cast<int>(i));
      if (short_of.empty()) return true;
      hooks.periodic(short_of);
      next_tick = now + kMaxSleep;
    }
    sleep_on(*counters[pending], target, std::min(deadline, next_tick) - now);
    // Counters first: a wait that can complete does, even if the group is
    // being aborted (a rank that finished and left must not fail the others).
    pending = first_pending(counters, target);
    if (pending < 0) return true;
    hooks.after_sleep();
  }
}

ProcessIdentity this_process() {
  ProcessIdentity self;
  self.pid = static_cast<int32_t>(::getpid());
  if (std::optional<ProcStat> stat = read_proc_stat("/proc/self/stat")) self.start_time = stat->start_time;
  return self;
}

bool process_alive(const ProcessIdentity& process) {
  if (process.pid <= 0) return false;
  std::optional<ProcStat> stat = read_proc_stat("/proc/" + std::to_string(process.pid) + "/stat");
  if (!stat) {
    // No /proc entry: the process is gone, or /proc is not mounted; the
    // signal probe tells them apart (it counts a zombie as alive).
    return ::kill(process.pid, 0) == 0 || errno == EPERM;
  }
  if (stat->state == 'Z' || stat->state == 'X') return false;
  return process.start_time == 0 || stat->start_time == process.start_time;
}

}  // namespace gradmesh::comm::shm
