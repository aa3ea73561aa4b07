#include "gradmesh/cli/plan_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/scaling/layout_plan.h"
#include "gradmesh/scaling/units.h"
#include "gradmesh/train/model_factory.h"
#include "gradmesh/train/training_data.h"

namespace gradmesh::cli {
namespace {

parallel::MeshShape parse_mesh(const std::string& text, int workers) {
  parallel::MeshShape m;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    char* end = nullptr;
    const long v = eq == std::string::npos ? 0 : std::strtol(item.c_str() + eq + 1, &end, 10);
    if (v < 1 || v > 4096 || *end != '\0' || (key != "dp" && key != "pp" && key != "tp"))
      throw_error(ErrorKind::kUsage, "--mesh '" + text + "'", "expected dp=D,pp=P,tp=T (any of them, each >= 1)");
    (key == "dp" ? m.dp : key == "pp" ? m.pp : m.tp) = static_cast<int>(v);
  }
  if (text.find("dp=") == std::string::npos) m.dp = std::max(1, workers / (m.pp * m.tp));
  if (m.size() != workers)
    throw_error(ErrorKind::kUsage, "--mesh '" + text + "'",
                "dp x pp x tp = " + std::to_string(m.size()) + ", not --workers " + std::to_string(workers));
  return m;
}

// Forward and backward of one sample of the whole model on one thread, from
// timed forward passes (backward costs about twice a forward).
double seconds_per_sample(const train::Config& config, const train::InputGeometry& geometry) {
  kernels::set_num_threads(1);
  const std::unique_ptr<nn::Model> model = train::build_model(config.model, geometry, config.train.seed);
  const int64_t rows = std::clamp<int64_t>(config.train.batch_size, 1, 16);
  Shape shape = config.model.kind == "gpt" ? Shape{rows, config.model.block_size}
                                           : Shape{rows, geometry.channels, geometry.height, geometry.width};
  Tensor input = Tensor::empty(shape);
  const CounterRng rng(config.train.seed, RngPurpose::kTest, 0);
  for (int64_t i = 0; i < input.numel(); ++i)
    input.data()[i] = config.model.kind == "gpt"
                          ? static_cast<float>(rng.below(static_cast<uint64_t>(i), static_cast<uint64_t>(geometry.vocab_size)))
                          : rng.uniform(static_cast<uint64_t>(i));
  autograd::NoGradGuard no_grad;
  model->forward(autograd::Variable(input));  // warm-up
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    model->forward(autograd::Variable(input));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 3.0 * best / static_cast<double>(rows);
}

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", s * 1e3);
  return buf;
}

}  // namespace

int run_plan(const PlanArgs& args) {
  if (args.workers < 1) throw_error(ErrorKind::kUsage, "--workers", "must be at least 1");
  const double rate = scaling::parse_rate(args.bandwidth, "--bandwidth");
  const double latency = scaling::parse_latency(args.latency, "--latency");
  scaling::PlanInputs in;
  in.link = scaling::link_of(rate, latency);
  if (!args.memory_limit.empty()) in.memory_limit_bytes = scaling::parse_memory_size(args.memory_limit);
  std::optional<parallel::MeshShape> only;
  if (!args.mesh.empty()) only = parse_mesh(args.mesh, args.workers);
  const train::Config config = train::load_config(args.config, args.overrides);
  if (args.workers > config.train.batch_size)
    throw_error(ErrorKind::kUsage, "--workers",
                std::to_string(args.workers) + " workers need train.batch_size >= that (it is " +
                    std::to_string(config.train.batch_size) + ")");
  const train::InputGeometry geometry = train::load_training_data(config, /*with_test=*/false)->geometry;
  in.seconds_per_sample = seconds_per_sample(config, geometry);

  std::vector<scaling::LayoutCost> costs;
  for (const scaling::Layout& layout : scaling::candidate_layouts(config, args.workers, only))
    costs.push_back(scaling::cost_layout(config, geometry, layout, in));
  std::printf("%s on %d workers, global batch %lld; %s links, %s latency%s; forward + backward %.3f ms per sample "
              "(measured here, one thread)\n\n",
              args.config.c_str(), args.workers, static_cast<long long>(config.train.batch_size), args.bandwidth.c_str(),
              args.latency.c_str(),
              in.memory_limit_bytes ? (", memory limit " + mib(*in.memory_limit_bytes) + " MiB per rank").c_str() : "",
              in.seconds_per_sample * 1e3);
  std::printf("| layout | params + grads + optimizer (MiB) | activations (MiB) | per rank (MiB) | fits | compute (ms) "
              "| dp comm (ms) | tp comm (ms) | pp comm (ms) | step (ms) | samples/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const scaling::LayoutCost& c : costs)
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f |\n", c.layout.name().c_str(),
                mib(c.memory.state.total_bytes()).c_str(), mib(c.memory.activation_bytes).c_str(),
                mib(c.memory.total_bytes()).c_str(),
                c.fits ? "yes" : ("no: " + mib(c.memory.total_bytes() - *in.memory_limit_bytes) + " MiB over").c_str(),
                ms(c.compute_s).c_str(), ms(c.dp_s).c_str(), ms(c.tp_s).c_str(), ms(c.pp_s).c_str(),
                ms(c.step_s).c_str(), c.samples_per_s);
  const std::optional<size_t> best = scaling::best_layout(costs);
  if (!best)
    throw_error(ErrorKind::kConfig, "--memory-limit " + args.memory_limit,
                "no layout on " + std::to_string(args.workers) + " workers fits; the smallest needs " +
                    mib(std::min_element(costs.begin(), costs.end(), [](const auto& a, const auto& b) {
                          return a.memory.total_bytes() < b.memory.total_bytes();
                        })->memory.total_bytes()) +
                    " MiB per rank");
  std::printf("\nbest: %s, %.0f samples/s predicted (no overlap assumed: an upper bound on the step time)\n",
              costs[*best].layout.name().c_str(), costs[*best].samples_per_s);
  return 0;
}

}  // namespace gradmesh::cli
