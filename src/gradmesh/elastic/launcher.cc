#include "gradmesh/elastic/launcher.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "gradmesh/comm/endpoint.h"
#include "gradmesh/comm/store.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/core/secret.h"
#include "gradmesh/net/http_listen.h"
#include "gradmesh/elastic/agent_http.h"
#include "gradmesh/elastic/agent_status.h"
#include "gradmesh/elastic/rank_assignment.h"
#include "gradmesh/elastic/restart_budget.h"
#include "gradmesh/elastic/restart_record.h"
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

constexpr const char* kTempStorePrefix = "gradmesh-launch-";
constexpr const char* kOwnerFile = "launcher.pid";

// A launcher killed with SIGKILL cannot remove its temporary store: the next
// launcher removes those of this user whose launcher is gone (its pid, kept
// in the directory, no longer runs on this host).
void remove_orphaned_stores(const std::string& host) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(fs::temp_directory_path(), ec)) {
    const std::string name = entry.path().filename().string();
    struct stat info {};
    if (name.rfind(kTempStorePrefix, 0) != 0 || ::lstat(entry.path().c_str(), &info) != 0 || !S_ISDIR(info.st_mode) ||
        info.st_uid != ::geteuid())
      continue;
    std::ifstream in(entry.path() / kOwnerFile);
    std::string owner_host, pid_text;
    if (!(in >> owner_host >> pid_text) || owner_host != host) continue;
    const std::optional<int64_t> pid = try_parse_int(pid_text, 1, 1 << 30);
    if (!pid || ::kill(static_cast<pid_t>(*pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    fs::remove_all(entry.path(), ignored);
  }
}

// The file store a single-node launcher uses when given no endpoint: inside
// --log-dir when there is one (next to the logs), else a fresh temp directory.
std::string make_default_store(const LaunchOptions& o, const std::string& run_id, OwnedStoreDir& owned) {
  std::string dir;
  if (!o.log_dir.empty()) {
    dir = fs::absolute(fs::path(o.log_dir) / "store").lexically_normal().string();
    if (!fs::exists(dir)) owned.own(dir);
  } else {
    const std::string host = host_name();
    remove_orphaned_stores(host);
    std::string pattern = (fs::temp_directory_path() / (kTempStorePrefix + run_id + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw_error(ErrorKind::kIo, pattern, "cannot create the launcher's store directory; set TMPDIR or --log-dir");
    dir = pattern;
    owned.own(dir);
    std::ofstream(fs::path(dir) / kOwnerFile) << host << " " << ::getpid() << "\n";
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
  // The workers' store clients wait out an outage as long as the launchers do.
  ctx.base_env = merge_environment(current_environment(),
                                   {{"GRADMESH_STORE_TIMEOUT", std::to_string(o.store_timeout_s)}});
  return ctx;
}

Millis millis(double seconds) { return Millis{static_cast<int64_t>(seconds * 1000.0)}; }

void check_interrupt(SignalRelay& relay) {
  for (int sig : relay.drain())
    if (SignalRelay::is_stop_signal(sig)) throw Interrupted{sig};
}

RendezvousRequest rendezvous_request(const LaunchContext& ctx, SignalRelay& relay) {
  const LaunchOptions& o = ctx.options;
  RendezvousRequest req;
  req.nnodes = o.nnodes;
  req.min_nnodes = o.min_nnodes;
  req.last_call = millis(o.rdzv_last_call_s);
  req.node_rank = o.node_rank;
  req.nproc_per_node = o.nproc_per_node;
  req.master_addr = ctx.master_addr;
  req.master_port = o.master_port;
  req.node_label = ctx.node_label;
  req.run_label = "rendezvous of run '" + ctx.run_id + "' at " + comm::redact_endpoint(ctx.endpoint);
  req.join_timeout = millis(o.join_timeout_s);
  req.check_interrupt = [&relay] { check_interrupt(relay); };
  return req;
}

WorkerCommand worker_command(const LaunchContext& ctx, const RankAssignment& a, int local, int generation,
                             bool replacement) {
  const RunIdentity run{ctx.run_id, ctx.endpoint, generation, ctx.options.max_restarts, replacement};
  return WorkerCommand{ctx.executable, ctx.options.command,
                       merge_environment(ctx.base_env, worker_variables(a, local, run))};
}

std::vector<WorkerSpec> worker_specs(const LaunchContext& ctx, const RankAssignment& a, int generation) {
  std::vector<WorkerSpec> specs;
  for (int local = 0; local < a.local_world_size; ++local)
    specs.push_back(WorkerSpec{a.global_rank(local), local, worker_command(ctx, a, local, generation, false)});
  return specs;
}

std::string generation_prefix(const LaunchContext& ctx, int generation) {
  return ctx.run_id + "/" + std::to_string(generation);
}

// Where a launcher starting now joins: the newest generation whose
// rendezvous has begun (a node that comes back after a loss joins the
// survivors' generation, not the one it left).
bool generation_begun(const LaunchContext& ctx, const std::shared_ptr<comm::Store>& store, int generation) {
  comm::PrefixStore agent(store, generation_prefix(ctx, generation) + "/agent");
  return rendezvous_begun(agent);
}

int starting_generation(const LaunchContext& ctx, const std::shared_ptr<comm::Store>& store) {
  // Not read_current_generation: its fallback is the worker's GRADMESH_GENERATION,
  // which a launcher started from inside another job would inherit.
  int generation = store->check({ctx.run_id + "/generation"}) ? read_current_generation(*store, ctx.run_id) : 0;
  while (generation_begun(ctx, store, generation + 1)) ++generation;
  return generation;
}

// A node that cannot be part of `generation` (too late, or its rank's dead
// predecessor's generation runs) waits for the next one to begin (a restart),
// or for the run to end. Returns the run's exit code when it ended first.
std::optional<int> wait_for_next_generation(const LaunchContext& ctx, const std::shared_ptr<comm::Store>& store,
                                            int generation, SignalRelay& relay) {
  say("the rendezvous of generation " + std::to_string(generation) + " of run '" + ctx.run_id +
      "' closed before this node joined; waiting to join at the next restart");
  const std::string finished = ctx.run_id + "/finished";
  for (;;) {
    check_interrupt(relay);
    if (generation_begun(ctx, store, generation + 1)) return std::nullopt;
    if (store->check({finished}))
      return static_cast<int>(try_parse_int(store->get(finished, Millis{5000}), 0, 255).value_or(1));
    std::this_thread::sleep_for(Millis{200});
  }
}

std::string rank_range(const RankAssignment& a) {
  const int last = a.rank_base + a.local_world_size - 1;
  return a.local_world_size == 1 ? "rank " + std::to_string(a.rank_base)
                                 : "ranks " + std::to_string(a.rank_base) + "-" + std::to_string(last);
}

// One generation: rendezvous, start, supervise until every worker exited.
// nullopt: this node came too late for the generation.
// `store` waits out an outage (its calls reconnect for --store-timeout);
// `watch_store` fails fast, for the supervisor's polls (see supervisor.h).
std::optional<GroupOutcome> run_generation(const LaunchContext& ctx, const std::shared_ptr<comm::Store>& store,
                                           const std::shared_ptr<comm::Store>& watch_store, int generation,
                                           SignalRelay& relay, RestartBudget& budget, AgentStatus& status) {
  status.rendezvous(generation);
  const std::string agent_prefix = generation_prefix(ctx, generation) + "/agent";
  const auto agent_store = std::make_shared<comm::PrefixStore>(store, agent_prefix);
  const auto agent_watch = std::make_shared<comm::PrefixStore>(watch_store, agent_prefix);
  const RendezvousRequest request = rendezvous_request(ctx, relay);
  const std::optional<RankAssignment> joined = try_join_rendezvous(*agent_store, request);
  if (!joined) return std::nullopt;
  const RankAssignment a = *joined;
  write_current_generation(*store, ctx.run_id, generation);
  log_info("launch: run '" + ctx.run_id + "' generation " + std::to_string(generation) + ", node " +
           std::to_string(a.node_rank) + " of " + std::to_string(a.nnodes) + ": " + rank_range(a) + " of " +
           std::to_string(a.world_size) + ", master " + a.master_addr + ":" + std::to_string(a.master_port) +
           ", store " + comm::redact_endpoint(ctx.endpoint));
  WorkerGroup group(worker_specs(ctx, a, generation), ctx.options.log_dir, generation == 0);
  group.start(relay);
  status.running(generation, a.node_rank, a.local_world_size);
  SupervisorSettings settings;
  settings.node_rank = a.node_rank;
  settings.nnodes = a.nnodes;
  settings.min_nnodes = ctx.options.min_nnodes;
  settings.grace_period = millis(ctx.options.grace_period_s);
  settings.peers = ctx.options.nnodes > 1 ? agent_watch.get() : nullptr;
  settings.store = watch_store.get();
  settings.store_timeout = millis(ctx.options.store_timeout_s);
  settings.republish = [&ctx, &watch_store, agent_watch, request, a, generation] {
    if (republish_membership(*agent_watch, request, a))
      watch_store->compare_set(ctx.run_id + "/generation", "", std::to_string(generation));
  };
  settings.run_id = ctx.run_id;
  settings.generation = generation;
  settings.heartbeat_timeout = millis(ctx.options.heartbeat_timeout_s);
  settings.clean_signal_stop_succeeds = ctx.options.clean_signal_stop_succeeds;
  // The failed worker's node replaces it; the other nodes' workers re-form with it.
  settings.in_process_allowed = true;
  settings.budget = &budget;
  settings.replacement_command = [&ctx, a](int local, int g) { return worker_command(ctx, a, local, g, true); };
  return supervise(group, relay, settings);
}

// A run id whose run already ended names an old run, not this one: joining it
// would wait for generations that never come, or claim its outcome.
void refuse_ended_run(const LaunchContext& ctx, comm::Store& store) {
  const std::string key = ctx.run_id + "/finished";
  if (!store.check({key})) return;
  throw_error(ErrorKind::kUsage, "--rdzv-id " + ctx.run_id,
              "run '" + ctx.run_id + "' in " + comm::redact_endpoint(ctx.endpoint) + " already ended (exit code " +
                  store.get(key, Millis{5000}) + "); use a fresh --rdzv-id for a new run");
}

// Tells nodes waiting to join a later generation that none will come.
void mark_finished(const LaunchContext& ctx, comm::Store& store, int code) {
  try {
    store.set(ctx.run_id + "/finished", std::to_string(code));
  } catch (const Error& e) {
    log_warn(std::string("cannot mark the run finished in the store: ") + e.what());
  }
}

// After a failed generation: claims a restart from the job-wide budget and
// writes the next generation's restart record. Returns the next generation,
// or nullopt (after saying why) when the job gives up.
std::optional<int> plan_restart(const LaunchOptions& o, const GroupOutcome& outcome, RestartBudget& budget) {
  if (!outcome.worker_failed && !outcome.peer_failed) {
    say(outcome.message);  // a signal to the launcher is never retried
    return std::nullopt;
  }
  const int next = outcome.generation + 1;
  const std::optional<int> used = budget.claim(next);
  if (!used) {
    say(outcome.message + (o.max_restarts > 0 ? "; " + budget_exhausted_text(o.max_restarts) : ""));
    return std::nullopt;
  }
  RestartRecord record = outcome.record;
  record.generation = next;
  budget.publish_record(record);
  say(outcome.message + "; restarting the workers (restart " + std::to_string(*used) + " of " +
      std::to_string(o.max_restarts) + ")");
  return next;
}

// The agent's endpoints, when asked for (--agent-port).
std::unique_ptr<AgentHttpServer> start_agent_endpoints(const LaunchOptions& o,
                                                       const std::shared_ptr<const AgentStatus>& status,
                                                       const std::shared_ptr<MetricsFeed>& feed) {
  if (o.agent_port < 0) return nullptr;
  AgentHttpOptions http;
  http.feed = feed;
  http.host = o.agent_host;
  http.port = o.agent_port;
  if (!o.token_file.empty()) http.token = read_secret_file(o.token_file, "--token-file");
  auto server = std::make_unique<AgentHttpServer>(http, status);
  say("agent endpoints at " + server->url() + " (/healthz, /readyz, /status, /metrics" +
      (http.token.empty() ? ")" : "; bearer token required)"));
  if (!is_loopback_host(o.agent_host) && http.token.empty())
    say("warning: the agent's endpoints listen on " + o.agent_host +
        " without a token: whoever reaches that address reads the run's figures; give --token-file");
  return server;
}

// The live dashboard (--dashboard-port; on by default): the agent's state and,
// on the host with rank 0's metrics.jsonl, the run as it trains.
std::unique_ptr<AgentHttpServer> start_dashboard(const LaunchOptions& o, const std::shared_ptr<const AgentStatus>& status,
                                                 const std::shared_ptr<MetricsFeed>& feed) {
  if (o.dashboard_port < 0) return nullptr;
  AgentHttpOptions http;
  http.host = o.dashboard_host;
  http.port = o.dashboard_port;
  http.feed = feed;
  http.dashboard = true;
  auto server = std::make_unique<AgentHttpServer>(http, status);
  say("dashboard at " + server->url() + "/ (Prometheus metrics at /metrics)");
  if (!is_loopback_host(o.dashboard_host))
    say("warning: the dashboard has no authentication and listens on " + o.dashboard_host +
        ": whoever reaches that address sees the run (loss, ranks, cost); prefer 127.0.0.1 and a forwarded port");
  return server;
}

// The run is over: its last metrics lines and the launcher's `finished`
// reach every open dashboard page, and each stream ends cleanly, before the
// servers stop. Bounded: a store that does not answer or a page that stopped
// reading costs a few seconds, never the exit.
void end_the_feed(const std::shared_ptr<MetricsFeed>& feed, AgentHttpServer* dashboard) {
  if (!feed) return;
  if (!feed->finish(std::chrono::seconds(5))) log_warn("dashboard: the last read of the run's metrics did not finish in 5 s");
  if (dashboard && !dashboard->finish_streams(std::chrono::seconds(3)))
    log_warn("dashboard: a page did not take the end of the run in 3 s; its stream is cut");
}

}  // namespace

int run_launcher(const LaunchOptions& options) {
  validate_launch_options(options);
  OwnedStoreDir owned_store;
  const LaunchContext ctx = resolve(options, owned_store);
  const auto status = std::make_shared<AgentStatus>(ctx.run_id);
  // Both servers show the run's figures: one follower of its metrics for both.
  std::shared_ptr<MetricsFeed> feed;
  std::unique_ptr<AgentHttpServer> endpoints, dashboard;
  {
    const RelaySignalsBlocked blocked;  // their threads leave signals to this one
    if (options.dashboard_port >= 0 || options.agent_port >= 0)
      feed = std::make_shared<MetricsFeed>(ctx.endpoint, ctx.run_id, status);
    endpoints = start_agent_endpoints(options, status, feed);
    dashboard = start_dashboard(options, status, feed);
  }
  const std::shared_ptr<comm::Store> store = comm::open_store(ctx.endpoint, Millis{10'000}, millis(options.store_timeout_s));
  // The supervisor's calls fail fast: one call that hangs (an etcd member
  // without a leader) must not hold this node's keep-alive back for long
  // enough that the other nodes judge it lost.
  const Millis watch_call_limit =
      options.heartbeat_timeout_s > 0 ? std::clamp(millis(options.heartbeat_timeout_s) / 4, Millis{250}, Millis{2000})
                                      : Millis{2000};
  const std::shared_ptr<comm::Store> watch_store = comm::open_store(ctx.endpoint, watch_call_limit, Millis{0});
  SignalRelay relay;
  RestartBudget budget(store, ctx.run_id, options.max_restarts);
  const auto finish = [&](int code, const std::string& message) {
    status->finished(code, message);
    end_the_feed(feed, dashboard.get());
    return code;
  };
  refuse_ended_run(ctx, *store);
  for (int generation = starting_generation(ctx, store);;) {
    std::optional<GroupOutcome> outcome;
    try {
      outcome = run_generation(ctx, store, watch_store, generation, relay, budget, *status);
      if (!outcome) {
        if (const std::optional<int> ended = wait_for_next_generation(ctx, store, generation, relay)) {
          const std::string how = *ended == 0 ? "finished" : "gave up with exit code " + std::to_string(*ended);
          say("run '" + ctx.run_id + "' " + how + " before this node could join");
          return finish(*ended, "the run " + how + " before this node could join");
        }
        ++generation;
        continue;
      }
    } catch (const Interrupted& interrupted) {
      say("received " + signal_name(interrupted.signal) + " during the rendezvous; no workers were running");
      return finish(128 + interrupted.signal, "stopped by " + signal_name(interrupted.signal));
    }
    if (outcome->exit_code == 0) {
      log_info("launch: all workers of run '" + ctx.run_id + "' exited with status 0");
      mark_finished(ctx, *store, 0);
      return finish(0, "every worker exited with status 0");
    }
    const std::optional<int> next = plan_restart(options, *outcome, budget);
    if (!next) {
      // A node stopped by a signal leaves the job to the others; a job that gave up is over.
      if (outcome->worker_failed || outcome->peer_failed) mark_finished(ctx, *store, outcome->exit_code);
      return finish(outcome->exit_code, outcome->message);
    }
    status->restarting(outcome->message);
    generation = *next;
  }
}

}  // namespace gradmesh::elastic
