#include "gradmesh/elastic/launcher.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "gradmesh/comm/endpoint.h"
#include "gradmesh/comm/store.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/elastic/rank_assignment.h"
#include "gradmesh/elastic/signal_relay.h"
#include "gradmesh/elastic/supervisor.h"
#include "gradmesh/elastic/worker_env.h"
#include "gradmesh/elastic/worker_group.h"

namespace gradmesh::elastic {
namespace {

namespace fs = std::filesystem;
using comm::Millis;

// Thrown by the rendezvous' interrupt check when a stop signal arrives
// before any worker runs.
struct Interrupted {
  int signal;
};

// Everything about this launcher that does not change between generations.
struct LaunchContext {
  LaunchOptions options;
  std::string run_id;
  std::string endpoint;        // GRADMESH_STORE for the workers (may carry a password)
  std::string executable;      // command[0] resolved on PATH
  std::string master_addr;     // what this node would publish as node 0
  std::string node_label;      // "<host> pid <pid>"
  std::vector<std::string> base_env;
};

// The store directory this launcher created for itself (no --rdzv-endpoint):
// removed when the launcher ends, whatever the outcome.
class OwnedStoreDir {
 public:
  ~OwnedStoreDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  void own(std::string path) { path_ = std::move(path); }

 private:
  std::string path_;
};

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

// The file store a single-node launcher uses when given no endpoint: inside
// --log-dir when there is one (next to the logs), else a fresh temp directory.
std::string make_default_store(const LaunchOptions& o, const std::string& run_id, OwnedStoreDir& owned) {
  std::string dir;
  if (!o.log_dir.empty()) {
    dir = fs::absolute(fs::path(o.log_dir) / "store").lexically_normal().string();
    if (!fs::exists(dir)) owned.own(dir);
  } else {
    std::string pattern = (fs::temp_directory_path() / ("gradmesh-launch-" + run_id + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw_error(ErrorKind::kIo, pattern, "cannot create the launcher's store directory; set TMPDIR or --log-dir");
    dir = pattern;
    owned.own(dir);
  }
  return "file://" + dir;
}

LaunchContext resolve(const LaunchOptions& o, OwnedStoreDir& owned) {
  LaunchContext ctx;
  ctx.options = o;
  ctx.executable = find_executable(o.command[0]);
  ctx.run_id = o.rdzv_id.empty() ? fresh_run_id() : o.rdzv_id;
  ctx.endpoint = o.rdzv_endpoint.empty() ? make_default_store(o, ctx.run_id, owned) : o.rdzv_endpoint;
  const std::string host = host_name();
  ctx.node_label = host + " pid " + std::to_string(::getpid());
  if (!o.master_addr.empty()) {
    ctx.master_addr = o.master_addr;
  } else if (o.nnodes == 1) {
    ctx.master_addr = "127.0.0.1";
  } else {
    const std::string configured = env_string("GRADMESH_HOSTNAME");
    ctx.master_addr = configured.empty() ? host : configured;
  }
  ctx.base_env = current_environment();
  return ctx;
}

RankAssignment rendezvous(const LaunchContext& ctx, comm::Store& agent_store, SignalRelay& relay) {
  const LaunchOptions& o = ctx.options;
  RendezvousRequest req;
  req.nnodes = o.nnodes;
  req.node_rank = o.node_rank;
  req.nproc_per_node = o.nproc_per_node;
  req.master_addr = ctx.master_addr;
  req.master_port = o.master_port;
  req.node_label = ctx.node_label;
  req.run_label = "rendezvous of run '" + ctx.run_id + "' at " + comm::redact_endpoint(ctx.endpoint);
  req.join_timeout = Millis{static_cast<int64_t>(o.join_timeout_s * 1000.0)};
  req.check_interrupt = [&relay] {
    for (int sig : relay.drain())
      if (SignalRelay::is_stop_signal(sig)) throw Interrupted{sig};
  };
  return join_rendezvous(agent_store, req);
}

std::vector<WorkerSpec> worker_specs(const LaunchContext& ctx, const RankAssignment& a, int generation) {
  const RunIdentity run{ctx.run_id, ctx.endpoint, generation, ctx.options.max_restarts};
  std::vector<WorkerSpec> specs;
  for (int local = 0; local < a.local_world_size; ++local) {
    WorkerCommand command{ctx.executable, ctx.options.command,
                          merge_environment(ctx.base_env, worker_variables(a, local, run))};
    specs.push_back(WorkerSpec{a.global_rank(local), local, std::move(command)});
  }
  return specs;
}

std::string rank_range(const RankAssignment& a) {
  const int last = a.rank_base + a.local_world_size - 1;
  return a.local_world_size == 1 ? "rank " + std::to_string(a.rank_base)
                                 : "ranks " + std::to_string(a.rank_base) + "-" + std::to_string(last);
}

// One generation: rendezvous, start, supervise until every worker exited.
GroupOutcome run_generation(const LaunchContext& ctx, const std::shared_ptr<comm::Store>& store, int generation,
                            SignalRelay& relay) {
  const auto agent_store =
      std::make_shared<comm::PrefixStore>(store, ctx.run_id + "/" + std::to_string(generation) + "/agent");
  const RankAssignment a = rendezvous(ctx, *agent_store, relay);
  log_info("launch: run '" + ctx.run_id + "' generation " + std::to_string(generation) + ", node " +
           std::to_string(a.node_rank) + " of " + std::to_string(a.nnodes) + ": " + rank_range(a) + " of " +
           std::to_string(a.world_size) + ", master " + a.master_addr + ":" + std::to_string(a.master_port) +
           ", store " + comm::redact_endpoint(ctx.endpoint));
  WorkerGroup group(worker_specs(ctx, a, generation), ctx.options.log_dir, generation == 0);
  group.start(relay);
  SupervisorSettings settings;
  settings.node_rank = a.node_rank;
  settings.nnodes = a.nnodes;
  settings.grace_period = Millis{static_cast<int64_t>(ctx.options.grace_period_s * 1000.0)};
  settings.peers = a.nnodes > 1 ? agent_store.get() : nullptr;
  return supervise(group, relay, settings);
}

}  // namespace

int run_launcher(const LaunchOptions& options) {
  validate_launch_options(options);
  OwnedStoreDir owned_store;
  const LaunchContext ctx = resolve(options, owned_store);
  const std::shared_ptr<comm::Store> store = comm::open_store(ctx.endpoint);
  SignalRelay relay;
  for (int generation = 0;; ++generation) {
    GroupOutcome outcome;
    try {
      outcome = run_generation(ctx, store, generation, relay);
    } catch (const Interrupted& interrupted) {
      say("received " + signal_name(interrupted.signal) + " during the rendezvous; no workers were running");
      return 128 + interrupted.signal;
    }
    if (outcome.exit_code == 0) {
      log_info("launch: all workers of run '" + ctx.run_id + "' exited with status 0");
      return 0;
    }
    const bool restart = outcome.worker_failed && generation < options.max_restarts;
    say(outcome.message + (restart ? "; restarting the workers (restart " + std::to_string(generation + 1) + " of " +
                                         std::to_string(options.max_restarts) + ")"
                                   : ""));
    if (!restart) return outcome.exit_code;
  }
}

}  // namespace gradmesh::elastic
