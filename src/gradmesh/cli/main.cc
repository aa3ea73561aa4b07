// gradmesh: the one executable. Parses the command line and dispatches to cli/commands.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradmesh/cli/bench_scaling_command.h"
#include "gradmesh/cli/commands.h"
#include "gradmesh/cli/data_command.h"
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

// One command: its parser (a subcommand, or a subcommand's subcommand) and
// what runs when the command line chose it. Each add_* function below
// registers one command and owns its arguments through the closure.
struct Command {
  CLI::App* parser;
  std::function<int()> run;
};
using Commands = std::vector<Command>;

void add_train(CLI::App& app, Commands& commands) {
  struct Args {
    std::string config, init_from, nproc_per_node, resume;
    std::vector<std::string> overrides;
  };
  auto a = std::make_shared<Args>();
  CLI::App* train = app.add_subcommand("train", "Train the model a TOML config describes");
  train->add_option("config", a->config, "Config file (see docs/config.md)")->required();
  train->add_option("--set", a->overrides, "Override a config key, e.g. --set optim.lr=0.1 (repeatable)")
      ->type_name("KEY=VALUE");
  train->add_option("--init-from", a->init_from, "Start from these weights (safetensors; same as --set train.init_from=FILE)")
      ->type_name("FILE");
  train->add_option("--nproc-per-node,--nproc_per_node", a->nproc_per_node,
                    "Train data-parallel with this many local workers (a number, or auto for one per CPU)")
      ->type_name("K");
  train->add_option("--resume", a->resume,
                    "Continue a run: auto (the newest checkpoint that verifies, or a fresh start) or a checkpoint path")
      ->type_name("auto|PATH");
  commands.push_back({train, [a] {
                        if (!a->init_from.empty()) a->overrides.push_back("train.init_from=" + a->init_from);
                        return gradmesh::cli::run_train(a->config, a->overrides, a->nproc_per_node, a->resume);
                      }});
}

void add_eval(CLI::App& app, Commands& commands) {
  struct Args {
    std::string config, weights, logits;
    std::vector<std::string> overrides;
  };
  auto a = std::make_shared<Args>();
  CLI::App* eval = app.add_subcommand("eval", "Evaluate weights on the config's test set");
  eval->add_option("config", a->config, "Config file (model and data sections are used)")->required();
  eval->add_option("--weights", a->weights, "A safetensors file, e.g. runs/<id>/model.safetensors")->required();
  eval->add_option("--set", a->overrides, "Override a config key (repeatable)")->type_name("KEY=VALUE");
  eval->add_option("--logits", a->logits,
                   "Also write the inputs and logits of the first 4 evaluation samples to this safetensors file")
      ->type_name("FILE");

  commands.push_back({eval, [a] { return gradmesh::cli::run_eval(a->config, a->overrides, a->weights, a->logits); }});
}

void add_inspect(CLI::App& app, Commands& commands) {
  auto path = std::make_shared<std::string>();
  CLI::App* inspect = app.add_subcommand(
      "inspect", "List a safetensors file, or a checkpoint with its files verified (exit 1 if a checksum fails)");
  inspect->add_option("path", *path,
                      "A .safetensors file, a checkpoint's step-<N> directory, or a checkpoints or run directory "
                      "(shows its newest checkpoint)")
      ->required();

  commands.push_back({inspect, [path] { return gradmesh::cli::run_inspect(*path); }});
}

void add_export(CLI::App& app, Commands& commands) {
  struct Args {
    std::string checkpoint, output;
    bool optimizer = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* export_cmd = app.add_subcommand(
      "export", "Write a checkpoint's parameters (sharded ones too) as one safetensors file");
  export_cmd->add_option("checkpoint", a->checkpoint, "A step-<N> directory, or a checkpoints or run directory (its newest checkpoint)")
      ->required();
  export_cmd->add_option("--output,-o", a->output, "The safetensors file to write, e.g. model.safetensors")
      ->required()->type_name("FILE");
  export_cmd->add_flag("--with-optimizer", a->optimizer,
                       "Also write the optimizer state, consolidated from every shard, to FILE's .optimizer.safetensors");

  commands.push_back({export_cmd, [a] { return gradmesh::cli::run_export(a->checkpoint, a->output, a->optimizer); }});
}

void add_bench_gemm(CLI::App& bench, Commands& commands) {
  struct Args {
    int64_t n = 2048;
    int threads = 1, repeats = 5;
    std::string dtype = "f32";
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* bench_gemm = bench.add_subcommand(
      "gemm", "GEMM GFLOP/s on n x n matrices: OpenBLAS sgemm, or bf16 with float32 accumulation through oneDNN");
  bench_gemm->add_option("--n", a->n, "Matrix size")->capture_default_str()->check(CLI::Range(1, 16384));
  bench_gemm->add_option("--threads", a->threads, "BLAS threads (0 = $GRADMESH_NUM_THREADS, else all cores)")->capture_default_str()->check(CLI::Range(0, 1024));
  bench_gemm->add_option("--repeats", a->repeats, "Timed multiplies (median reported)")->capture_default_str()->check(CLI::Range(1, 1000));
  bench_gemm->add_option("--dtype", a->dtype, "f32 (OpenBLAS sgemm) or bf16 (oneDNN, the CPU's bf16 dot products)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  bench_gemm->add_flag("--json", a->json, "One JSON object instead of a sentence");
  commands.push_back(
      {bench_gemm, [a] { return gradmesh::cli::run_bench_gemm(a->n, a->threads, a->repeats, a->dtype, a->json); }});
}

void add_bench_comm(CLI::App& bench, Commands& commands) {
  struct Args {
    std::string backend = "auto", op = "allreduce";
    int64_t min = 4 << 10, max = 64 << 20;
    int iters = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* bench_comm = bench.add_subcommand(
      "comm", "All-reduce (or point-to-point) time and bandwidth from 4 KB to 64 MB (run under gradmesh launch)");
  bench_comm->add_option("--backend", a->backend, "shm, gloo, hier, mpi or auto")->capture_default_str();
  bench_comm->add_option("--op", a->op, "allreduce, or p2p: ping-pong between ranks 0 and 1")
      ->capture_default_str()->check(CLI::IsMember({"allreduce", "p2p"}));
  bench_comm->add_option("--min-bytes", a->min, "Smallest message")->capture_default_str()->check(CLI::Range(int64_t{4}, int64_t{1} << 34));
  bench_comm->add_option("--max-bytes", a->max, "Largest message (sizes step by 4x)")->capture_default_str()->check(CLI::Range(int64_t{4}, int64_t{1} << 34));
  bench_comm->add_option("--iters", a->iters, "Timed all-reduces per size (0: by size)")->capture_default_str()->check(CLI::Range(0, 1000000));
  bench_comm->add_flag("--json", a->json, "One JSON object per size instead of the table");

  commands.push_back({bench_comm, [a] {
                        return gradmesh::cli::run_bench_comm(a->backend, a->op, a->min, a->max, a->iters, a->json);
                      }});
}

void add_bench_scaling(CLI::App& bench, Commands& commands) {
  auto a = std::make_shared<gradmesh::cli::BenchScalingArgs>();
  CLI::App* bench_scaling = bench.add_subcommand(
      "scaling", "Probe a config at a few worker counts, fit the cost model and predict its scaling (docs/scaling.md)");
  bench_scaling->add_option("config", a->config, "Training config (TOML)")->required();
  bench_scaling->add_option("--set", a->overrides, "Override a config key for every probe: key=value");
  bench_scaling->add_option("--workers", a->workers, "Worker counts to probe")->capture_default_str();
  bench_scaling->add_option("--steps", a->steps, "Measured steps per probe")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{100000}));
  bench_scaling->add_option("--warmup", a->warmup, "Steps before them")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{100000}));
  bench_scaling->add_option("--bandwidth", a->bandwidth, "Predict for links of this rate (10gbit, 200mbit)");
  bench_scaling->add_option("--latency", a->latency, "... and this latency (50us, 1ms)");
  bench_scaling->add_option("--max-workers", a->max_workers, "Predict up to this many workers")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  bench_scaling->add_option("--json", a->json_path, "Write the study as JSON to this file");
  bench_scaling->add_option("--svg", a->svg_path, "Write the chart (measured over predicted) to this file");
  bench_scaling->add_option("--report", a->report_path,
                            "Write report.html: the chart and the table on one self-contained page");
  bench_scaling->add_option("--hosts", a->hosts,
                            "netns:K: probe on K emulated hosts (network namespaces, as root), one worker each");
  bench_scaling->add_option("--link-rate", a->link_rate, "Each emulated host's link (tc tbf rate)")
      ->capture_default_str();
  bench_scaling->add_option("--keep", a->keep_dir,
                            "Run the probes in DIR and keep it (their run directories, metrics.jsonl, logs)")
      ->type_name("DIR");

  commands.push_back({bench_scaling, [a] { return gradmesh::cli::run_bench_scaling(*a); }});
}

void add_bench_http(CLI::App& bench, Commands& commands) {
  struct Args {
    std::string url, method, body_file;
    std::vector<std::string> headers;
    double rate = 1000, seconds = 5, warmup = 1;
    int connections = 64;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* http = bench.add_subcommand(
      "http", "Open-loop HTTP load: requests at a fixed rate, latency from when each was due (p50/p99 against offered load)");
  http->add_option("url", a->url, "http://HOST:PORT/PATH")->required();
  http->add_option("--rate", a->rate, "Requests per second offered")->capture_default_str()->check(CLI::Range(0.1, 1e7));
  http->add_option("--connections", a->connections, "Keep-alive connections: at most this many requests in flight")
      ->capture_default_str()->check(CLI::Range(1, 65536));
  http->add_option("--seconds", a->seconds, "Measured")->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  http->add_option("--warmup", a->warmup, "Seconds at the same rate before, not measured")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  http->add_option("--method", a->method, "GET, or POST when --body-file is given");
  http->add_option("--body-file", a->body_file, "The request body, sent as it is")->type_name("FILE");
  http->add_option("--header,-H", a->headers, "A request header, 'Name: value' (repeatable)");
  http->add_flag("--json", a->json, "One JSON object instead of a sentence");
  commands.push_back({http, [a] {
                        return gradmesh::cli::run_bench_http(a->url, a->method, a->body_file, a->headers, a->rate,
                                                             a->connections, a->seconds, a->warmup, a->json);
                      }});
}

void add_bench(CLI::App& app, Commands& commands) {
  CLI::App* bench = app.add_subcommand("bench", "Measure this machine");
  bench->require_subcommand(1);
  add_bench_gemm(*bench, commands);
  add_bench_comm(*bench, commands);
  add_bench_scaling(*bench, commands);
  add_bench_http(*bench, commands);
}

void add_plan(CLI::App& app, Commands& commands) {
  auto a = std::make_shared<gradmesh::cli::PlanArgs>();
  CLI::App* plan = app.add_subcommand(
      "plan", "Every layout of a job on N workers: memory per rank and predicted step time (docs/scaling.md)");
  plan->add_option("config", a->config, "Training config (TOML)")->required();
  plan->add_option("--workers", a->workers, "Workers to lay the job out on")
      ->required()->check(CLI::Range(1, 1 << 20));
  plan->add_option("--set", a->overrides, "Override a config key: key=value");
  plan->add_option("--mesh", a->mesh, "Only this mesh: dp=D,pp=P,tp=T (and its ZeRO stages)");
  plan->add_option("--bandwidth", a->bandwidth, "Link rate between workers (10gbit, 200mbit)")->capture_default_str();
  plan->add_option("--latency", a->latency, "Link latency (50us, 1ms)")->capture_default_str();
  plan->add_option("--memory-limit", a->memory_limit, "Memory per rank (16GiB): larger layouts are rejected");

  commands.push_back({plan, [a] { return gradmesh::cli::run_plan(*a); }});
}

void add_data_prepare(CLI::App& data, Commands& commands) {
  auto a = std::make_shared<gradmesh::cli::PrepareArgs>();
  CLI::App* prepare = data.add_subcommand(
      "prepare", "Write an image set as MDS shards that each rank reads only its part of (docs/data.md)");
  prepare->add_option("--images", a->images, "IDX images, [N, H, W] or [N, C, H, W], plain or gzipped")
      ->type_name("FILE");
  prepare->add_option("--labels", a->labels, "IDX labels, [N]")->type_name("FILE");
  prepare->add_option("--image-folder", a->image_folder,
                      "Or JPEG and PNG images, one subdirectory per class (torchvision's ImageFolder layout)")
      ->type_name("DIR");
  prepare->add_option("--output", a->output, "Directory for index.json and the shards")->required()->type_name("DIR");
  prepare->add_option("--shard-mb", a->shard_mb, "Largest shard, in MiB")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{4095}));
  prepare->add_option("--workers", a->workers, "Image folder: decoding threads (default: every core)")
      ->check(CLI::Range(1, 1024));
  prepare->add_option("--on-corrupt", a->on_corrupt, "Image folder: a corrupt image stops the prepare, or is skipped")
      ->capture_default_str()->check(CLI::IsMember({"fail", "skip"}));
  prepare->add_option("--seed", a->seed, "Image folder: the order the samples are written in")->capture_default_str();
  commands.push_back({prepare, [a] { return gradmesh::cli::run_prepare(*a); }});

  auto b = std::make_shared<gradmesh::cli::DataBenchArgs>();
  CLI::App* bench = data.add_subcommand("bench", "Read an MDS image set through the training loader and time it");
  bench->add_option("set", b->set, "The set's directory")->required();
  bench->add_option("--workers", b->workers, "Loader threads (data.workers)")->capture_default_str()->check(CLI::Range(1, 256));
  bench->add_option("--batch", b->batch, "Samples per batch")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  bench->add_option("--crop-padding", b->crop_padding, "Random crop after padding (data.crop_padding)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1024}));
  bench->add_flag("--flip", b->flip, "Random left-right flip (data.flip)");
  bench->add_option("--epochs", b->epochs, "Passes over the set")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1000}));
  bench->add_option("--limit", b->limit, "Only the first N samples (0 = all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  bench->add_flag("--decode-only", b->decode_only, "Time the image decoder alone on one thread, from memory");
  bench->add_flag("--json", b->json, "One JSON line");
  commands.push_back({bench, [b] { return gradmesh::cli::run_data_bench(*b); }});
}

void add_data(CLI::App& app, Commands& commands) {
  auto a = std::make_shared<gradmesh::cli::PrepareTextArgs>();
  CLI::App* data = app.add_subcommand("data", "Prepare datasets");
  data->require_subcommand(1);
  CLI::App* prepare_text = data->add_subcommand("prepare-text", "Tokenise text files for language models");
  prepare_text->add_option("--input", a->inputs, "Text files or directories (default: Debian's fortunes)")
      ->type_name("PATH");
  prepare_text->add_option("--output", a->output, "Directory for vocab.json, train.bin and val.bin")->required();
  prepare_text->add_option("--vocab", a->vocab,
                           "byte (256 tokens), char (the corpus' characters) or sentencepiece (BPE subwords)")
      ->capture_default_str()->check(CLI::IsMember({"byte", "char", "sentencepiece"}));
  prepare_text->add_option("--vocab-size", a->vocab_size, "sentencepiece: pieces of the tokenizer trained on the input")
      ->capture_default_str()->check(CLI::Range(16, 1 << 20));
  prepare_text->add_option("--tokenizer-model", a->tokenizer_model,
                           "sentencepiece: use this SentencePiece .model file instead of training one")
      ->type_name("FILE");
  prepare_text->add_option("--workers", a->workers, "sentencepiece: threads training and encoding (default: every core)")
      ->check(CLI::Range(1, 1024));
  prepare_text->add_option("--seed", a->seed, "sentencepiece: the sample of sentences the tokenizer trains on")
      ->capture_default_str();
  prepare_text->add_option("--val-fraction", a->val_fraction, "Share of the tokens kept for validation (the end)")
      ->capture_default_str()->check(CLI::Range(0.0, 0.5));
  commands.push_back({prepare_text, [a] { return gradmesh::cli::run_prepare_text(*a); }});
  add_data_prepare(*data, commands);
}

void add_generate(CLI::App& app, Commands& commands) {
  auto a = std::make_shared<gradmesh::cli::GenerateArgs>();
  CLI::App* generate = app.add_subcommand("generate", "Generate text with a trained GPT (key/value cache)");
  generate->add_option("checkpoint", a->checkpoint, "Run directory, checkpoint directory or .safetensors file")->required();
  generate->add_option("--prompt", a->prompt, "Text to continue")->required();
  generate->add_option("--max-tokens", a->max_tokens, "New tokens to generate")->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  generate->add_option("--temperature", a->temperature, "Sampling temperature (0 = always the most likely token)")->capture_default_str()->check(CLI::Range(0.0, 100.0));
  generate->add_option("--top-k", a->top_k, "Sample among the k most likely tokens (0 = all)")->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{65536}));
  generate->add_option("--seed", a->seed, "Seed of the sampling draws (same seed, same text)")->capture_default_str();
  generate->add_option("--config", a->config, "Config of the model (default: the run's config.toml)");
  generate->add_option("--threads", a->threads, "Compute threads")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1024}));

  commands.push_back({generate, [a] { return gradmesh::cli::run_generate(*a); }});
}

// `command_line`: every argument, for the processes a split model starts.
void add_serve(CLI::App& app, Commands& commands, std::vector<std::string> command_line) {
  auto a = std::make_shared<gradmesh::cli::ServeArgs>();
  CLI::App* serve = app.add_subcommand("serve", "Serve trained models over HTTP (Open Inference Protocol v2, docs/serve.md)");
  serve->add_option("models", a->models, "NAME=PATH or PATH: a run, checkpoint or .safetensors file, one per model")
      ->required();
  serve->add_option("--host", a->server.host, "Address to listen on")->capture_default_str();
  serve->add_option("--port", a->server.port, "Port (0: any free one, printed at start)")
      ->capture_default_str()->check(CLI::Range(0, 65535));
  serve->add_option("--config", a->config, "Config of the models (default: each run's config.toml)");
  serve->add_option("--token-file", a->token_file,
                    "File holding a bearer token every endpoint but /v2/health/* then requires");
  serve->add_option("--max-batch", a->server.batch.max_batch, "Rows per forward pass (dynamic batching)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{65536}));
  serve->add_option("--max-delay-us", a->server.batch.max_delay_us,
                    "How long a request waits for others to share its batch")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{10'000'000}));
  serve->add_option("--max-queue", a->server.batch.max_queue, "Requests waiting per model before 503")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  serve->add_option("--inference-threads", a->server.batch.threads, "Batches run at once per model")
      ->capture_default_str()->check(CLI::Range(1, 256));
  serve->add_option("--max-streams", a->server.generation.max_streams,
                    "A GPT's sequences generated together (continuous batching)")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  serve->add_option("--http-threads", a->server.http_threads,
                    "Requests handled at once (inference, generation; idle and slow connections hold none)")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  serve->add_option("--grpc-port", a->server.grpc_port,
                    "Also serve the protocol over gRPC on this port (0: any free port; -1: off)")
      ->capture_default_str()->check(CLI::Range(-1, 65535));
  serve->add_option("--max-connections", a->server.max_connections, "Open connections at once (more: 503 at once)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  serve->add_option("--header-timeout", a->server.header_timeout_seconds,
                    "Seconds for a request's line and headers, from its first byte (longer: 408)")
      ->capture_default_str()->check(CLI::Range(0.01, 3600.0));
  serve->add_option("--body-timeout", a->server.body_timeout_seconds, "Seconds for a request's whole body (longer: 408)")
      ->capture_default_str()->check(CLI::Range(0.01, 3600.0));
  serve->add_option("--drain-timeout", a->server.drain_timeout_seconds,
                    "Seconds that requests and streams in flight get to finish after SIGTERM")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  serve->add_option("--threads", a->threads, "Compute threads of each forward pass")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1024}));
  serve->add_flag("--training-products", a->training_products,
                  "Multiply as training does (OpenBLAS sgemm at every batch size): the trainer's bits, slower for "
                  "batches of 2-64 rows than oneDNN's matmul, which serving uses otherwise");
  serve->add_option("--precision", a->precision,
                    "fp32, or bf16: float32 weights, products in bf16 on the CPU's bf16 dot products; the change in "
                    "accuracy on each model's test set is printed at start")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16"}));
  serve->add_flag("--watch", a->watch,
                  "Hot reload: serve each new checkpoint its run's checkpoints/latest names, without dropping a request");
  serve->add_option("--watch-interval", a->watch_interval, "Seconds between reads of latest")
      ->capture_default_str()->check(CLI::Range(0.01, 3600.0));
  serve->add_option("--max-body-mb", a->max_body_mb, "Largest request body (larger: 413)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{4096}));
  serve->add_option("--mesh", a->mesh,
                    "Split the model over processes as training does: pp=P (pipeline stages), tp=T (tensor shards) "
                    "or pp=P,tp=T");
  serve->add_option("--nproc", a->nproc, "Processes to start for --mesh (default: pp x tp)")
      ->check(CLI::Range(1, 1024));
  a->command_line = std::move(command_line);

  commands.push_back({serve, [a] { return gradmesh::cli::run_serve(*a); }});
}

void add_docs(CLI::App& app, Commands& commands) {
  CLI::App* docs = app.add_subcommand("docs", "Print reference tables as Markdown");
  CLI::App* docs_config = docs->add_subcommand("config", "Every config key, type and default (docs/config.md)");
  CLI::App* docs_env = docs->add_subcommand("env", "Every GRADMESH_* environment variable (docs/env.md)");
  docs->require_subcommand(1);

  commands.push_back({docs_config, [] { return gradmesh::cli::run_config_docs(); }});
  commands.push_back({docs_env, [] { return gradmesh::cli::run_env_docs(); }});
}

void add_launch(CLI::App& app, Commands& commands) {
  auto a = std::make_shared<gradmesh::cli::LaunchArgs>();
  CLI::App* launch = gradmesh::cli::add_launch_command(app, *a);
  commands.push_back({launch, [a] { return gradmesh::cli::run_launch(*a); }});
}

void add_probe(CLI::App& app, Commands& commands) {
  auto a = std::make_shared<gradmesh::cli::ProbeArgs>();
  CLI::App* probe = app.add_subcommand(
      "probe", "GET an endpoint (the agent's /healthz or /readyz, serve's health): exit 0 on 2xx, else 1");
  probe->add_option("url", a->url, "http://host:port/path")->required();
  probe->add_option("--token-file", a->token_file, "A file holding the bearer token to send")->type_name("FILE");
  probe->add_option("--timeout", a->timeout, "Seconds to wait for the answer")->capture_default_str()->type_name("SECONDS");

  commands.push_back({probe, [a] { return gradmesh::cli::run_probe(*a); }});
}

void add_report(CLI::App& app, Commands& commands) {
  auto a = std::make_shared<gradmesh::cli::ReportArgs>();
  CLI::App* report = app.add_subcommand(
      "report", "Regenerate a run's report.html from its metrics.jsonl, or compare two runs side by side");
  report->add_option("runs", a->runs, "RUN_DIR, or RUN_A RUN_B to compare")->required()->expected(1, 2);
  report->add_option("-o,--output", a->output,
                     "Where to write the page (default: RUN_DIR/report.html; compare.html for two runs)")
      ->type_name("FILE");

  commands.push_back({report, [a] { return gradmesh::cli::run_report(*a); }});
}

int report_error(const std::exception& e, int code) {
  std::fflush(stdout);
  std::fprintf(stderr, "gradmesh: error: %s\n", e.what());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // Runs, checkpoints, stores and logs are the owner's only (core/private_files.h).
  gradmesh::restrict_new_files_to_owner();
  CLI::App app{kDescription, "gradmesh"};
  app.set_version_flag("--version", "gradmesh " GRADMESH_VERSION);
  app.require_subcommand(1);
  Commands commands;
  add_train(app, commands);
  add_eval(app, commands);
  add_inspect(app, commands);
  add_export(app, commands);
  add_bench(app, commands);
  add_plan(app, commands);
  add_data(app, commands);
  add_generate(app, commands);
  add_serve(app, commands, std::vector<std::string>(argv + 1, argv + argc));
  add_docs(app, commands);
  add_launch(app, commands);
  add_probe(app, commands);
  add_report(app, commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 returns 0 for --help/--version and 106-ish codes for usage errors; usage errors exit 2.
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (const Command& command : commands)
      if (*command.parser) return command.run();
  } catch (const gradmesh::Error& e) {
    return report_error(e, e.exit_code());
  } catch (const std::exception& e) {
    return report_error(e, 1);
  }
  return 0;
}
