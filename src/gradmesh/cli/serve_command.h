// gradmesh serve MODEL...: the inference server (serve/inference_server.h)
// for trained models, until SIGTERM or SIGINT, which drain it: it stops
// accepting, finishes the requests in flight, and exits 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gradmesh/serve/inference_server.h"

namespace gradmesh::cli {

struct ServeArgs {
  // Each NAME=PATH or PATH (the name is then the run's or file's name); PATH
  // as gradmesh generate takes it (cli/model_source.h).
  std::vector<std::string> models;
  std::string config;      // "" = each model's run config.toml
  std::string token_file;  // "" = no authentication
  int64_t max_body_mb = 64;
  int64_t threads = 1;     // compute threads of each forward pass
  // Products as training computes them (OpenBLAS sgemm at every batch size)
  // instead of oneDNN's matmul for batches of 2-64 rows (kernels::
  // set_fast_small_batches): the trainer's bits, slower for small batches.
  bool training_products = false;
  std::string precision = "fp32";  // "bf16": every product in bf16 (kernels::MatmulPrecision), float32 weights
  bool watch = false;      // hot reload: follow each model's checkpoints/latest
  double watch_interval = 1.0;
  // Sharded serving: one model split over pp x tp processes (--mesh), which
  // --nproc starts under the launcher (0: as many as the mesh has ranks).
  int nproc = 0;
  std::string mesh;
  std::vector<std::string> command_line;  // argv after the program's name, for the launched copies
  serve::ServerOptions server;
};

int run_serve(ServeArgs args);

}  // namespace gradmesh::cli
