#include "gradmesh/elastic/supervisor.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "gradmesh/core/error.h"
#include "gradmesh/core/text_format.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh::elastic {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// Upper bound on one poll: how often grace deadlines and peers are checked.
constexpr Millis kTick{250};
constexpr Millis kPeerCheckInterval{500};
constexpr const char* kFailureKey = "failure";

std::string workers_text(int n) { return std::to_string(n) + (n == 1 ? " worker" : " workers"); }

class Supervisor {
 public:
  Supervisor(WorkerGroup& group, SignalRelay& relay, const SupervisorSettings& settings)
      : group_(group), relay_(relay), settings_(settings), peers_(settings.peers) {}

  GroupOutcome run() {
    while (!group_.all_exited()) {
      Millis timeout = kTick;
      if (stopping_ && !killed_)
        timeout = std::clamp(std::chrono::duration_cast<Millis>(deadline_ - Clock::now()), Millis{0}, kTick);
      for (const WorkerExit& exit : group_.pump(timeout, relay_.fd())) on_worker_exit(exit);
      for (int sig : relay_.drain()) on_signal(sig);
      if (peers_ != nullptr && !stopping_) check_peers();
      escalate_if_due();
    }
    return outcome();
  }

 private:
  enum class Cause { kNone, kWorker, kSignal, kPeer };

  void begin_stop(Cause cause, int sig) {
    cause_ = cause;
    stop_signal_ = sig;
    stopping_ = true;
    others_stopped_ = group_.running();
    deadline_ = Clock::now() + settings_.grace_period;
    group_.signal_all(sig);
    if (cause != Cause::kPeer) publish_failure();
  }

  void on_worker_exit(const WorkerExit& exit) {
    if (stopping_ || exited_cleanly(exit.wait_status)) return;
    failed_ = exit;
    begin_stop(Cause::kWorker, SIGTERM);
  }

  void on_signal(int sig) {
    // SIGCHLD only wakes the loop; a stop signal racing the last exit has nothing left to stop.
    if (!SignalRelay::is_stop_signal(sig) || group_.all_exited()) return;
    if (!stopping_) return begin_stop(Cause::kSignal, sig);
    if (killed_) return;
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
  }

  std::string failed_worker_text() const {
    std::string where = settings_.nnodes > 1 ? "node " + std::to_string(settings_.node_rank) + ", " : "";
    return "rank " + std::to_string(failed_.rank) + " (" + where + "pid " + std::to_string(failed_.pid) + ") " +
           describe_exit(failed_.wait_status);
  }

  // Publishes "<exit code>\n<what happened>" for the other nodes; first writer wins.
  void publish_failure() {
    if (peers_ == nullptr) return;
    const GroupOutcome o = outcome();
    const std::string reason = cause_ == Cause::kWorker ? failed_worker_text()
                                                        : "node " + std::to_string(settings_.node_rank) +
                                                              "'s launcher received " + signal_name(stop_signal_);
    try {
      peers_->compare_set(kFailureKey, "", std::to_string(o.exit_code) + "\n" + reason);
    } catch (const Error& e) {
      log_warn(std::string("could not tell the other nodes to stop: ") + e.what());
    }
  }

  void check_peers() {
    const Clock::time_point now = Clock::now();
    if (now < next_peer_check_) return;
    next_peer_check_ = now + kPeerCheckInterval;
    try {
      if (!peers_->check({kFailureKey})) return;
      const std::string value = peers_->get(kFailureKey, Millis{1000});
      const size_t newline = value.find('\n');
      // Anything but an exit code 1..255 still means the peer failed: 1.
      peer_exit_code_ = static_cast<int>(try_parse_int(std::string_view(value).substr(0, newline), 1, 255).value_or(1));
      peer_reason_ = newline == std::string::npos ? value : value.substr(newline + 1);
      begin_stop(Cause::kPeer, SIGTERM);
    } catch (const Error& e) {
      log_warn(std::string("cannot watch the other nodes through the store any more: ") + e.what());
      peers_ = nullptr;
    }
  }

  GroupOutcome outcome() const {
    GroupOutcome o;
    const std::string stopped = others_stopped_ == 0 ? "no other workers were running"
                                                     : "stopped the other " + workers_text(others_stopped_);
    switch (cause_) {
      case Cause::kNone:
        break;
      case Cause::kWorker:
        o.exit_code = shell_exit_code(failed_.wait_status);
        o.worker_failed = true;
        o.message = failed_worker_text() + "; " + stopped;
        break;
      case Cause::kSignal:
        o.exit_code = 128 + stop_signal_;
        o.message = "received " + signal_name(stop_signal_) + "; forwarded it to " + workers_text(others_stopped_) +
                    " and stopped them";
        break;
      case Cause::kPeer:
        o.exit_code = peer_exit_code_;
        o.message = "stopped " + workers_text(others_stopped_) + " of node " + std::to_string(settings_.node_rank) +
                    " because another node stopped: " + peer_reason_;
        break;
    }
    return o;
  }

  WorkerGroup& group_;
  SignalRelay& relay_;
  const SupervisorSettings& settings_;
  comm::Store* peers_;
  Cause cause_ = Cause::kNone;
  bool stopping_ = false;
  bool killed_ = false;
  int stop_signal_ = 0;
  int others_stopped_ = 0;
  Clock::time_point deadline_{};
  Clock::time_point next_peer_check_{};
  WorkerExit failed_{};
  int peer_exit_code_ = 1;
  std::string peer_reason_;
};

}  // namespace

GroupOutcome supervise(WorkerGroup& group, SignalRelay& relay, const SupervisorSettings& settings) {
  return Supervisor(group, relay, settings).run();
}

void say(const std::string& line) { write_fully(STDERR_FILENO, "gradmesh launch: " + line + "\n"); }

}  // namespace gradmesh::elastic
