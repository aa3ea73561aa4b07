#include "gradmesh/cli/bench_scaling_command.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "gradmesh/cli/self_executable.h"
#include "gradmesh/core/error.h"
#include "gradmesh/parallel/gradient_reducer.h"
#include "gradmesh/scaling/cost_model.h"
#include "gradmesh/scaling/probe.h"
#include "gradmesh/scaling/scaling_report.h"
#include "gradmesh/scaling/units.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/model_factory.h"
#include "gradmesh/train/rank_setup.h"
#include "gradmesh/train/training_data.h"

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

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `argv` with stdout and stderr into `log`; its exit status (128 + signal when killed).
int run_child(const std::vector<std::string>& argv, const std::string& log) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) throw_error(ErrorKind::kIo, "gradmesh bench scaling", "cannot start a probe (fork failed)");
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void run_or_fail(const std::vector<std::string>& argv, const std::string& log, const std::string& what) {
  const int code = run_child(argv, log);
  if (code == 0) return;
  std::string tail = read_text(log);
  if (tail.size() > 2000) tail = "..." + tail.substr(tail.size() - 2000);
  throw_error(ErrorKind::kIo, what, "exited with status " + std::to_string(code) + ":\n" + tail);
}

// The gradient buckets every step all-reduces: the reducer's own plan over the model's parameters.
std::vector<double> gradient_buckets(const train::Config& config) {
  const auto data = train::load_training_data(config, /*with_test=*/false);
  const std::unique_ptr<nn::Model> model =
      train::build_model(config.model, data->geometry, config.train.seed, nn::ParameterInit::kDeferred);
  const parallel::ReducerOptions o = train::reducer_options(config.parallel);
  const double element = o.bf16 ? 2.0 : 4.0;
  std::vector<double> out;
  for (const parallel::Bucket& b : parallel::plan_buckets(model->parameters(), o.first_bucket_bytes, o.bucket_bytes))
    out.push_back(static_cast<double>(b.numel) * element);
  return out;
}

std::string link_text(const scaling::LinkCost& l) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "latency %.1f us, %.2f Gbit/s", l.alpha_s * 1e6, 8.0 / l.beta_s_per_byte / 1e9);
  return buf;
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
  if (::mkdtemp(pattern) == nullptr) throw_error(ErrorKind::kIo, "/tmp", "cannot create the probes' directory");
  const fs::path dir(pattern);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } cleanup{dir};
  const std::string self = self_executable();

  scaling::ScalingStudy study;
  study.config = args.config;
  study.global_batch = batch;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (int n : workers) {
    std::vector<std::string> argv = {self, "train", args.config};
    if (n > 1) argv.insert(argv.end(), {"--nproc-per-node", std::to_string(n)});
    std::vector<std::string> sets = args.overrides;
    const std::string run = "probe-" + std::to_string(n);
    sets.insert(sets.end(), {"train.max_steps=" + std::to_string(args.warmup + args.steps), "output.dir=" + dir.string(),
                             "output.run_id=" + run, "output.report=false", "output.trace_steps=0",
                             "output.save_weights=false", "train.log_every=" + std::to_string(std::min<int64_t>(5, args.steps)),
                             "train.eval_every_epoch=false", "checkpoint.every_steps=0", "checkpoint.every_seconds=0"});
    for (const std::string& s : sets) argv.insert(argv.end(), {"--set", s});
    std::fprintf(stderr, "probe: %d worker%s, %lld steps after %lld of warm-up%s\n", n, n == 1 ? "" : "s",
                 static_cast<long long>(args.steps), static_cast<long long>(args.warmup),
                 static_cast<unsigned>(n) > cores ? " (more workers than cores: they time-share)" : "");
    run_or_fail(argv, (dir / (run + ".log")).string(), "the probe with " + std::to_string(n) + " workers");
    study.probes.push_back(scaling::read_probe((dir / run / "metrics.jsonl").string(), n, batch, args.warmup));
  }

  // The transport's all-reduce, at the sizes the buckets have, on 2 and on the most workers probed.
  std::vector<scaling::AllreduceSample> samples;
  const double largest = *std::max_element(buckets.begin(), buckets.end());
  for (int n : {2, std::max(2, workers.back())}) {
    if (!samples.empty() && n == 2) continue;
    const std::string log = (dir / ("comm-" + std::to_string(n) + ".log")).string();
    std::fprintf(stderr, "probe: all-reduce on %d ranks (%s backend)\n", n, config.parallel.backend.c_str());
    run_or_fail({self, "launch", "--nproc-per-node", std::to_string(n), "--", self, "bench", "comm", "--backend",
                 config.parallel.backend, "--json", "--min-bytes", "4096", "--max-bytes",
                 std::to_string(static_cast<int64_t>(std::max(largest, 65536.0)))},
                log, "the all-reduce probe on " + std::to_string(n) + " ranks");
    for (const scaling::AllreduceSample& s : scaling::read_comm_samples(read_text(log), log)) samples.push_back(s);
  }
  const scaling::LinkCost measured = scaling::fit_link(samples);
  const double hd = scaling::halving_doubling_limit(samples);
  // The compute line from probes that had a core each; more workers than cores time-share.
  std::vector<scaling::ProbeMeasurement> fitted;
  for (const auto& p : study.probes)
    if (static_cast<unsigned>(p.workers) <= cores) fitted.push_back(p);
  if (fitted.empty()) fitted = study.probes;
  study.here = scaling::fit_step_model(fitted, measured, buckets, hd);
  study.here_link = config.parallel.backend + " on this machine, fitted: " + link_text(measured);
  study.target = study.here;
  study.target_link = "the same network";
  if (target) {
    study.target.link = *target;
    study.target_link = args.bandwidth + " links, " + args.latency + " latency";
  }
  study.curve = scaling::predict_curve(study.target, batch, args.max_workers);

  std::printf("%s", scaling::scaling_table(study).c_str());
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream out(path);
    if (!(out << text)) throw_error(ErrorKind::kIo, path, "cannot write");
    std::printf("wrote %s\n", path.c_str());
  };
  if (!args.json_path.empty()) write(args.json_path, scaling::scaling_json(study));
  if (!args.svg_path.empty()) write(args.svg_path, scaling::scaling_svg(study));
  return 0;
}

}  // namespace gradmesh::cli
