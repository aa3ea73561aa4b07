#include "gradmesh/elastic/agent_status.h"

#include "gradmesh/core/clock.h"

namespace gradmesh::elastic {

const char* agent_phase_name(AgentPhase phase) {
  switch (phase) {
    case AgentPhase::kRendezvous: return "rendezvous";
    case AgentPhase::kRunning: return "running";
    case AgentPhase::kRestarting: return "restarting";
    case AgentPhase::kFinished: return "finished";
  }
  return "?";
}

AgentStatus::AgentStatus(std::string run_id) { state_.run_id = std::move(run_id); }

void AgentStatus::rendezvous(int generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_.phase = AgentPhase::kRendezvous;
  state_.generation = generation;
  state_.message.clear();
  record();
}

void AgentStatus::running(int generation, int node_rank, int workers) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_.restarts = generation;  // the job's generations count its restarts
  state_.phase = AgentPhase::kRunning;
  state_.generation = generation;
  state_.node_rank = node_rank;
  state_.workers = workers;
  state_.message.clear();
  record();
}

void AgentStatus::restarting(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_.phase = AgentPhase::kRestarting;
  state_.message = why;
  record();
}

void AgentStatus::finished(int exit_code, const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_.phase = AgentPhase::kFinished;
  state_.exit_code = exit_code;
  state_.message = message;
  record();
}

void AgentStatus::record() {
  state_.time = static_cast<double>(unix_millis()) / 1e3;
  history_.push_back(state_);
}

std::vector<AgentSnapshot> AgentStatus::history(size_t from) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (from >= history_.size()) return {};
  return {history_.begin() + static_cast<std::ptrdiff_t>(from), history_.end()};
}

AgentSnapshot AgentStatus::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

bool AgentStatus::ready() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.phase == AgentPhase::kRunning;
}

}  // namespace gradmesh::elastic
