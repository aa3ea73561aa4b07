#include "gradmesh/elastic/heartbeat_monitor.h"

#include <algorithm>
#include <optional>

#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/text_format.h"
#include "gradmesh/elastic/heartbeat.h"

namespace gradmesh::elastic {

HeartbeatMonitor::HeartbeatMonitor(comm::Store& store, std::string run_id, std::chrono::milliseconds timeout)
    : store_(store), run_id_(std::move(run_id)), timeout_(timeout) {}

std::optional<std::string> HeartbeatMonitor::read(const WatchedWorker& w, int current_generation) {
  for (int generation : {current_generation, w.generation}) {
    if (generation < w.generation) continue;
    const std::string key = heartbeat_key(run_id_, generation, w.rank);
    if (store_.check({key})) return store_.get(key, comm::Millis{1000});
  }
  return std::nullopt;
}

std::vector<HungWorker> HeartbeatMonitor::poll(const std::vector<WatchedWorker>& workers, int current_generation,
                                               Clock::time_point now) {
  std::vector<HungWorker> stopped, stuck;
  for (const WatchedWorker& w : workers) {
    std::optional<std::string> value;
    try {
      value = read(w, current_generation);
    } catch (const Error& e) {
      if (!store_unreadable_) log_warn("cannot read the heartbeat of rank " + std::to_string(w.rank) + ": " + e.what());
      store_unreadable_ = true;
      return {};  // the store's trouble, not the workers': judge them once it answers again
    }
    if (store_unreadable_) {
      // The heartbeats went on while they could not be read (and a restarted
      // store may have lost them until the next beat): the silence is not theirs.
      store_unreadable_ = false;
      for (auto& [rank, seen] : seen_) seen.changed = seen.progressed = now;
    }
    const auto existing = seen_.find(w.rank);
    if (!value) {
      if (existing == seen_.end()) continue;  // no heartbeat yet: still setting up, or not publishing at all
      value = existing->second.value;
    }
    const std::optional<Heartbeat> beat = parse_heartbeat(*value);
    Seen& s = seen_[w.rank];
    if (existing == seen_.end()) s.changed = s.progressed = now;
    if (*value != s.value) {
      s.value = *value;
      s.changed = now;
      if (beat && beat->progress != s.progress) s.progressed = now;
      if (beat) s.progress = beat->progress, s.step = beat->step;
      last_step_ = std::max(last_step_, s.step);
    }
    if (now - s.changed >= timeout_) {
      stopped.push_back(HungWorker{w.rank, w.pid, s.step, true});
    } else if (now - s.progressed >= timeout_) {
      stuck.push_back(HungWorker{w.rank, w.pid, s.step, false});
    }
  }
  if (!stopped.empty()) return stopped;
  if (stuck.empty()) return {};
  const int64_t lowest =
      std::min_element(stuck.begin(), stuck.end(), [](auto& a, auto& b) { return a.step < b.step; })->step;
  std::erase_if(stuck, [lowest](const HungWorker& h) { return h.step != lowest; });
  return stuck;
}

std::string describe_hang(const std::vector<HungWorker>& hung, std::chrono::milliseconds timeout) {
  std::string text;
  for (const HungWorker& h : hung) {
    if (!text.empty()) text += ", ";
    text += "rank " + std::to_string(h.rank) + " (pid " + std::to_string(h.pid) + ")";
  }
  const HungWorker& first = hung.front();
  return text + " made no progress for " + seconds_text(timeout) + " (last step " +
         (first.step < 0 ? std::string("none") : std::to_string(first.step)) + "; " +
         (first.heartbeat_stopped ? "heartbeat stopped" : "heartbeat continues, progress stalled") + ")";
}

}  // namespace gradmesh::elastic
