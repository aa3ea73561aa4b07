// The `gradmesh` subcommands. Each one parses nothing itself: main.cc owns the
// command line; these run the work and return the process exit code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradmesh::cli {

// With nproc_per_node (not empty, and not already a launched worker): starts
// that many workers through the launcher, each running this same training.
int run_train(const std::string& config_path, const std::vector<std::string>& overrides,
              const std::string& nproc_per_node = "", const std::string& resume = "");
// `logits_path` (may be empty): the inputs and logits of the first 4
// evaluation samples, for comparing with another implementation.
int run_eval(const std::string& config_path, const std::vector<std::string>& overrides, const std::string& weights,
             const std::string& logits_path = "");
int run_inspect(const std::string& path);
// `gradmesh export CHECKPOINT --output FILE [--with-optimizer]`: the model's
// parameters (and the consolidated optimizer state) of any checkpoint,
// sharded ones included, as safetensors (checkpoint/checkpoint_export.h).
int run_export(const std::string& checkpoint, const std::string& output, bool with_optimizer);
int run_env_docs();
int run_bench_gemm(int64_t n, int threads, int repeats, const std::string& dtype, bool json);
// A worker of a launched job (gradmesh launch --nproc-per-node N -- gradmesh bench comm).
int run_bench_comm(const std::string& backend, const std::string& op, int64_t min_bytes, int64_t max_bytes, int iters,
                   bool json);
// `gradmesh bench http`: bench/http_load.h against a running server.
int run_bench_http(const std::string& url, const std::string& method, const std::string& body_file,
                   const std::vector<std::string>& headers, double rate, int connections, double seconds, double warmup,
                   bool json);
int run_config_docs();

}  // namespace gradmesh::cli
