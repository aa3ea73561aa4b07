// `gradmesh launch`: the command-line face of elastic/launcher.h.
//
// main.cc registers the subcommand with add_launch_command() and, when it was
// given, calls run_launch(). Flag spellings follow torchrun (both
// --nproc-per-node and --nproc_per_node are accepted).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace gradmesh::cli {

// The flags as typed; run_launch() checks and converts them.
struct LaunchArgs {
  std::string nnodes = "1";
  std::string nproc_per_node = "1";
  int node_rank = -1;
  std::string rdzv_endpoint;
  std::string rdzv_id;
  std::string log_dir;
  std::string master_addr;
  int master_port = 0;
  int max_restarts = 0;
  std::string join_timeout;  // seconds; empty: GRADMESH_COMM_TIMEOUT
  std::string grace_period = "10";  // seconds
  std::string heartbeat_timeout = "60";  // seconds; 0 = off
  std::string store_timeout = "60";      // seconds the store may stay unreachable
  std::string rdzv_last_call = "5";      // seconds
  bool standalone = false;
  int agent_port = -1;
  std::string agent_host = "127.0.0.1";
  std::string token_file;
  std::string dashboard = "on";
  int dashboard_port = 0;
  std::string dashboard_host = "127.0.0.1";
  std::vector<std::string> command;
  const CLI::App* parsed = nullptr;  // set by add_launch_command: which flags the command line gave
};

// Adds the `launch` subcommand to `app`, writing into `args` when parsed.
CLI::App* add_launch_command(CLI::App& app, LaunchArgs& args);

// Runs the launcher; returns the process exit code (docs/launch.md).
// Usage errors are thrown as Error(kUsage).
int run_launch(const LaunchArgs& args);

}  // namespace gradmesh::cli
