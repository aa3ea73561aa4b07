#include "gradmesh/cli/bench_scaling_command.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "gradmesh/checkpoint/checkpoint_io.h"
#include "gradmesh/cli/self_executable.h"
#include "gradmesh/core/error.h"
#include "gradmesh/parallel/gradient_reducer.h"
#include "gradmesh/scaling/cost_model.h"
#include "gradmesh/scaling/emulated_cluster.h"
#include "gradmesh/scaling/probe.h"
#include "gradmesh/scaling/scaling_report.h"
#include "gradmesh/scaling/units.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/model_factory.h"
#include "gradmesh/train/rank_setup.h"
#include "gradmesh/train/training_data.h"
#include "gradmesh/core/private_files.h"

namespace gradmesh::cli {
namespace {

namespace fs = std::filesystem;

std::vector<int> parse_workers(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long n = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || n < 1 || n > 256)
      throw_error(ErrorKind::kUsage, "--workers '" + text + "'", "expected worker counts from 1 to 256, such as 1,2,4");
    out.push_back(static_cast<int>(n));
  }
  if (out.empty()) throw_error(ErrorKind::kUsage, "--workers", "name at least one worker count");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_interrupt(int signal) { g_interrupted = signal; }

// Starts `argv` in a process group of its own, stdout and stderr into `log`.
std::string signal_text(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "SIGHUP";
}

void throw_if_interrupted() {
  if (g_interrupted != 0)
    throw_error(ErrorKind::kIo, "gradmesh bench scaling", "interrupted by " + signal_text(g_interrupted));
}

pid_t spawn(const std::vector<std::string>& argv, const std::string& log) {
  std::fflush(stdout);
  std::fflush(stderr);
  // Everything the child needs is built before fork: it only calls
  // async-signal-safe functions until exec.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw_error(ErrorKind::kIo, "gradmesh bench scaling", "cannot start a probe (fork failed)");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, kPrivateFileMode);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so a signal to the group can never come before the child made it
  return pid;
}

std::string log_tail(const std::string& log) {
  std::string tail = checkpoint::read_file_bytes(log);
  return tail.size() > 2000 ? "..." + tail.substr(tail.size() - 2000) : tail;
}

// Runs the commands at once (one per emulated host, or one) and waits for
// all; when one fails, or SIGINT/SIGTERM arrives, the others are stopped
// and Error(kIo) names `what` with the failing command's last output.
void run_together(const std::vector<std::vector<std::string>>& commands, const std::vector<std::string>& logs,
                  const std::string& what) {
  throw_if_interrupted();
  std::vector<pid_t> pids;
  for (size_t i = 0; i < commands.size(); ++i) pids.push_back(spawn(commands[i], logs[i]));
  std::vector<bool> done(pids.size(), false);
  std::string failure;
  size_t left = pids.size();
  while (left > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0 && errno == EINTR && g_interrupted != 0 && failure.empty()) {
      failure = "interrupted by " + signal_text(g_interrupted);
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) ::kill(-pids[i], SIGTERM);
      continue;
    }
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] != pid || done[i]) continue;
      done[i] = true;
      --left;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 0 && failure.empty()) {
        failure = "exited with status " + std::to_string(code) + ":\n" + log_tail(logs[i]);
        for (size_t k = 0; k < pids.size(); ++k)
          if (!done[k]) ::kill(-pids[k], SIGTERM);
      }
    }
  }
  if (!failure.empty()) throw_error(ErrorKind::kIo, what, failure);
  throw_if_interrupted();  // a signal that came while no child was waited for
}

// "netns:K" -> K.
int parse_hosts(const std::string& text) {
  char* end = nullptr;
  const long k = text.rfind("netns:", 0) == 0 ? std::strtol(text.c_str() + 6, &end, 10) : 0;
  if (k < 1 || k > 64 || end == nullptr || *end != '\0')
    throw_error(ErrorKind::kUsage, "--hosts '" + text + "'", "expected netns:K, K emulated hosts from 1 to 64");
  return static_cast<int>(k);
}

// What every step all-reduces: the reducer's own bucket plan over the
// model's parameters; with PowerSGD its two reductions (P with the exact
// gradients, then Q); with local steps the parameters (every H steps, which
// the step model divides by).
std::vector<double> gradient_buckets(const train::Config& config) {
  const auto data = train::load_training_data(config, /*with_test=*/false);
  const std::unique_ptr<nn::Model> model =
      train::build_model(config.model, data->geometry, config.train.seed, nn::ParameterInit::kDeferred);
  if (config.parallel.local_steps > 1) return {static_cast<double>(model->num_parameters()) * 4.0};
  if (config.parallel.compression == "powersgd") {
    parallel::PowerSgdOptions p;
    p.rank = static_cast<int>(config.parallel.powersgd_rank);
    const parallel::PowerSgdCompressor c(model->parameters(), p);
    const double q = c.q_floats();
    return {(static_cast<double>(c.wire_floats()) - q) * 4.0, q * 4.0};
  }
  const parallel::ReducerOptions o = train::reducer_options(config.parallel);
  const double element = o.bf16 ? 2.0 : 4.0;
  std::vector<double> out;
  for (const parallel::Bucket& b : parallel::plan_buckets(model->parameters(), o.first_bucket_bytes, o.bucket_bytes))
    out.push_back(static_cast<double>(b.numel) * element);
  return out;
}

// Runs a probe's command on n workers: under the launcher on this machine,
// or one launcher per emulated host.
class ProbeRunner {
 public:
  ProbeRunner(fs::path dir, scaling::EmulatedCluster* cluster, std::string self)
      : dir_(std::move(dir)), cluster_(cluster), self_(std::move(self)) {}

  // Runs `argv` on `n` workers; returns the first log's path. `name` names the logs, `what` the probe in errors.
  std::string run(int n, const std::vector<std::string>& argv, const std::string& name, const std::string& what) {
    std::vector<std::vector<std::string>> commands;
    std::vector<std::string> logs;
    ++round_;
    if (!cluster_) {
      std::vector<std::string> c;  // `argv` itself, or under the launcher
      if (n > 1) c = {self_, "launch", "--nproc-per-node", std::to_string(n), "--"};
      c.insert(c.end(), argv.begin(), argv.end());
      commands.push_back(c);
      logs.push_back((dir_ / (name + ".log")).string());
    } else {
      for (int host = 0; host < n; ++host) {
        std::vector<std::string> c = cluster_->exec_prefix(host);
        c.insert(c.end(), {"env", "GRADMESH_HOSTNAME=" + cluster_->address(host), self_, "launch", "--nnodes",
                           std::to_string(n), "--node-rank", std::to_string(host), "--nproc-per-node", "1",
                           "--rdzv-endpoint", cluster_->store_endpoint(), "--rdzv-id",
                           name + "-" + std::to_string(::getpid()) + "-" + std::to_string(round_), "--"});
        c.insert(c.end(), argv.begin(), argv.end());
        for (std::string& word : c)  // each host writes its own run directory
          if (word == "output.dir=" + dir_.string()) word = "output.dir=" + (dir_ / ("host" + std::to_string(host))).string();
        commands.push_back(c);
        logs.push_back((dir_ / (name + "-host" + std::to_string(host) + ".log")).string());
      }
    }
    run_together(commands, logs, what);
    return logs.front();
  }

  const std::string& self() const { return self_; }

 private:
  fs::path dir_;
  scaling::EmulatedCluster* cluster_;
  std::string self_;
  int round_ = 0;
};

// The transport's all-reduce, at the sizes the buckets have, on every
// worker count probed (2 when only one was): gloo runs other algorithms
// on odd counts, and one alpha and beta are fitted over all of them.
std::vector<scaling::AllreduceSample> probe_allreduce(ProbeRunner& probes, const std::vector<int>& workers,
                                                      const std::vector<double>& buckets, const std::string& backend,
                                                      const scaling::EmulatedCluster* cluster) {
  std::vector<scaling::AllreduceSample> samples;
  const double largest = *std::max_element(buckets.begin(), buckets.end());
  std::vector<int> comm_counts;
  for (int n : workers)
    if (n >= 2) comm_counts.push_back(n);
  if (comm_counts.empty()) comm_counts.push_back(2);
  for (int n : comm_counts) {
    if (cluster && n > cluster->hosts()) break;
    std::fprintf(stderr, "probe: all-reduce on %d ranks (%s backend)\n", n, backend.c_str());
    const std::string log =
        probes.run(n, {probes.self(), "bench", "comm", "--backend", backend, "--json", "--min-bytes", "4096",
                       "--max-bytes", std::to_string(static_cast<int64_t>(std::max(largest, 65536.0)))},
                   "comm-" + std::to_string(n), "the all-reduce probe on " + std::to_string(n) + " ranks");
    for (const scaling::AllreduceSample& s : scaling::read_comm_samples(checkpoint::read_file_bytes(log), log))
      samples.push_back(s);
  }
  if (samples.size() < 2)
    throw_error(ErrorKind::kUsage, "--hosts", "the link is fitted from all-reduces on 2 or more hosts: emulate at least 2");
  return samples;
}

// The emulated hosts, when asked for (--hosts): every probe then runs one worker per host over gloo.
std::unique_ptr<scaling::EmulatedCluster> start_cluster(const BenchScalingArgs& args, int most_workers, const fs::path& dir) {
  if (args.hosts.empty()) return nullptr;
  const int hosts = parse_hosts(args.hosts);
  if (most_workers > hosts)
    throw_error(ErrorKind::kUsage, "--workers",
                std::to_string(most_workers) + " workers need as many hosts; --hosts has " + std::to_string(hosts));
  auto cluster = std::make_unique<scaling::EmulatedCluster>(hosts, args.link_rate, dir.string());
  throw_if_interrupted();
  std::fprintf(stderr, "emulated cluster: %d hosts (network namespaces %s .. %s), %s links (tc tbf), a Redis store on host 0\n",
               hosts, cluster->namespaces().front().c_str(), cluster->namespaces().back().c_str(),
               args.link_rate.c_str());
  return cluster;
}

void write_outputs(const BenchScalingArgs& args, const scaling::ScalingStudy& study) {
  std::printf("%s", scaling::scaling_table(study).c_str());
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream out(path);
    if (!(out << text)) throw_error(ErrorKind::kIo, path, "cannot write");
    std::printf("wrote %s\n", path.c_str());
  };
  if (!args.json_path.empty()) write(args.json_path, scaling::scaling_json(study));
  if (!args.svg_path.empty()) write(args.svg_path, scaling::scaling_svg(study));
  if (!args.report_path.empty()) write(args.report_path, scaling::scaling_html(study));
}

}  // namespace

int run_bench_scaling(const BenchScalingArgs& args) {
  const std::vector<int> workers = parse_workers(args.workers);
  if (args.bandwidth.empty() != args.latency.empty())
    throw_error(ErrorKind::kUsage, args.bandwidth.empty() ? "--latency" : "--bandwidth",
                "give --bandwidth and --latency together (the network to predict for)");
  // The network to predict for, checked before any probe runs.
  std::optional<scaling::LinkCost> target;
  if (!args.bandwidth.empty())
    target = scaling::link_of(scaling::parse_rate(args.bandwidth, "--bandwidth"),
                              scaling::parse_latency(args.latency, "--latency"));
  if (args.steps < 1 || args.warmup < 0)
    throw_error(ErrorKind::kUsage, "--steps", "needs at least one measured step and a warm-up >= 0");
  const train::Config config = train::load_config(args.config, args.overrides);
  const int64_t batch = config.train.batch_size;
  if (workers.back() > batch)
    throw_error(ErrorKind::kUsage, "--workers",
                std::to_string(workers.back()) + " workers need train.batch_size >= that (it is " + std::to_string(batch) + ")");
  const std::vector<double> buckets = gradient_buckets(config);

  char pattern[] = "/tmp/gradmesh-scaling-XXXXXX";
  if (args.keep_dir.empty() && ::mkdtemp(pattern) == nullptr)
    throw_error(ErrorKind::kIo, "/tmp", "cannot create the probes' directory");
  const fs::path dir = args.keep_dir.empty() ? fs::path(pattern) : fs::absolute(args.keep_dir);
  if (!args.keep_dir.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw_error(ErrorKind::kIo, args.keep_dir, "cannot create the probes' directory: " + ec.message());
  }
  struct Cleanup {
    fs::path dir;
    bool keep;
    ~Cleanup() {
      std::error_code ignored;
      if (!keep) fs::remove_all(dir, ignored);
    }
  } cleanup{dir, !args.keep_dir.empty()};
  const std::string self = self_executable();
  // Ctrl-C or SIGTERM stops the probes, and the cleanup below still runs.
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGHUP, &action, nullptr);

  const std::unique_ptr<scaling::EmulatedCluster> cluster = start_cluster(args, workers.back(), dir);
  const std::string backend = cluster ? "gloo" : config.parallel.backend;
  ProbeRunner probes{dir, cluster.get(), self};

  scaling::ScalingStudy study;
  study.config = args.config;
  study.global_batch = batch;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (int n : workers) {
    std::vector<std::string> argv = {self, "train", args.config};
    std::vector<std::string> sets = args.overrides;
    const std::string run = "probe-" + std::to_string(n);
    sets.insert(sets.end(), {"train.max_steps=" + std::to_string(args.warmup + args.steps), "output.dir=" + dir.string(),
                             "output.run_id=" + run, "output.report=false", "output.trace_steps=0",
                             "output.save_weights=false", "train.log_every=" + std::to_string(std::min<int64_t>(5, args.steps)),
                             "train.eval_every_epoch=false", "checkpoint.every_steps=0", "checkpoint.every_seconds=0"});
    if (cluster) sets.push_back("parallel.backend=gloo");
    for (const std::string& s : sets) argv.insert(argv.end(), {"--set", s});
    std::fprintf(stderr, "probe: %d worker%s%s, %lld steps after %lld of warm-up%s\n", n, n == 1 ? "" : "s",
                 cluster ? " (one per emulated host)" : "", static_cast<long long>(args.steps),
                 static_cast<long long>(args.warmup),
                 static_cast<unsigned>(n) > cores ? " (more workers than cores: they time-share)" : "");
    probes.run(n, argv, run, "the probe with " + std::to_string(n) + " workers");
    const fs::path run_dir = cluster ? dir / "host0" / run : dir / run;
    study.probes.push_back(scaling::read_probe((run_dir / "metrics.jsonl").string(), n, batch, args.warmup));
  }

  const std::vector<scaling::AllreduceSample> samples = probe_allreduce(probes, workers, buckets, backend, cluster.get());
  const scaling::LinkCost measured = scaling::fit_link(samples);
  const double hd = scaling::halving_doubling_limit(samples);
  // Every probe (and emulated host) ran on this machine's cores: the fit
  // takes the time-sharing out, and `here` puts it back for the probes.
  scaling::StepModel shape;
  shape.communicate_every = std::max<int64_t>(config.parallel.local_steps, 1);
  shape.overlaps_backward = config.parallel.local_steps <= 1 && config.parallel.compression != "powersgd";
  study.here = scaling::fit_step_model(study.probes, measured, buckets, hd, static_cast<int>(cores), shape);
  study.here_link = cluster ? "gloo between " + std::to_string(cluster->hosts()) + " emulated hosts on " + args.link_rate +
                                  " links, fitted: " + scaling::describe_link(measured)
                            : backend + " on this machine, fitted: " + scaling::describe_link(measured);
  // The curve is for workers with cores of their own, each as fast as one here.
  study.target = study.here;
  study.target.shared_cores = 0;
  study.target_link = "the same network, every worker with a core of its own";
  if (target) {
    study.target.link = *target;
    study.target_link = args.bandwidth + " links, " + args.latency + " latency, every worker with a core of its own";
  }
  study.curve = scaling::predict_curve(study.target, batch, args.max_workers);

  write_outputs(args, study);
  return 0;
}

}  // namespace gradmesh::cli
