#include "gradmesh/elastic/supervisor.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>
#include <string_view>

#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/core/text_format.h"
#include "gradmesh/elastic/heartbeat_monitor.h"
#include "gradmesh/elastic/peer_watch.h"

namespace gradmesh::elastic {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// Upper bound on one poll: how often grace deadlines and peers are checked.
constexpr Millis kTick{250};
constexpr Millis kPeerCheckInterval{500};
constexpr Millis kHeartbeatPollInterval{500};

std::string workers_text(int n) { return std::to_string(n) + (n == 1 ? " worker" : " workers"); }

class Supervisor {
 public:
  Supervisor(WorkerGroup& group, SignalRelay& relay, const SupervisorSettings& settings)
      : group_(group), relay_(relay), settings_(settings), generation_(settings.generation) {
    if (settings.peers != nullptr)
      peers_ = std::make_unique<PeerWatch>(*settings.peers, settings.node_rank, settings.nnodes,
                                           settings.heartbeat_timeout, settings.store_timeout, settings.republish);
    if (settings.store != nullptr && settings.heartbeat_timeout.count() > 0)
      monitor_ = std::make_unique<HeartbeatMonitor>(*settings.store, settings.run_id, settings.heartbeat_timeout);
    for (const RunningWorker& w : group.running_workers()) current_rank_[w.rank] = w.rank;
  }

  GroupOutcome run() {
    while (!group_.all_exited() || blame_deadline_) {
      Millis timeout = kTick;
      if (stopping_ && !killed_ && !group_.all_exited())
        timeout = std::clamp(std::chrono::duration_cast<Millis>(deadline_ - Clock::now()), Millis{0}, kTick);
      for (const WorkerExit& exit : group_.pump(timeout, relay_.fd())) on_worker_exit(exit);
      for (int sig : relay_.drain()) on_signal(sig);
      if (!stopping_) check_peers();
      if (blame_deadline_) settle_blame();
      if (!stopping_) follow_generation();
      if (!stopping_) check_heartbeats();
      escalate_if_due();
    }
    return outcome();
  }

 private:
  enum class Cause { kNone, kWorker, kHang, kSignal, kPeer, kStore };

  void begin_stop(Cause cause, int sig) {
    cause_ = cause;
    stop_signal_ = sig;
    stopping_ = true;
    if (failure_unix_ms_ == 0) failure_unix_ms_ = unix_millis();
    refresh_last_step();  // before the workers stop: outcome() records it
    others_stopped_ = group_.running();
    deadline_ = Clock::now() + settings_.grace_period;
    group_.signal_all(sig);
    group_.signal_all(SIGCONT);  // a stopped (SIGSTOP) worker can only act on the signal once continued
    if (cause == Cause::kPeer || cause == Cause::kStore || peers_ == nullptr) return;
    if (may_be_another_nodes_fault() && settings_.heartbeat_timeout.count() > 0) {
      // The verdict waits: a node that died takes a heartbeat timeout to be found lost.
      blame_deadline_ = Clock::now() + settings_.heartbeat_timeout + 2 * kPeerCheckInterval;
      return;
    }
    publish_own_failure();
  }

  void publish_own_failure() {
    const GroupOutcome o = outcome();
    peers_->publish_failure(o.exit_code, o.record.cause, restart_record_json(o.record));
  }

  // The worker stopped because of another rank: its collective failed, or
  // it stopped with the ranks another node's launcher told to stop.
  static bool after_peer_trouble(const WorkerExit& exit) {
    const int code = shell_exit_code(exit.wait_status);
    return code == kPeerTroubleExitCode || code == kStoppedByAnotherRankExitCode;
  }
  // A worker that failed after another rank's trouble, or hangs whose
  // heartbeats go on (ranks waiting in a collective for a rank that stopped).
  bool may_be_another_nodes_fault() const {
    if (cause_ == Cause::kWorker) return after_peer_trouble(failed_);
    if (cause_ == Cause::kHang)
      return std::none_of(hung_.begin(), hung_.end(), [](const HungWorker& h) { return h.heartbeat_stopped; });
    return false;
  }
  // An exit that the stop signal this launcher sent explains.
  bool stopped_by_us(const WorkerExit& exit) const {
    const int code = shell_exit_code(exit.wait_status);
    return code == 128 + stop_signal_ || (killed_ && code == 128 + SIGKILL);
  }
  // A lost node cannot report itself: this node reports the loss as the failure.
  void publish_loss() {
    peers_->publish_failure(peer_.exit_code, peer_.reason, restart_record_json(outcome().record));
  }

  // A worker failed after a collective or store call failed, or waits in
  // one: if a node is found lost, or another node reports its failure,
  // within a heartbeat timeout, that is the cause; otherwise this node's
  // worker is.
  void settle_blame() {
    const Clock::time_point now = Clock::now();
    if (now >= *blame_deadline_) {
      blame_deadline_.reset();
      return publish_own_failure();
    }
    if (now < next_peer_check_) return;
    next_peer_check_ = now + kPeerCheckInterval;
    const std::optional<PeerFailure> failure = peers_->poll(now);
    if (!failure) return;
    blame_deadline_.reset();
    peer_ = *failure;
    if (cause_ == Cause::kSignal) return;  // told to stop meanwhile: that stays the verdict
    cause_ = peer_.store_lost ? Cause::kStore : Cause::kPeer;
    if (peer_.lost) publish_loss();
  }

  void on_worker_exit(const WorkerExit& exit) {
    if (exited_cleanly(exit.wait_status)) return;
    if (stopping_) {
      all_clean_ = false;
      // A worker of this node that failed on its own, after one that failed
      // because its collective did: the second is the cause.
      if (cause_ == Cause::kWorker && after_peer_trouble(failed_) && !after_peer_trouble(exit) &&
          !stopped_by_us(exit)) {
        failed_ = exit;
        if (blame_deadline_) {
          blame_deadline_.reset();
          publish_own_failure();
        }
      }
      return;
    }
    if (try_replace(exit)) return;
    failed_ = exit;
    begin_stop(Cause::kWorker, SIGTERM);
  }

  // In-process recovery: replace the failed worker alone when the workers
  // announced they re-form their group themselves and the budget allows.
  bool try_replace(const WorkerExit& exit) {
    if (!settings_.in_process_allowed || settings_.budget == nullptr || settings_.store == nullptr || shrunk_)
      return false;  // after a shrink a replacement's environment (the original ranks) would be wrong
    const int next = generation_ + 1;
    const std::string what = worker_text(exit);
    try {
      if (!in_process_recovery_announced(*settings_.store, settings_.run_id)) return false;
      const std::optional<int> used = settings_.budget->claim(next);
      if (!used) return false;  // budget spent: stop the group as for any failure
      refresh_last_step();
      RestartRecord record{next, exit.rank, what, shell_exit_code(exit.wait_status), unix_millis(), last_step(),
                           settings_.node_rank};
      settings_.budget->publish_record(record);
      write_current_generation(*settings_.store, settings_.run_id, next);
      say(what + "; replacing it in place (restart " + std::to_string(*used) + " of " +
          std::to_string(settings_.budget->max()) + "), the other workers keep their state");
      group_.respawn(exit.local_rank, settings_.replacement_command(exit.local_rank, next), relay_);
    } catch (const Error& e) {
      say(what + "; cannot replace it in place (" + e.what() + "); stopping the group");
      return false;
    }
    generation_ = next;
    spawned_in_[exit.rank] = next;
    if (monitor_) monitor_->forget(exit.rank);
    return true;
  }

  // In-process recovery into a smaller world: a lost node's ranks drop out,
  // the survivors keep their state and re-form as generation g+1 with ranks
  // renumbered in order (every surviving node computes the same list from
  // the rendezvous' node sizes). Needs at least MIN nodes left.
  bool try_shrink(int lost) {
    if (!settings_.in_process_allowed || settings_.budget == nullptr || settings_.store == nullptr ||
        settings_.peers == nullptr || lost < 0)
      return false;
    const int next = generation_ + 1;
    try {
      if (!in_process_recovery_announced(*settings_.store, settings_.run_id)) return false;
      if (node_of_rank_.empty()) node_of_rank_ = rank_nodes();
      std::vector<int> survivors, nodes_after;
      for (size_t r = 0; r < node_of_rank_.size(); ++r)
        if (node_of_rank_[r] != lost) survivors.push_back(static_cast<int>(r)), nodes_after.push_back(node_of_rank_[r]);
      const int live = static_cast<int>(std::set<int>(nodes_after.begin(), nodes_after.end()).size());
      if (live < std::max(1, settings_.min_nnodes)) return false;
      const std::optional<int> used = settings_.budget->claim(next);
      if (!used) return false;
      refresh_last_step();
      RestartRecord record{next, -1, peer_.reason, 1, failure_unix_ms_, last_step(), lost};
      settings_.budget->publish_record(record);
      write_surviving_ranks(*settings_.store, settings_.run_id, next, survivors);
      write_current_generation(*settings_.store, settings_.run_id, next);
      say(peer_.reason + "; going on in process with " + std::to_string(survivors.size()) +
          (survivors.size() == 1 ? " rank on " : " ranks on ") +
          std::to_string(live) + (live == 1 ? " node" : " nodes") + " (restart " + std::to_string(*used) + " of " +
          std::to_string(settings_.budget->max()) + ")");
      for (auto& [original, current] : current_rank_) {
        const auto at = std::find(survivors.begin(), survivors.end(), current);
        current = static_cast<int>(at - survivors.begin());
      }
      node_of_rank_ = nodes_after;
    } catch (const Error& e) {
      say(peer_.reason + "; cannot go on in process (" + e.what() + ")");
      return false;
    }
    generation_ = next;
    shrunk_ = true;
    peers_->forget(lost);
    peer_ = PeerFailure{};
    return true;
  }

  // The node of every rank of this generation, from the rendezvous' node sizes.
  std::vector<int> rank_nodes() const {
    std::vector<int> out;
    for (int node = 0; node < settings_.nnodes; ++node) {
      const std::string key = "node/" + std::to_string(node) + "/nproc";
      const int nproc = static_cast<int>(parse_int(settings_.peers->get(key, Millis{1000}), key, 1, 1'000'000));
      out.insert(out.end(), static_cast<size_t>(nproc), node);
    }
    return out;
  }

  void on_signal(int sig) {
    // SIGCHLD only wakes the loop; a stop signal racing the last exit has nothing left to stop.
    if (!SignalRelay::is_stop_signal(sig) || group_.all_exited()) return;
    if (!stopping_) return begin_stop(Cause::kSignal, sig);
    if (killed_) return;
    if (cause_ != Cause::kSignal) {
      // Stopping for another reason (a failure, another node) when the launcher
      // itself is told to stop (a preemption reaches every node): forward the
      // signal so workers can save their state, and do not restart afterwards.
      cause_ = Cause::kSignal;
      stop_signal_ = sig;
      group_.signal_all(sig);
      group_.signal_all(SIGCONT);
      return;
    }
    say("received " + signal_name(sig) + " again; sending SIGKILL to " + workers_text(group_.running()));
    group_.signal_all(SIGKILL);
    killed_ = true;
  }

  void escalate_if_due() {
    if (!stopping_ || killed_ || group_.all_exited() || Clock::now() < deadline_) return;
    say(workers_text(group_.running()) + " still running " + seconds_text(settings_.grace_period) + " after " +
        signal_name(stop_signal_) + "; sending SIGKILL");
    group_.signal_all(SIGKILL);
    killed_ = true;
    all_clean_ = false;
  }

  void check_peers() {
    const Clock::time_point now = Clock::now();
    if (peers_ == nullptr || now < next_peer_check_) return;
    next_peer_check_ = now + kPeerCheckInterval;
    const std::optional<PeerFailure> failure = peers_->poll(now);
    if (!failure) return;
    peer_ = *failure;
    failure_unix_ms_ = unix_millis();
    if (peer_.store_lost) return begin_stop(Cause::kStore, SIGTERM);  // nobody can be told: every node sees it
    if (peer_.lost && try_shrink(peer_.node)) return;
    begin_stop(Cause::kPeer, SIGTERM);
    if (peer_.lost) publish_loss();
  }

  // On several nodes, another node may replace one of its workers in place:
  // the job moves to its generation (this node's workers re-form under it),
  // and so do this node's heartbeat keys and the numbering of later restarts.
  void follow_generation() {
    if (!settings_.in_process_allowed || settings_.store == nullptr || settings_.nnodes == 1) return;
    const Clock::time_point now = Clock::now();
    if (now < next_generation_check_) return;
    next_generation_check_ = now + kPeerCheckInterval;
    try {
      if (settings_.store->check({settings_.run_id + "/generation"}))
        generation_ = std::max(generation_, read_current_generation(*settings_.store, settings_.run_id));
    } catch (const Error& e) {
      log_warn(std::string("cannot read the run's generation from the store: ") + e.what());
    }
  }

  void check_heartbeats() {
    const Clock::time_point now = Clock::now();
    if (monitor_ == nullptr || now < next_heartbeat_poll_) return;
    next_heartbeat_poll_ = now + kHeartbeatPollInterval;
    hung_ = monitor_->poll(watched_workers(), generation_, now);
    if (!hung_.empty()) begin_stop(Cause::kHang, SIGTERM);
  }

  std::vector<WatchedWorker> watched_workers() const {
    std::vector<WatchedWorker> watched;
    for (const RunningWorker& w : group_.running_workers()) {
      const auto it = spawned_in_.find(w.rank);
      const auto now_rank = current_rank_.find(w.rank);
      if (shrunk_ && now_rank != current_rank_.end())
        watched.push_back(WatchedWorker{now_rank->second, w.pid, generation_});
      else
        watched.push_back(WatchedWorker{w.rank, w.pid, it == spawned_in_.end() ? settings_.generation : it->second});
    }
    return watched;
  }

  std::string worker_text(const WorkerExit& w) const {
    std::string where = settings_.nnodes > 1 ? "node " + std::to_string(settings_.node_rank) + ", " : "";
    return "rank " + std::to_string(w.rank) + " (" + where + "pid " + std::to_string(w.pid) + ") " +
           describe_exit(w.wait_status);
  }

  // Reads the heartbeats again now, outside the regular polls: a failure
  // between two polls (every 0.5 s) would otherwise leave its restart record
  // without the steps a fast run trained since the last one. A hang this
  // read finds is left to the next regular poll.
  void refresh_last_step() {
    if (!monitor_) return;
    std::vector<WatchedWorker> watched = watched_workers();
    if (cause_ == Cause::kWorker && !shrunk_) {  // the failed worker's last beat counts too: its steps are lost
      const auto it = spawned_in_.find(failed_.rank);
      watched.push_back(WatchedWorker{failed_.rank, failed_.pid, it == spawned_in_.end() ? settings_.generation : it->second});
    }
    monitor_->poll(watched, generation_, Clock::now());
  }
  // The highest step any worker reported.
  int64_t last_step() const { return monitor_ ? monitor_->last_step() : -1; }

  GroupOutcome outcome() const {
    GroupOutcome o;
    o.generation = generation_;
    const std::string stopped = others_stopped_ == 0 ? "no other workers were running"
                                                     : "stopped the other " + workers_text(others_stopped_);
    switch (cause_) {
      case Cause::kNone:
        break;
      case Cause::kWorker:
        o.exit_code = shell_exit_code(failed_.wait_status);
        o.worker_failed = true;
        o.record = RestartRecord{generation_ + 1, failed_.rank, worker_text(failed_), o.exit_code, 0, 0};
        o.message = worker_text(failed_) + "; " + stopped;
        break;
      case Cause::kHang:
        o.exit_code = kHangExitCode;
        o.worker_failed = true;
        o.record = RestartRecord{generation_ + 1, hung_.size() == 1 ? hung_[0].rank : -1,
                                 describe_hang(hung_, settings_.heartbeat_timeout), o.exit_code, 0, 0};
        o.message = o.record.cause + "; stopped " + workers_text(others_stopped_);
        break;
      case Cause::kSignal:
        o.exit_code = 128 + stop_signal_;
        o.record = RestartRecord{generation_ + 1, -1,
                                 "node " + std::to_string(settings_.node_rank) + "'s launcher received " +
                                     signal_name(stop_signal_),
                                 o.exit_code, 0, 0};
        if (settings_.clean_signal_stop_succeeds && all_clean_ && group_.all_exited()) o.exit_code = 0;
        o.message = all_clean_ && group_.all_exited()
                        ? "received " + signal_name(stop_signal_) +
                              "; every worker stopped cleanly (exit 0) within the grace period"
                        : "received " + signal_name(stop_signal_) + "; forwarded it to " +
                              workers_text(others_stopped_) + " and stopped them";
        break;
      case Cause::kStore:
        o.exit_code = 1;
        o.record = RestartRecord{generation_ + 1, -1, peer_.reason, o.exit_code, 0, 0};
        o.message = peer_.reason + "; stopped " + workers_text(others_stopped_) + " of node " +
                    std::to_string(settings_.node_rank);
        break;
      case Cause::kPeer:
        o.exit_code = peer_.exit_code;
        o.peer_failed = true;
        o.record =
            peer_.record.value_or(RestartRecord{generation_ + 1, -1, peer_.reason, o.exit_code, 0, 0, peer_.node});
        o.message = (others_stopped_ == 0 && after_peer_trouble(failed_)
                         ? "node " + std::to_string(settings_.node_rank) + "'s workers had stopped already (" +
                               worker_text(failed_) + ")"
                         : "stopped " + workers_text(others_stopped_) + " of node " +
                               std::to_string(settings_.node_rank)) +
                    " because another node stopped: " + peer_.reason;
        break;
    }
    o.record.generation = generation_ + 1;
    if (cause_ == Cause::kWorker || cause_ == Cause::kHang || cause_ == Cause::kSignal)
      o.record.failed_node = settings_.node_rank;
    if (cause_ != Cause::kPeer || !peer_.record) {
      o.record.failure_unix_ms = failure_unix_ms_;
      o.record.last_step = last_step();
    }
    return o;
  }

  WorkerGroup& group_;
  SignalRelay& relay_;
  const SupervisorSettings& settings_;
  std::unique_ptr<PeerWatch> peers_;
  std::unique_ptr<HeartbeatMonitor> monitor_;
  Clock::time_point next_generation_check_{};
  bool shrunk_ = false;                // a lost node's ranks dropped out in process
  std::vector<int> node_of_rank_;      // this generation's rank -> node (after a shrink: the survivors')
  std::map<int, int> current_rank_;    // local workers: rank at launch -> rank now
  int generation_;
  std::map<int, int> spawned_in_;  // rank -> generation of an in-process replacement
  Cause cause_ = Cause::kNone;
  bool stopping_ = false;
  bool killed_ = false;
  bool all_clean_ = true;  // every worker that exited while stopping exited 0
  int stop_signal_ = 0;
  int others_stopped_ = 0;
  int64_t failure_unix_ms_ = 0;
  Clock::time_point deadline_{};
  std::optional<Clock::time_point> blame_deadline_;  // a worker failed after peer trouble: the verdict waits
  Clock::time_point next_peer_check_{};
  Clock::time_point next_heartbeat_poll_{};
  WorkerExit failed_{};
  std::vector<HungWorker> hung_;
  PeerFailure peer_;
};

}  // namespace

GroupOutcome supervise(WorkerGroup& group, SignalRelay& relay, const SupervisorSettings& settings) {
  return Supervisor(group, relay, settings).run();
}

void say(const std::string& line) { write_fully(STDERR_FILENO, "gradmesh launch: " + line + "\n"); }

}  // namespace gradmesh::elastic
