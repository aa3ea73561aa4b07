// What `gradmesh launch` was asked to do, in torchrun's vocabulary.
//
// cli/launch_command.cc fills a LaunchOptions from the command line;
// elastic/launcher.cc runs it. Parsing helpers live here so the rules for each
// flag (and their error messages) are written once and unit-tested without
// starting processes.
#pragma once

#include <string>
#include <vector>

#include "gradmesh/core/env.h"

namespace gradmesh::elastic {

struct LaunchOptions {
  int nnodes = 1;               // launchers (one per node) that form the job; MAX of MIN:MAX
  int min_nnodes = 0;           // MIN of MIN:MAX; 0 = nnodes (a fixed node count)
  int nproc_per_node = 1;       // workers this launcher starts
  int node_rank = -1;           // this node's rank; -1 = assigned through the store in join order
  std::string rdzv_endpoint;    // file:///dir or redis://...; empty = a file store in a fresh directory
  std::string rdzv_id;          // run id shared by every node; empty = a fresh id (one node only)
  std::string log_dir;          // empty = no per-rank log files
  std::string master_addr;      // empty = 127.0.0.1 with one node, else GRADMESH_HOSTNAME or the host name
  int master_port = 0;          // 0 = a port that is free on node 0 when the group starts
  int max_restarts = 0;         // restarts after a failure, counted for the whole job (all nodes)
  double join_timeout_s = 300;  // how long the rendezvous waits for all nodes to join (<= kMaxJoinTimeoutSeconds)
  double grace_period_s = 10;   // SIGTERM (or the forwarded signal) -> SIGKILL delay (<= kMaxGracePeriodSeconds)
  double heartbeat_timeout_s = 60;  // a worker without heartbeat change or progress this long is hung; 0 = off
  double rdzv_last_call_s = 5;      // elastic: close the rendezvous once MIN joined and no node came this long
  // How long the store may stay unreachable: shorter outages are waited out by
  // every store client (GRADMESH_STORE_TIMEOUT for the workers), a longer one
  // fails every node naming the store.
  double store_timeout_s = 60;
  std::vector<std::string> command;  // the worker program and its arguments
  // Exit 0, not 128 + N, when signal N stopped the job and every worker
  // exited 0 (gradmesh serve --nproc: SIGTERM drains the server).
  bool clean_signal_stop_succeeds = false;
  // The agent's HTTP endpoints (agent_http.h): -1 = none, 0 = a free port.
  int agent_port = -1;
  std::string agent_host = "127.0.0.1";
  std::string token_file;  // their bearer token; empty = none
  // The live dashboard (agent_http.h with a metrics feed): -1 = off, 0 = a free port.
  int dashboard_port = 0;
  std::string dashboard_host = "127.0.0.1";
};

struct NodeRange {
  int min = 1;
  int max = 1;
};

// Bounds of the flags given in seconds: a larger value is a typo, and would
// overflow the conversion to milliseconds. The join timeout's matches
// GRADMESH_COMM_TIMEOUT's, its default.
inline constexpr double kMinJoinTimeoutSeconds = kMinCommTimeoutSeconds;
inline constexpr double kMaxJoinTimeoutSeconds = kMaxCommTimeoutSeconds;
inline constexpr double kMaxGracePeriodSeconds = 3600;

inline constexpr double kMaxHeartbeatTimeoutSeconds = kMaxCommTimeoutSeconds;
inline constexpr double kMaxLastCallSeconds = 3600;
inline constexpr double kMinStoreTimeoutSeconds = 1;
inline constexpr double kMaxStoreTimeoutSeconds = 3600;

// "N" (MIN = MAX = N) or torchrun's elastic "MIN:MAX" with 1 <= MIN <= MAX.
// Anything else is Error(kUsage) naming --nnodes.
NodeRange parse_nnodes(const std::string& text);

// A positive integer, or "auto"/"cpu" for the number of CPUs of this host.
int parse_nproc_per_node(const std::string& text);

// Run ids name store keys and directories: 1-128 of [A-Za-z0-9._-], not starting with '.'.
bool is_valid_run_id(const std::string& id);

// A fresh run id: 12 random hex digits.
std::string fresh_run_id();

// Checks everything that needs no store and no processes; Error(kUsage) names
// the flag, what was expected and what was found.
void validate_launch_options(const LaunchOptions& options);

// The file execve() will run for `name`: a name with a '/' is used as-is, any
// other is searched on PATH as execvp would. A missing or non-executable
// command is Error(kUsage) naming it.
std::string find_executable(const std::string& name);

}  // namespace gradmesh::elastic
