// What the dashboard streams: the launcher's own state changes and, once
// rank 0 said where it is, every line of the run's metrics.jsonl as it is
// written. Rank 0 publishes the file's path in the store (a launcher does
// not know where the worker command keeps its run); the agent on the host
// that has the file follows it, the others show their own state only.
//
// Key: <run_id>/metrics_path, the absolute path of metrics.jsonl.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gradmesh/comm/store.h"
#include "gradmesh/elastic/agent_status.h"

namespace gradmesh::obs {
class RunLogReader;
}

namespace gradmesh::elastic {

std::string metrics_path_key(const std::string& run_id);
void publish_metrics_path(comm::Store& store, const std::string& run_id, const std::string& path);

class MetricsFeed {
 public:
  struct Event {
    std::string name;  // "agent" or "metrics"
    std::string data;  // one JSON object
  };

  // Follows the run from a thread of its own, polling every `interval`;
  // `store_endpoint`: the launcher's store (a connection of its own). Past
  // every `thinning_step` bytes of history, half as many step lines as
  // before are kept (metrics_feed.cc).
  MetricsFeed(std::string store_endpoint, std::string run_id, std::shared_ptr<const AgentStatus> status,
              std::chrono::milliseconds interval = std::chrono::milliseconds(250),
              size_t thinning_step = size_t{32} << 20);
  ~MetricsFeed();
  MetricsFeed(const MetricsFeed&) = delete;
  MetricsFeed& operator=(const MetricsFeed&) = delete;

  // The events from `next` on, waiting up to `timeout` while there are none;
  // advances `next` past them. Empty when the wait ran out, the feed stops
  // or it has ended; `*over`, when given, tells whether the feed has ended
  // and `next` is past its last event (nothing will follow).
  std::vector<Event> events_since(size_t& next, std::chrono::milliseconds timeout, bool* over = nullptr);
  // The run is over (the launcher's status says finished): one last read of
  // the store's path, the file to its end and the agent's states, so the
  // final lines and the `finished` event are the feed's last events; then
  // ended() is true and the feed reads nothing more. Waits at most `budget`
  // (a store that does not answer); returns whether the last read completed.
  bool finish(std::chrono::milliseconds budget);
  bool ended() const;
  // The run's figures in Prometheus's text format (obs/run_exposition.h),
  // with the agent's own.
  std::string prometheus_text() const;
  const std::string& run_id() const { return run_id_; }
  bool stopping() const;

 private:
  void loop();
  void poll();
  void drain();
  void append_agent_states();
  void read_published_path();
  bool follow_file();  // true when it read all there was
  void append(Event event);  // REQUIRES: mutex_ held

  std::string endpoint_, run_id_;
  std::shared_ptr<const AgentStatus> status_;
  std::chrono::milliseconds interval_;
  size_t thinning_step_;
  std::shared_ptr<comm::Store> store_;  // opened on the feed's thread
  size_t agent_seen_ = 0;
  std::chrono::steady_clock::time_point next_path_check_{};
  std::string path_;      // of metrics.jsonl, once published
  uint64_t offset_ = 0;   // bytes of it consumed (complete lines only)
  std::string partial_;   // a line still being written

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Event> events_;
  size_t bytes_ = 0;            // of events_
  uint64_t steps_seen_ = 0;     // step lines appended or thinned out
  bool keep_interval_ = true;   // the last step line was kept: keep its usage line too
  std::unique_ptr<obs::RunLogReader> reader_;
  bool stopping_ = false;
  bool finish_requested_ = false;
  bool ended_ = false;
  bool warned_ = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace gradmesh::elastic
