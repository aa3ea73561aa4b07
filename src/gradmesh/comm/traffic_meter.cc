#include "gradmesh/comm/traffic_meter.h"

#include <array>
#include <atomic>
#include <mutex>

namespace gradmesh::comm {
namespace {

constexpr size_t kMeteredBackends = 4;

struct PushedCounts {
  std::atomic<uint64_t> sent{0}, received{0}, inter_host_sent{0}, inter_host_received{0};
};

std::array<PushedCounts, kMeteredBackends>& pushed_counts() {
  static std::array<PushedCounts, kMeteredBackends> counts;
  return counts;
}

// The live sources; a source's destructor folds its last reading into
// pushed_counts() under the same lock, so a snapshot never counts it twice or not at all.
struct Sources {
  std::mutex mutex;
  std::map<const TrafficSource*, std::pair<TrafficBackend, const std::function<Traffic()>*>> readers;
};

Sources& traffic_sources() {
  static Sources s;  // never destroyed before a static group: groups are not static
  return s;
}

void add_pushed(TrafficBackend backend, const Traffic& t) {
  PushedCounts& c = pushed_counts()[static_cast<size_t>(backend)];
  c.sent.fetch_add(t.sent, std::memory_order_relaxed);
  c.received.fetch_add(t.received, std::memory_order_relaxed);
  c.inter_host_sent.fetch_add(t.inter_host_sent, std::memory_order_relaxed);
  c.inter_host_received.fetch_add(t.inter_host_received, std::memory_order_relaxed);
}

}  // namespace

Traffic& Traffic::operator+=(const Traffic& o) {
  sent += o.sent, received += o.received;
  inter_host_sent += o.inter_host_sent, inter_host_received += o.inter_host_received;
  return *this;
}

const char* traffic_backend_name(TrafficBackend backend) {
  switch (backend) {
    case TrafficBackend::kGloo: return "gloo";
    case TrafficBackend::kShm: return "shm";
    case TrafficBackend::kMpi: return "mpi";
    case TrafficBackend::kNccl: return "nccl";
  }
  return "?";
}

void count_traffic(TrafficBackend backend, uint64_t sent, uint64_t received, bool inter_host) {
  Traffic t;
  t.sent = sent, t.received = received;
  if (inter_host) t.inter_host_sent = sent, t.inter_host_received = received;
  add_pushed(backend, t);
}

std::map<std::string, Traffic> traffic_by_backend() {
  std::array<Traffic, kMeteredBackends> totals{};
  {
    std::lock_guard<std::mutex> lock(traffic_sources().mutex);
    for (const auto& [source, reader] : traffic_sources().readers) totals[static_cast<size_t>(reader.first)] += (*reader.second)();
    for (size_t b = 0; b < kMeteredBackends; ++b) {
      const PushedCounts& c = pushed_counts()[b];
      Traffic t;
      t.sent = c.sent.load(std::memory_order_relaxed), t.received = c.received.load(std::memory_order_relaxed);
      t.inter_host_sent = c.inter_host_sent.load(std::memory_order_relaxed);
      t.inter_host_received = c.inter_host_received.load(std::memory_order_relaxed);
      totals[b] += t;
    }
  }
  std::map<std::string, Traffic> out;
  for (size_t b = 0; b < kMeteredBackends; ++b)
    if (totals[b].sent > 0 || totals[b].received > 0) out[traffic_backend_name(static_cast<TrafficBackend>(b))] = totals[b];
  return out;
}

TrafficSource::TrafficSource(TrafficBackend backend, std::function<Traffic()> read)
    : backend_(backend), read_(std::move(read)) {
  std::lock_guard<std::mutex> lock(traffic_sources().mutex);
  traffic_sources().readers[this] = {backend_, &read_};
}

TrafficSource::~TrafficSource() {
  std::lock_guard<std::mutex> lock(traffic_sources().mutex);
  traffic_sources().readers.erase(this);
  add_pushed(backend_, read_());
}

}  // namespace gradmesh::comm
