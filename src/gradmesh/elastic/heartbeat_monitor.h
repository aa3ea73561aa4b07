// The launcher's side of worker heartbeats (elastic/heartbeat.h): reads the
// heartbeat keys of this node's workers and says which ones are hung.
//
// Every "last changed" is this launcher's own steady clock at the poll that
// saw the change; clocks of other machines are never compared. A worker is
// judged only after its first heartbeat (setup time does not count), and is
// hung when its key has not changed for the timeout (the process is stopped
// or frozen: "heartbeat stopped"), or when beats continue but its progress
// counter has not changed for the timeout ("stuck": e.g. in a collective).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gradmesh/comm/store.h"

namespace gradmesh::elastic {

struct WatchedWorker {
  int rank = 0;
  pid_t pid = -1;
  int generation = 0;  // the generation it was started in
};

struct HungWorker {
  int rank = 0;
  pid_t pid = -1;
  int64_t step = -1;
  bool heartbeat_stopped = false;  // false: beats continue, progress does not
};

class HeartbeatMonitor {
 public:
  using Clock = std::chrono::steady_clock;

  HeartbeatMonitor(comm::Store& store, std::string run_id, std::chrono::milliseconds timeout);

  // Reads the workers' keys (under `current_generation` when a worker already
  // publishes there after re-forming in place, else under its own) and returns
  // the hung ones: the ones whose heartbeat stopped, else, when only stuck
  // workers are left, those with the lowest step (the ones the others wait for).
  std::vector<HungWorker> poll(const std::vector<WatchedWorker>& workers, int current_generation,
                               Clock::time_point now);
  // A replaced worker starts afresh.
  void forget(int rank) { seen_.erase(rank); }
  // The highest step any worker reported; -1 when none did.
  int64_t last_step() const { return last_step_; }

 private:
  struct Seen {
    std::string value;
    int64_t progress = -1;
    int64_t step = -1;
    Clock::time_point changed{};
    Clock::time_point progressed{};
  };
  std::optional<std::string> read(const WatchedWorker& worker, int current_generation);

  comm::Store& store_;
  std::string run_id_;
  std::chrono::milliseconds timeout_;
  std::map<int, Seen> seen_;
  int64_t last_step_ = -1;
  bool store_unreadable_ = false;  // the last poll could not read the store
};

// "rank 1 (pid 77) made no progress for 5.0 s (last step 123; heartbeat stopped)", one or several ranks.
std::string describe_hang(const std::vector<HungWorker>& hung, std::chrono::milliseconds timeout);

}  // namespace gradmesh::elastic
