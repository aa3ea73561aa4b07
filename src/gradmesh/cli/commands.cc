#include "gradmesh/cli/commands.h"

#include <cstdio>

#include "gradmesh/bench/comm_bench.h"
#include "gradmesh/bench/gemm_bench.h"
#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/comm/environment.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/evaluate.h"
#include "gradmesh/train/model_factory.h"
#include "gradmesh/train/trainer.h"

namespace gradmesh::cli {

int run_train(const std::string& config_path, const std::vector<std::string>& overrides) {
  const train::Config config = train::load_config(config_path, overrides);
  const train::TrainSummary s = train::run_training(config);
  std::printf("trained %lld steps (%lld samples) in %.1f s: %.0f samples/s, %.1f GEMM GFLOP/s\n",
              static_cast<long long>(s.steps), static_cast<long long>(s.samples), s.train_seconds, s.samples_per_s,
              s.gemm_gflops_per_s);
  if (s.evaluated) std::printf("test loss %.4f, test accuracy %.4f\n", s.test_loss, s.test_accuracy);
  if (!s.weights_path.empty()) std::printf("weights: %s\n", s.weights_path.c_str());
  std::printf("metrics: %s/metrics.jsonl\n", s.run_dir.c_str());
  return 0;
}

int run_eval(const std::string& config_path, const std::vector<std::string>& overrides, const std::string& weights) {
  const train::Config config = train::load_config(config_path, overrides);
  kernels::set_num_threads(static_cast<int>(config.train.threads));
  const data::ImageDataset test_set = train::load_test_set(config.data);
  checkpoint::SafetensorsFile file = checkpoint::read_safetensors(weights);
  const train::InputGeometry geometry{test_set.channels, test_set.height, test_set.width, test_set.num_classes};
  std::unique_ptr<nn::Model> model = train::build_model(config.model, geometry, config.train.seed);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& t : file.tensors) tensors.emplace_back(t.name, t.tensor);
  model->load_parameters(tensors, weights);
  const train::EvalResult r = train::evaluate(*model, test_set);
  std::printf("{\"weights\":\"%s\",\"samples\":%lld,\"test_loss\":%.6f,\"test_accuracy\":%.6f}\n", weights.c_str(),
              static_cast<long long>(r.samples), r.loss, r.accuracy);
  return 0;
}

int run_inspect(const std::string& path) {
  std::fputs(checkpoint::describe_safetensors(checkpoint::read_safetensors(path)).c_str(), stdout);
  return 0;
}

int run_bench_gemm(int64_t n, int threads, int repeats, bool json) {
  const bench::GemmBenchResult r = bench::bench_sgemm(n, threads, repeats);
  if (json)
    std::printf("{\"n\":%lld,\"threads\":%d,\"seconds\":%.6f,\"gflops\":%.2f}\n", static_cast<long long>(r.n),
                r.threads, r.seconds_median, r.gflops);
  else
    std::printf("sgemm n=%lld threads=%d: %.2f ms, %.1f GFLOP/s (median of %d)\n", static_cast<long long>(r.n), r.threads,
                r.seconds_median * 1e3, r.gflops, repeats);
  return 0;
}

int run_bench_comm(const std::string& backend, int64_t min_bytes, int64_t max_bytes, int iters, bool json) {
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
  const std::vector<bench::CommBenchRow> rows = bench::bench_allreduce(*group, bench_options);
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
