// gradmesh: the one executable. Parses the command line and dispatches to cli/commands.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "gradmesh/cli/bench_scaling_command.h"
#include "gradmesh/cli/commands.h"
#include "gradmesh/cli/generate_command.h"
#include "gradmesh/cli/launch_command.h"
#include "gradmesh/cli/plan_command.h"
#include "gradmesh/cli/probe_command.h"
#include "gradmesh/cli/report_command.h"
#include "gradmesh/cli/serve_command.h"
#include "gradmesh/config.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/private_files.h"

namespace {

constexpr const char* kDescription =
    "gradmesh trains and serves neural networks across cores, processes and machines.\n"
    "Docs: README.md, docs/config.md (every config key), docs/env.md (environment variables).";

}  // namespace

int main(int argc, char** argv) {
  // Runs, checkpoints, stores and logs are the owner's only (core/private_files.h).
  gradmesh::restrict_new_files_to_owner();
  CLI::App app{kDescription, "gradmesh"};
  app.set_version_flag("--version", "gradmesh " GRADMESH_VERSION);
  app.require_subcommand(1);

  std::string config_path, weights, inspect_path;
  std::vector<std::string> overrides;

  CLI::App* train = app.add_subcommand("train", "Train the model a TOML config describes");
  train->add_option("config", config_path, "Config file (see docs/config.md)")->required();
  train->add_option("--set", overrides, "Override a config key, e.g. --set optim.lr=0.1 (repeatable)")
      ->type_name("KEY=VALUE");
  std::string init_from;
  train->add_option("--init-from", init_from, "Start from these weights (safetensors; same as --set train.init_from=FILE)")
      ->type_name("FILE");
  std::string nproc_per_node;
  train->add_option("--nproc-per-node,--nproc_per_node", nproc_per_node,
                    "Train data-parallel with this many local workers (a number, or auto for one per CPU)")
      ->type_name("K");

  std::string resume;
  train->add_option("--resume", resume,
                    "Continue a run: auto (the newest checkpoint that verifies, or a fresh start) or a checkpoint path")
      ->type_name("auto|PATH");

  CLI::App* eval = app.add_subcommand("eval", "Evaluate weights on the config's test set");
  eval->add_option("config", config_path, "Config file (model and data sections are used)")->required();
  eval->add_option("--weights", weights, "A safetensors file, e.g. runs/<id>/model.safetensors")->required();
  eval->add_option("--set", overrides, "Override a config key (repeatable)")->type_name("KEY=VALUE");
  std::string eval_logits;
  eval->add_option("--logits", eval_logits,
                   "Also write the inputs and logits of the first 4 evaluation samples to this safetensors file")
      ->type_name("FILE");

  CLI::App* inspect = app.add_subcommand(
      "inspect", "List a safetensors file, or a checkpoint with its files verified (exit 1 if a checksum fails)");
  inspect->add_option("path", inspect_path,
                      "A .safetensors file, a checkpoint's step-<N> directory, or a checkpoints or run directory "
                      "(shows its newest checkpoint)")
      ->required();

  std::string export_path, export_output;
  bool export_optimizer = false;
  CLI::App* export_cmd = app.add_subcommand(
      "export", "Write a checkpoint's parameters (sharded ones too) as one safetensors file");
  export_cmd->add_option("checkpoint", export_path, "A step-<N> directory, or a checkpoints or run directory (its newest checkpoint)")
      ->required();
  export_cmd->add_option("--output,-o", export_output, "The safetensors file to write, e.g. model.safetensors")
      ->required()->type_name("FILE");
  export_cmd->add_flag("--with-optimizer", export_optimizer,
                       "Also write the optimizer state, consolidated from every shard, to FILE's .optimizer.safetensors");

  CLI::App* bench = app.add_subcommand("bench", "Measure this machine");
  bench->require_subcommand(1);
  CLI::App* bench_gemm = bench->add_subcommand("gemm", "OpenBLAS sgemm GFLOP/s on n x n matrices");
  int64_t gemm_n = 2048;
  int gemm_threads = 1, gemm_repeats = 5;
  bool gemm_json = false;
  bench_gemm->add_option("--n", gemm_n, "Matrix size")->capture_default_str()->check(CLI::Range(1, 16384));
  bench_gemm->add_option("--threads", gemm_threads, "BLAS threads (0 = $GRADMESH_NUM_THREADS, else all cores)")->capture_default_str()->check(CLI::Range(0, 1024));
  bench_gemm->add_option("--repeats", gemm_repeats, "Timed multiplies (median reported)")->capture_default_str()->check(CLI::Range(1, 1000));
  bench_gemm->add_flag("--json", gemm_json, "One JSON object instead of a sentence");
  CLI::App* bench_comm = bench->add_subcommand(
      "comm", "All-reduce (or point-to-point) time and bandwidth from 4 KB to 64 MB (run under gradmesh launch)");
  std::string comm_backend = "auto", comm_op = "allreduce";
  int64_t comm_min = 4 << 10, comm_max = 64 << 20;
  int comm_iters = 0;
  bool comm_json = false;
  bench_comm->add_option("--backend", comm_backend, "shm, gloo, hier, mpi or auto")->capture_default_str();
  bench_comm->add_option("--op", comm_op, "allreduce, or p2p: ping-pong between ranks 0 and 1")
      ->capture_default_str()->check(CLI::IsMember({"allreduce", "p2p"}));
  bench_comm->add_option("--min-bytes", comm_min, "Smallest message")->capture_default_str()->check(CLI::Range(int64_t{4}, int64_t{1} << 34));
  bench_comm->add_option("--max-bytes", comm_max, "Largest message (sizes step by 4x)")->capture_default_str()->check(CLI::Range(int64_t{4}, int64_t{1} << 34));
  bench_comm->add_option("--iters", comm_iters, "Timed all-reduces per size (0: by size)")->capture_default_str()->check(CLI::Range(0, 1000000));
  bench_comm->add_flag("--json", comm_json, "One JSON object per size instead of the table");

  gradmesh::cli::BenchScalingArgs scaling_args;
  CLI::App* bench_scaling = bench->add_subcommand(
      "scaling", "Probe a config at a few worker counts, fit the cost model and predict its scaling (docs/scaling.md)");
  bench_scaling->add_option("config", scaling_args.config, "Training config (TOML)")->required();
  bench_scaling->add_option("--set", scaling_args.overrides, "Override a config key for every probe: key=value");
  bench_scaling->add_option("--workers", scaling_args.workers, "Worker counts to probe")->capture_default_str();
  bench_scaling->add_option("--steps", scaling_args.steps, "Measured steps per probe")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{100000}));
  bench_scaling->add_option("--warmup", scaling_args.warmup, "Steps before them")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{100000}));
  bench_scaling->add_option("--bandwidth", scaling_args.bandwidth, "Predict for links of this rate (10gbit, 200mbit)");
  bench_scaling->add_option("--latency", scaling_args.latency, "... and this latency (50us, 1ms)");
  bench_scaling->add_option("--max-workers", scaling_args.max_workers, "Predict up to this many workers")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  bench_scaling->add_option("--json", scaling_args.json_path, "Write the study as JSON to this file");
  bench_scaling->add_option("--svg", scaling_args.svg_path, "Write the chart (measured over predicted) to this file");
  bench_scaling->add_option("--report", scaling_args.report_path,
                            "Write report.html: the chart and the table on one self-contained page");
  bench_scaling->add_option("--hosts", scaling_args.hosts,
                            "netns:K: probe on K emulated hosts (network namespaces, as root), one worker each");
  bench_scaling->add_option("--link-rate", scaling_args.link_rate, "Each emulated host's link (tc tbf rate)")
      ->capture_default_str();

  gradmesh::cli::PlanArgs plan_args;
  CLI::App* plan = app.add_subcommand(
      "plan", "Every layout of a job on N workers: memory per rank and predicted step time (docs/scaling.md)");
  plan->add_option("config", plan_args.config, "Training config (TOML)")->required();
  plan->add_option("--workers", plan_args.workers, "Workers to lay the job out on")
      ->required()->check(CLI::Range(1, 1 << 20));
  plan->add_option("--set", plan_args.overrides, "Override a config key: key=value");
  plan->add_option("--mesh", plan_args.mesh, "Only this mesh: dp=D,pp=P,tp=T (and its ZeRO stages)");
  plan->add_option("--bandwidth", plan_args.bandwidth, "Link rate between workers (10gbit, 200mbit)")->capture_default_str();
  plan->add_option("--latency", plan_args.latency, "Link latency (50us, 1ms)")->capture_default_str();
  plan->add_option("--memory-limit", plan_args.memory_limit, "Memory per rank (16GiB): larger layouts are rejected");

  CLI::App* data = app.add_subcommand("data", "Prepare datasets");
  data->require_subcommand(1);
  CLI::App* prepare_text = data->add_subcommand("prepare-text", "Tokenise text files for language models");
  std::vector<std::string> text_inputs;
  std::string text_output, text_vocab = "byte";
  double val_fraction = 0.1;
  prepare_text->add_option("--input", text_inputs, "Text files or directories (default: Debian's fortunes)")
      ->type_name("PATH");
  prepare_text->add_option("--output", text_output, "Directory for vocab.json, train.bin and val.bin")->required();
  prepare_text->add_option("--vocab", text_vocab, "byte (256 tokens) or char (the corpus' characters)")
      ->capture_default_str()->check(CLI::IsMember({"byte", "char"}));
  prepare_text->add_option("--val-fraction", val_fraction, "Share of the tokens kept for validation (the end)")
      ->capture_default_str()->check(CLI::Range(0.0, 0.5));

  gradmesh::cli::GenerateArgs gen;
  CLI::App* generate = app.add_subcommand("generate", "Generate text with a trained GPT (key/value cache)");
  generate->add_option("checkpoint", gen.checkpoint, "Run directory, checkpoint directory or .safetensors file")->required();
  generate->add_option("--prompt", gen.prompt, "Text to continue")->required();
  generate->add_option("--max-tokens", gen.max_tokens, "New tokens to generate")->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  generate->add_option("--temperature", gen.temperature, "Sampling temperature (0 = always the most likely token)")->capture_default_str()->check(CLI::Range(0.0, 100.0));
  generate->add_option("--top-k", gen.top_k, "Sample among the k most likely tokens (0 = all)")->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{65536}));
  generate->add_option("--seed", gen.seed, "Seed of the sampling draws (same seed, same text)")->capture_default_str();
  generate->add_option("--config", gen.config, "Config of the model (default: the run's config.toml)");
  generate->add_option("--threads", gen.threads, "Compute threads")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1024}));

  gradmesh::cli::ServeArgs serve_args;
  CLI::App* serve = app.add_subcommand("serve", "Serve trained models over HTTP (Open Inference Protocol v2, docs/serve.md)");
  serve->add_option("models", serve_args.models, "NAME=PATH or PATH: a run, checkpoint or .safetensors file, one per model")
      ->required();
  serve->add_option("--host", serve_args.server.host, "Address to listen on")->capture_default_str();
  serve->add_option("--port", serve_args.server.port, "Port (0: any free one, printed at start)")
      ->capture_default_str()->check(CLI::Range(0, 65535));
  serve->add_option("--config", serve_args.config, "Config of the models (default: each run's config.toml)");
  serve->add_option("--token-file", serve_args.token_file,
                    "File holding a bearer token every endpoint but /v2/health/* then requires");
  serve->add_option("--max-batch", serve_args.server.batch.max_batch, "Rows per forward pass (dynamic batching)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{65536}));
  serve->add_option("--max-delay-us", serve_args.server.batch.max_delay_us,
                    "How long a request waits for others to share its batch")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{10'000'000}));
  serve->add_option("--max-queue", serve_args.server.batch.max_queue, "Requests waiting per model before 503")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  serve->add_option("--inference-threads", serve_args.server.batch.threads, "Batches run at once per model")
      ->capture_default_str()->check(CLI::Range(1, 256));
  serve->add_option("--max-streams", serve_args.server.generation.max_streams,
                    "A GPT's sequences generated together (continuous batching)")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  serve->add_option("--http-threads", serve_args.server.http_threads, "Connections served at once")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  serve->add_option("--threads", serve_args.threads, "Compute threads of each forward pass")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1024}));
  serve->add_flag("--watch", serve_args.watch,
                  "Hot reload: serve each new checkpoint its run's checkpoints/latest names, without dropping a request");
  serve->add_option("--watch-interval", serve_args.watch_interval, "Seconds between reads of latest")
      ->capture_default_str()->check(CLI::Range(0.01, 3600.0));
  serve->add_option("--max-body-mb", serve_args.max_body_mb, "Largest request body (larger: 413)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{4096}));
  serve->add_option("--mesh", serve_args.mesh,
                    "Split the model over processes as training does: pp=P (pipeline stages), tp=T (tensor shards) "
                    "or pp=P,tp=T");
  serve->add_option("--nproc", serve_args.nproc, "Processes to start for --mesh (default: pp x tp)")
      ->check(CLI::Range(1, 1024));
  serve_args.command_line.assign(argv + 1, argv + argc);

  CLI::App* docs = app.add_subcommand("docs", "Print reference tables as Markdown");
  CLI::App* docs_config = docs->add_subcommand("config", "Every config key, type and default (docs/config.md)");
  CLI::App* docs_env = docs->add_subcommand("env", "Every GRADMESH_* environment variable (docs/env.md)");
  docs->require_subcommand(1);

  gradmesh::cli::LaunchArgs launch_args;
  CLI::App* launch = gradmesh::cli::add_launch_command(app, launch_args);

  gradmesh::cli::ProbeArgs probe_args;
  CLI::App* probe = app.add_subcommand(
      "probe", "GET an endpoint (the agent's /healthz or /readyz, serve's health): exit 0 on 2xx, else 1");
  probe->add_option("url", probe_args.url, "http://host:port/path")->required();
  probe->add_option("--token-file", probe_args.token_file, "A file holding the bearer token to send")->type_name("FILE");
  probe->add_option("--timeout", probe_args.timeout, "Seconds to wait for the answer")->capture_default_str()->type_name("SECONDS");

  gradmesh::cli::ReportArgs report_args;
  CLI::App* report = app.add_subcommand(
      "report", "Regenerate a run's report.html from its metrics.jsonl, or compare two runs side by side");
  report->add_option("runs", report_args.runs, "RUN_DIR, or RUN_A RUN_B to compare")->required()->expected(1, 2);
  report->add_option("-o,--output", report_args.output,
                     "Where to write the page (default: RUN_DIR/report.html; compare.html for two runs)")
      ->type_name("FILE");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 returns 0 for --help/--version and 106-ish codes for usage errors; usage errors exit 2.
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  try {
    if (*train) {
      if (!init_from.empty()) overrides.push_back("train.init_from=" + init_from);
      return gradmesh::cli::run_train(config_path, overrides, nproc_per_node, resume);
    }
    if (*eval) return gradmesh::cli::run_eval(config_path, overrides, weights, eval_logits);
    if (*inspect) return gradmesh::cli::run_inspect(inspect_path);
    if (*export_cmd) return gradmesh::cli::run_export(export_path, export_output, export_optimizer);
    if (*bench_comm) return gradmesh::cli::run_bench_comm(comm_backend, comm_op, comm_min, comm_max, comm_iters, comm_json);
    if (*bench_scaling) return gradmesh::cli::run_bench_scaling(scaling_args);
    if (*plan) return gradmesh::cli::run_plan(plan_args);
    if (*bench_gemm) return gradmesh::cli::run_bench_gemm(gemm_n, gemm_threads, gemm_repeats, gemm_json);
    if (*prepare_text) return gradmesh::cli::run_prepare_text(text_inputs, text_output, text_vocab, val_fraction);
    if (*generate) return gradmesh::cli::run_generate(gen);
    if (*serve) return gradmesh::cli::run_serve(serve_args);
    if (*docs_config) return gradmesh::cli::run_config_docs();
    if (*docs_env) return gradmesh::cli::run_env_docs();
    if (*launch) return gradmesh::cli::run_launch(launch_args);
    if (*probe) return gradmesh::cli::run_probe(probe_args);
    if (*report) return gradmesh::cli::run_report(report_args);
  } catch (const gradmesh::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "gradmesh: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "gradmesh: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
