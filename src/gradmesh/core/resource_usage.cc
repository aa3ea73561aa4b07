#include "gradmesh/core/resource_usage.h"

#include <sys/resource.h>

#include <array>
#include <atomic>
#include <chrono>

namespace gradmesh {
namespace {

// Static initialisation runs before main, close enough to the process's start
// for wall time measured in seconds.
const std::chrono::steady_clock::time_point kProcessStart = std::chrono::steady_clock::now();

std::array<std::atomic<uint64_t>, 2> io_counters{};

double seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; }

}  // namespace

ProcessUsage process_usage() {
  ProcessUsage u;
  u.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - kProcessStart).count();
  struct rusage r {};
  if (::getrusage(RUSAGE_SELF, &r) == 0) {
    u.cpu_seconds = seconds(r.ru_utime) + seconds(r.ru_stime);
    u.peak_rss_bytes = static_cast<int64_t>(r.ru_maxrss) * 1024;  // Linux reports KiB
  }
  return u;
}

void count_io(IoCounter counter, uint64_t bytes) {
  io_counters[static_cast<size_t>(counter)].fetch_add(bytes, std::memory_order_relaxed);
}

uint64_t io_bytes(IoCounter counter) { return io_counters[static_cast<size_t>(counter)].load(std::memory_order_relaxed); }

}  // namespace gradmesh
