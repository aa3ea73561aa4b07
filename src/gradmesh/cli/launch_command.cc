#include "gradmesh/cli/launch_command.h"

#include <cstdlib>
#include <optional>

#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/elastic/launch_options.h"
#include "gradmesh/elastic/launcher.h"

namespace gradmesh::cli {
namespace {

constexpr const char* kFooter =
    "Everything after `--` is the worker command, run once per local rank with RANK, LOCAL_RANK, WORLD_SIZE,\n"
    "MASTER_ADDR, MASTER_PORT, ... set as torchrun sets them. Exit codes and the full environment: docs/launch.md.\n"
    "Example: gradmesh launch --nproc-per-node 4 -- python3 train.py --epochs 3";

// Flag values in seconds, by the grammar of core/parse_number.h.
double seconds_flag(const std::string& text, const char* flag, double min, double max) {
  return parse_double(text, flag, min, max, ErrorKind::kUsage);
}

// The flags the command line left out, from the PET_* variables that
// torchrun reads and Kubeflow's PyTorchJob sets (PET_NNODES, PET_NODE_RANK,
// ...). The store is always --rdzv-endpoint: PyTorchJob's PET_RDZV_ENDPOINT
// names a c10d TCP store, which gradmesh does not speak.
LaunchArgs with_operator_environment(const LaunchArgs& given) {
  LaunchArgs a = given;
  const auto unset = [&](const char* flag) { return a.parsed == nullptr || a.parsed->count(flag) == 0; };
  const auto env = [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
  };
  if (unset("--nnodes"))
    if (auto v = env("PET_NNODES")) a.nnodes = *v;
  if (unset("--nproc-per-node"))
    if (auto v = env("PET_NPROC_PER_NODE")) a.nproc_per_node = *v;
  if (unset("--rdzv-id"))
    if (auto v = env("PET_RDZV_ID")) a.rdzv_id = *v;
  if (unset("--node-rank"))
    if (auto v = env_int("PET_NODE_RANK", 0, 1'000'000)) a.node_rank = static_cast<int>(*v);
  if (unset("--max-restarts"))
    if (auto v = env_int("PET_MAX_RESTARTS", 0, 1'000'000)) a.max_restarts = static_cast<int>(*v);
  return a;
}

}  // namespace

CLI::App* add_launch_command(CLI::App& app, LaunchArgs& a) {
  CLI::App* launch = app.add_subcommand("launch", "Start and supervise worker processes (torchrun-compatible)");
  launch->footer(kFooter);
  launch->add_option("--nnodes", a.nnodes, "Nodes (launchers) in the job: N, or MIN:MAX for elastic membership")->capture_default_str()->type_name("N");
  launch->add_option("--nproc-per-node,--nproc_per_node", a.nproc_per_node, "Workers on this node (or 'auto')")
      ->capture_default_str()
      ->type_name("K");
  launch->add_option("--node-rank,--node_rank", a.node_rank, "This node's rank (default: assigned in join order)")
      ->type_name("R");
  launch->add_option("--rdzv-endpoint,--rdzv_endpoint", a.rdzv_endpoint,
                     "Store: file:///dir, redis://[:password@]host:port[/db] or etcd://h1:2379,h2:2379,h3:2379 "
                     "(default: a fresh file store)")
      ->type_name("URL");
  launch->add_option("--rdzv-id,--rdzv_id", a.rdzv_id, "Run id, the same on every node (default: a fresh id)")
      ->type_name("ID");
  launch->add_option("--log-dir,--log_dir", a.log_dir, "Write each rank's output to DIR/rank_<r>.log")
      ->type_name("DIR");
  launch->add_option("--master-addr,--master_addr", a.master_addr,
                     "Address of rank 0 (default: 127.0.0.1 on one node, else GRADMESH_HOSTNAME or the host name)")
      ->type_name("ADDR");
  launch->add_option("--master-port,--master_port", a.master_port, "Port of rank 0 (default: a free port)")
      ->type_name("PORT");
  launch->add_option("--max-restarts,--max_restarts", a.max_restarts, "Restarts after failures, counted for the whole job")
      ->capture_default_str()
      ->type_name("N");
  launch->add_option("--join-timeout,--join_timeout", a.join_timeout,
                     "Seconds to wait for all nodes (default: GRADMESH_COMM_TIMEOUT, 300)")
      ->type_name("SECONDS");
  launch->add_option("--grace-period,--grace_period", a.grace_period,
                     "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str()
      ->type_name("SECONDS");
  launch->add_option("--heartbeat-timeout,--heartbeat_timeout", a.heartbeat_timeout,
                     "Seconds without heartbeat change or progress before a worker counts as hung (0 = off)")
      ->capture_default_str()
      ->type_name("SECONDS");
  launch->add_option("--store-timeout,--store_timeout", a.store_timeout,
                     "Seconds the store may stay unreachable (reconnecting) before every node gives up")
      ->capture_default_str()
      ->type_name("SECONDS");
  launch->add_option("--rdzv-last-call,--rdzv_last_call", a.rdzv_last_call,
                     "Elastic --nnodes: seconds the rendezvous waits for more nodes once MIN joined")
      ->capture_default_str()
      ->type_name("SECONDS");
  launch->add_option("--agent-port", a.agent_port,
                     "Serve the agent's /healthz, /readyz and /status on this port (0: a free one; default: none)")
      ->type_name("PORT");
  launch->add_option("--agent-host", a.agent_host, "Address the agent's endpoints listen on")
      ->capture_default_str()
      ->type_name("ADDR");
  launch->add_option("--token-file", a.token_file,
                     "A file holding the bearer token the agent's endpoints require (as gradmesh serve's)")
      ->type_name("FILE");
  launch->add_option("--dashboard", a.dashboard, "The live dashboard: on (the default) or off")
      ->capture_default_str()
      ->type_name("on|off");
  launch->add_option("--dashboard-port", a.dashboard_port, "Port of the live dashboard (0: a free one, printed at start)")
      ->capture_default_str()
      ->type_name("PORT");
  launch->add_option("--dashboard-host", a.dashboard_host,
                     "Address the dashboard listens on (it has no authentication: keep it on loopback and forward it)")
      ->capture_default_str()
      ->type_name("ADDR");
  launch->add_flag("--standalone", a.standalone, "One node with its own store (the default; accepted for torchrun)");
  launch->add_option("command", a.command, "The worker command and its arguments (after --)")->type_name("COMMAND");
  a.parsed = launch;
  return launch;
}

int run_launch(const LaunchArgs& given) {
  const LaunchArgs a = with_operator_environment(given);
  elastic::LaunchOptions o;
  const elastic::NodeRange nodes = elastic::parse_nnodes(a.nnodes);
  o.nnodes = nodes.max;
  o.min_nnodes = nodes.min;
  o.nproc_per_node = elastic::parse_nproc_per_node(a.nproc_per_node);
  if (a.standalone && (o.nnodes != 1 || !a.rdzv_endpoint.empty()))
    throw_error(ErrorKind::kUsage, "--standalone", "means one node with its own store; drop --nnodes/--rdzv-endpoint");
  o.node_rank = a.node_rank;
  o.rdzv_endpoint = a.rdzv_endpoint;
  o.rdzv_id = a.rdzv_id;
  o.log_dir = a.log_dir;
  o.master_addr = a.master_addr;
  o.master_port = a.master_port;
  o.max_restarts = a.max_restarts;
  o.join_timeout_s = a.join_timeout.empty()
                         ? static_cast<double>(env_comm_timeout().count()) / 1000.0
                         : seconds_flag(a.join_timeout, "--join-timeout", elastic::kMinJoinTimeoutSeconds,
                                        elastic::kMaxJoinTimeoutSeconds);
  o.grace_period_s = seconds_flag(a.grace_period, "--grace-period", 0, elastic::kMaxGracePeriodSeconds);
  o.heartbeat_timeout_s =
      seconds_flag(a.heartbeat_timeout, "--heartbeat-timeout", 0, elastic::kMaxHeartbeatTimeoutSeconds);
  o.store_timeout_s = seconds_flag(a.store_timeout, "--store-timeout", elastic::kMinStoreTimeoutSeconds,
                                   elastic::kMaxStoreTimeoutSeconds);
  o.rdzv_last_call_s = seconds_flag(a.rdzv_last_call, "--rdzv-last-call", 0, elastic::kMaxLastCallSeconds);
  o.agent_port = a.agent_port;
  o.agent_host = a.agent_host;
  o.token_file = a.token_file;
  if (a.dashboard != "on" && a.dashboard != "off")
    throw_error(ErrorKind::kUsage, "--dashboard", "expected on or off, got '" + a.dashboard + "'");
  if (a.dashboard_port < 0 || a.dashboard_port > 65535)
    throw_error(ErrorKind::kUsage, "--dashboard-port",
                "expected 0 (a free port) to 65535, got " + std::to_string(a.dashboard_port));
  o.dashboard_port = a.dashboard == "off" ? -1 : a.dashboard_port;
  o.dashboard_host = a.dashboard_host;
  o.command = a.command;
  return elastic::run_launcher(o);
}

}  // namespace gradmesh::cli
