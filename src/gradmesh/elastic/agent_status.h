// What a node's agent (`gradmesh launch`) is doing, as its HTTP endpoints
// report it (agent_http.h): Kubernetes' probes and `gradmesh probe` read it.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <mutex>
#include <string>
#include <vector>

namespace gradmesh::elastic {

enum class AgentPhase {
  kRendezvous,  // joining the job (or waiting for the next generation)
  kRunning,     // this node's workers are running
  kRestarting,  // a generation failed; the next one is being formed
  kFinished,    // the job ended (see exit_code)
};

const char* agent_phase_name(AgentPhase phase);  // "rendezvous", "running", "restarting", "finished"

struct AgentSnapshot {
  AgentPhase phase = AgentPhase::kRendezvous;
  std::string run_id;
  int node_rank = -1;  // -1 until the rendezvous assigns it
  int generation = 0;
  int workers = 0;     // this node's workers in the current generation
  int restarts = 0;    // generations started after the first
  int exit_code = -1;  // when finished
  std::string message;
  double time = 0;     // Unix seconds of the change that produced this state
};

class AgentStatus {
 public:
  explicit AgentStatus(std::string run_id);
  void rendezvous(int generation);
  void running(int generation, int node_rank, int workers);
  void restarting(const std::string& why);
  void finished(int exit_code, const std::string& message);
  AgentSnapshot snapshot() const;
  // Every state this agent has been in, oldest first, from index `from` on:
  // the dashboard's timeline of generations, failures and the end.
  std::vector<AgentSnapshot> history(size_t from = 0) const;
  // Ready for traffic (a readiness probe): this node's workers are running.
  bool ready() const;

 private:
  void record();  // REQUIRES: mutex_ held
  mutable std::mutex mutex_;
  AgentSnapshot state_;
  std::vector<AgentSnapshot> history_;
};

}  // namespace gradmesh::elastic
