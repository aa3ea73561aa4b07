#include "gradmesh/cli/commands.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/cli/data_command.h"
#include "gradmesh/data/shard_files.h"
#include "gradmesh/cli/self_executable.h"
#include "gradmesh/bench/comm_bench.h"
#include "gradmesh/bench/gemm_bench.h"
#include "gradmesh/bench/http_load.h"
#include "gradmesh/kernels/gemm_bf16.h"
#include "gradmesh/checkpoint/checkpoint_export.h"
#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/comm/environment.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/exit_codes.h"
#include "gradmesh/core/log.h"
#include "gradmesh/data/token_file.h"
#include "gradmesh/elastic/launch_options.h"
#include "gradmesh/elastic/launcher.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/obs/json_object.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/evaluate.h"
#include "gradmesh/train/model_factory.h"
#include "gradmesh/train/stop_request.h"
#include "gradmesh/train/trainer.h"
#include "gradmesh/train/training_data.h"

namespace gradmesh::cli {

namespace {

// `gradmesh train --nproc-per-node K`: the same command, K times, under the launcher.
int launch_training(const std::string& config_path, const std::vector<std::string>& overrides,
                    const std::string& nproc_per_node, const std::string& resume) {
  elastic::LaunchOptions o;
  o.nproc_per_node = elastic::parse_nproc_per_node(nproc_per_node);
  o.command = {self_executable(), "train", config_path};
  if (!resume.empty()) o.command.insert(o.command.end(), {"--resume", resume});
  for (const std::string& override_text : overrides) {
    o.command.push_back("--set");
    o.command.push_back(override_text);
  }
  return elastic::run_launcher(o);
}

}  // namespace

int run_train(const std::string& config_path, const std::vector<std::string>& overrides,
              const std::string& nproc_per_node, const std::string& resume) {
  // Parsed before any worker starts, so a config error is reported once.
  const train::Config config = train::load_config(config_path, overrides);
  if (!nproc_per_node.empty() && !comm::launched_as_worker())
    return launch_training(config_path, overrides, nproc_per_node, resume);
  train::RunOptions run_options;
  run_options.resume = resume;
  std::shared_ptr<comm::ProcessGroup> group;
  if (comm::launched_as_worker()) {
    const comm::WorkerEnvironment env = comm::read_worker_environment();
    run_options.generation = env.generation;
    run_options.replacement = env_string("GRADMESH_REPLACEMENT") == "1";
    comm::ProcessGroupOptions options;
    options.backend = config.parallel.backend;
    options.timeout = train::collective_timeout(config.parallel);
    group = comm::init_process_group(env, options);
  }
  train::catch_stop_signal();
  train::TrainSummary s;
  try {
    s = train::run_training(config, stderr, group, run_options);
  } catch (const Error& e) {
    // A failed collective or store call may be another node's failure: the
    // launcher looks for one before it blames this worker.
    if (!group || group->size() == 1 || (e.kind() != ErrorKind::kComm && e.kind() != ErrorKind::kTimeout)) throw;
    std::fflush(stdout);
    std::fprintf(stderr, "gradmesh: error: %s\n", e.what());
    return kPeerTroubleExitCode;
  }
  if (s.stopped && !train::stop_signal_received()) {
    // Checked at exit: a SIGTERM that reached this rank just after another's is still its own.
    log_warn("stopped after step " + std::to_string(s.steps) +
             " because another rank was asked to stop (SIGTERM there); the run did not finish: continue it with "
             "--resume auto (exit " + std::to_string(kStoppedByAnotherRankExitCode) + ")");
    return kStoppedByAnotherRankExitCode;
  }
  if (group && group->rank() != 0) return 0;  // rank 0 speaks for the job
  if (s.stopped) {
    std::printf("stopped after step %lld on SIGTERM; %s\n", static_cast<long long>(s.steps),
                s.checkpoint_path.empty() ? "no checkpoint could be written"
                                          : ("checkpoint " + s.checkpoint_path + "; continue with --resume auto").c_str());
    return 0;
  }
  const std::string tokens = s.tokens_per_s > 0 ? " (" + std::to_string(std::llround(s.tokens_per_s)) + " tokens/s)" : "";
  // A resumed run's rate is this process's: its own steps over its own time.
  const std::string own = s.resumed_from_step < 0 ? ""
                          : "; this process trained steps " + std::to_string(s.resumed_from_step + 1) + "-" +
                                std::to_string(s.steps) + " (" + std::to_string(s.samples_this_process) + " samples)";
  char of_roof[48] = "";
  if (s.gemm_roof_gflops > 0)
    std::snprintf(of_roof, sizeof of_roof, " (%.2f of the roof)", s.gemm_gflops_per_s / s.gemm_roof_gflops);
  std::printf("trained %lld steps (%lld samples) on %d rank%s%s in %.1f s: %.0f samples/s%s, %.1f GEMM GFLOP/s%s\n",
              static_cast<long long>(s.steps), static_cast<long long>(s.samples), s.world_size,
              s.world_size == 1 ? "" : "s", own.c_str(), s.train_seconds, s.samples_per_s, tokens.c_str(),
              s.gemm_gflops_per_s, of_roof);
  if (s.restarts > 0 || s.checkpoints_failed > 0 || s.resumed_from_step >= 0)
    std::printf("the whole run: %d restart%s, %lld checkpoint%s saved, %lld failed\n", s.restarts,
                s.restarts == 1 ? "" : "s", static_cast<long long>(s.checkpoints_saved),
                s.checkpoints_saved == 1 ? "" : "s", static_cast<long long>(s.checkpoints_failed));
  if (s.world_size > 1)
    std::printf("waiting for gradients: %.1f%% of step time (after overlap with backward)\n",
                s.exposed_comm_share * 100);
  if (s.evaluated && config.data.format == "tokens")
    std::printf("validation loss %.4f (perplexity %.2f), next-token accuracy %.4f\n", s.test_loss,
                std::exp(s.test_loss), s.test_accuracy);
  else if (s.evaluated)
    std::printf("test loss %.4f, test accuracy %.4f\n", s.test_loss, s.test_accuracy);
  if (!s.weights_path.empty()) std::printf("weights: %s\n", s.weights_path.c_str());
  std::printf("metrics: %s/metrics.jsonl\n", s.run_dir.c_str());
  if (config.output.report) std::printf("report: %s/report.html\n", s.run_dir.c_str());
  return 0;
}

namespace {

void write_eval_logits(nn::Model& model, const data::SampleSource& source, const std::string& path) {
  autograd::NoGradGuard no_grad;
  model.set_training(false);
  const int64_t n = std::min<int64_t>(4, source.count()), sample = source.sample_numel();
  Shape shape = source.sample_shape();
  shape.insert(shape.begin(), n);
  Tensor inputs = Tensor::empty(shape);
  std::vector<int32_t> targets(static_cast<size_t>(n * source.targets_per_sample()));
  for (int64_t i = 0; i < n; ++i)
    source.fill(0, i, inputs.data() + i * sample, targets.data() + i * source.targets_per_sample());
  const Tensor logits = model.forward(autograd::Variable(inputs)).value();
  checkpoint::write_safetensors(path, {{"inputs", inputs}, {"logits", logits}}, {}, DType::kF32);
}

}  // namespace

int run_eval(const std::string& config_path, const std::vector<std::string>& overrides, const std::string& weights,
             const std::string& logits_path) {
  const train::Config config = train::load_config(config_path, overrides);
  kernels::set_num_threads(static_cast<int>(config.train.threads));
  const std::shared_ptr<const train::TrainingData> data = train::load_training_data(config, /*with_test=*/true);
  checkpoint::SafetensorsFile file = checkpoint::read_safetensors(weights);
  std::unique_ptr<nn::Model> model = train::build_model(config.model, data->geometry, config.train.seed);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& t : file.tensors) tensors.emplace_back(t.name, t.tensor);
  model->load_parameters(tensors, weights);
  if (!logits_path.empty()) write_eval_logits(*model, *data->test, logits_path);
  const train::EvalResult r = train::evaluate(*model, *data->test);
  const obs::JsonObject line = obs::JsonObject().add("weights", weights).add("samples", r.samples)
                                   .add("test_loss", r.loss).add("test_accuracy", r.accuracy);
  std::printf("%s\n", line.str().c_str());
  return 0;
}

namespace {

}  // namespace

int run_inspect(const std::string& path) {
  if (data::is_http_location(path) || std::filesystem::exists(std::filesystem::path(path) / "index.json"))
    return inspect_set(path);
  if (!std::filesystem::is_directory(path)) {
    std::fputs(checkpoint::describe_safetensors(checkpoint::read_safetensors(path)).c_str(), stdout);
    return 0;
  }
  // A checkpoints or run directory shows its newest checkpoint, verified or
  // not: a corrupt newest checkpoint is exactly what inspect should expose.
  std::string step_dir = path;
  if (!checkpoint::is_step_directory(path)) {
    const std::string dir = std::filesystem::is_directory(path + "/checkpoints") ? path + "/checkpoints" : path;
    const std::vector<std::string> found = checkpoint::list_checkpoints(dir);
    if (found.empty()) throw_error(ErrorKind::kIo, path, "holds no checkpoint (no step-<N> directory in '" + dir + "')");
    step_dir = found.front();
    std::printf("newest of %zu checkpoint(s) in %s\n", found.size(), dir.c_str());
  }
  bool all_verified = false;
  std::fputs(checkpoint::describe_checkpoint(step_dir, &all_verified).c_str(), stdout);
  if (!all_verified) std::fprintf(stderr, "gradmesh inspect: %s does not verify against its manifest\n", step_dir.c_str());
  return all_verified ? 0 : 1;
}

int run_export(const std::string& checkpoint, const std::string& output, bool with_optimizer) {
  const checkpoint::ExportResult r = checkpoint::export_checkpoint(checkpoint, output, with_optimizer);
  std::printf("exported step %lld of %s\n", static_cast<long long>(r.step), r.checkpoint.c_str());
  std::printf("  parameters: %s (%lld tensors)\n", r.weights_path.c_str(), static_cast<long long>(r.weights_tensors));
  if (!r.optimizer_path.empty())
    std::printf("  optimizer state: %s (%lld tensors)\n", r.optimizer_path.c_str(),
                static_cast<long long>(r.optimizer_tensors));
  return 0;
}

int run_bench_gemm(int64_t n, int threads, int repeats, const std::string& dtype, bool json) {
  if (dtype != "f32" && dtype != "bf16")
    throw_error(ErrorKind::kUsage, "--dtype", "expected f32 or bf16, got '" + dtype + "'");
  const bench::GemmBenchResult r =
      dtype == "bf16" ? bench::bench_bf16_gemm(n, threads, repeats) : bench::bench_sgemm(n, threads, repeats);
  if (json)
    std::fputs(bench::format_gemm_json(r).c_str(), stdout);
  else if (dtype == "bf16")
    std::printf("bf16 gemm (float32 accumulation) n=%lld threads=%d: %.2f ms, %.1f GFLOP/s (median of %d); %s\n",
                static_cast<long long>(r.n), r.threads, r.seconds_median * 1e3, r.gflops, repeats,
                kernels::bf16_support().describe().c_str());
  else
    std::printf("sgemm n=%lld threads=%d: %.2f ms, %.1f GFLOP/s (median of %d)\n", static_cast<long long>(r.n), r.threads,
                r.seconds_median * 1e3, r.gflops, repeats);
  return 0;
}

int run_bench_http(const std::string& url, const std::string& method, const std::string& body_file,
                   const std::vector<std::string>& headers, double rate, int connections, double seconds, double warmup,
                   bool json) {
  bench::HttpLoadOptions o;
  bench::parse_http_url(url, o, "url");
  if (!body_file.empty()) {
    std::ifstream in(body_file, std::ios::binary);
    if (!in) throw_error(ErrorKind::kUsage, "--body-file", "cannot read '" + body_file + "'");
    o.body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  o.method = !method.empty() ? method : body_file.empty() ? "GET" : "POST";
  for (const std::string& h : headers) {
    const size_t colon = h.find(':');
    if (colon == std::string::npos || colon == 0)
      throw_error(ErrorKind::kUsage, "--header", "is '" + h + "'; expected 'Name: value'");
    const size_t value = h.find_first_not_of(' ', colon + 1);
    o.headers.emplace_back(h.substr(0, colon), value == std::string::npos ? "" : h.substr(value));
  }
  o.rate = rate;
  o.connections = connections;
  o.seconds = seconds;
  o.warmup_seconds = warmup;
  const bench::HttpLoadResult r = bench::run_http_load(o);
  if (json) {
    std::fputs(bench::format_http_load_json(o, r).c_str(), stdout);
  } else {
    std::printf("offered %.0f requests/s, answered %.0f/s over %.1f s (%d connections): p50 %.3f ms, p99 %.3f ms, "
                "max %.3f ms; %lld non-2xx, %lld unanswered\n",
                r.offered_rate, r.achieved_rate, seconds, connections, r.p50_ms, r.p99_ms, r.max_ms,
                static_cast<long long>(r.non_2xx), static_cast<long long>(r.unanswered));
  }
  return r.unanswered > 0 ? 1 : 0;
}

int run_bench_comm(const std::string& backend, const std::string& op, int64_t min_bytes, int64_t max_bytes, int iters,
                   bool json) {
  if (!comm::launched_as_worker())
    throw_error(ErrorKind::kUsage, "bench comm",
                "runs inside a launched job: gradmesh launch --nproc-per-node 2 -- gradmesh bench comm --backend " +
                    backend);
  comm::ProcessGroupOptions options;
  options.backend = backend;
  std::shared_ptr<comm::ProcessGroup> group = comm::init_process_group_from_environment(options);
  bench::CommBenchOptions bench_options;
  bench_options.min_bytes = min_bytes;
  bench_options.max_bytes = max_bytes;
  bench_options.iters = iters;
  const std::vector<bench::CommBenchRow> rows =
      op == "p2p" ? bench::bench_p2p(*group, bench_options) : bench::bench_allreduce(*group, bench_options);
  if (group->rank() == 0) {
    const std::string text = json ? bench::format_comm_json(rows, group->backend(), group->size())
                                  : bench::format_comm_table(rows, group->backend(), group->size());
    std::fputs(text.c_str(), stdout);
  }
  return 0;
}

int run_env_docs() {
  std::fputs(env_markdown().c_str(), stdout);
  return 0;
}

int run_config_docs() {
  std::fputs(train::config_markdown().c_str(), stdout);
  return 0;
}

}  // namespace gradmesh::cli
