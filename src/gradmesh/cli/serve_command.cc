#include "gradmesh/cli/serve_command.h"

#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gradmesh/cli/model_source.h"
#include "gradmesh/cli/self_executable.h"
#include "gradmesh/cli/serve_shards.h"
#include "gradmesh/comm/environment.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/storage.h"
#include "gradmesh/core/secret.h"
#include "gradmesh/data/token_file.h"
#include "gradmesh/elastic/launch_options.h"
#include "gradmesh/elastic/launcher.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/kernels/gemm_bf16.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/evaluate.h"
#include "gradmesh/train/model_factory.h"
#include "gradmesh/train/training_data.h"

namespace gradmesh::cli {
namespace {

namespace fs = std::filesystem;

// "NAME=PATH" -> (NAME, PATH); "PATH" -> (the run's directory name or the file's stem, PATH).
std::pair<std::string, std::string> name_and_path(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq != std::string::npos && eq > 0 && !fs::exists(arg)) {
    const std::string name = arg.substr(0, eq);
    for (char c : name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
        throw_error(ErrorKind::kUsage, "model name '" + name + "'", "may hold letters, digits, '-', '_' and '.' only");
    return {name, arg.substr(eq + 1)};
  }
  fs::path p = fs::path(arg).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  // <run>/checkpoints[/step-N]: the run's name.
  if (p.filename().string().rfind("step-", 0) == 0) p = p.parent_path();
  if (p.filename() == "checkpoints") p = p.parent_path();
  return {fs::is_directory(p) ? p.filename().string() : p.stem().string(), arg};
}

// What serving a model needs besides its weights: its config, the shape of
// its inputs, and for a GPT trained on a token set the text codec.
struct ModelSetup {
  train::Config config;
  train::InputGeometry geometry;
  serve::ModelShape shape;
  std::shared_ptr<const data::TokenSet> vocab;
};

ModelSetup model_setup(const std::string& path, const std::string& config_override) {
  ModelSetup m;
  m.config = train::load_config(config_override.empty() ? find_run_config(path) : config_override);
  m.shape.kind = m.config.model.kind;
  if (m.config.data.format == "tokens") {
    m.vocab = std::make_shared<const data::TokenSet>(data::read_token_set(m.config.data.tokens, static_cast<int>(m.config.model.vocab_size)));
    m.geometry.vocab_size = m.vocab->vocab_size;
  } else {
    m.geometry = train::load_training_data(m.config, /*with_test=*/false)->geometry;
  }
  if (m.shape.kind == "gpt") {
    const nn::GptSpec spec = train::gpt_spec(m.config.model, m.geometry);
    m.shape.sample = {spec.block_size};
    m.shape.classes = spec.vocab_size;
  } else {
    m.shape.sample = {m.geometry.channels, m.geometry.height, m.geometry.width};
    m.shape.classes = m.config.model.classes;
  }
  return m;
}

void set_codec(serve::ServedModel& served, const std::shared_ptr<const data::TokenSet>& vocab) {
  if (!vocab || served.shape().kind != "gpt") return;
  serve::TextCodec codec;
  codec.encode = [vocab](const std::string& text) {
    std::vector<int64_t> ids;
    for (const uint32_t t : data::encode_text(*vocab, text, "text_input")) ids.push_back(t);
    return ids;
  };
  codec.decode = [vocab](const std::vector<int64_t>& ids) {
    std::vector<uint32_t> tokens(ids.begin(), ids.end());
    return data::detokenize(*vocab, tokens);
  };
  served.set_codec(std::move(codec));
}

// --precision bf16: the model's own test set (its config's data) scored in
// float32 and in bf16 before the first request, so the change is known.
void report_bf16_change(const std::string& name, const ModelSetup& m, nn::Model& model) {
  std::shared_ptr<const train::TrainingData> data;
  try {
    data = train::load_training_data(m.config, true);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: the change bf16 makes was not measured: its test set cannot be read (%s)\n", name.c_str(),
                 e.what());
    return;
  }
  if (!data->test) return;
  kernels::set_matmul_precision(kernels::MatmulPrecision::kFp32);
  const train::EvalResult f32 = train::evaluate(model, *data->test);
  kernels::set_matmul_precision(kernels::MatmulPrecision::kBf16);
  const train::EvalResult bf16 = train::evaluate(model, *data->test);
  std::fprintf(stderr,
               "%s in bf16: test accuracy %.4f (float32 %.4f, %+.4f), test loss %.4f (float32 %.4f) over %lld "
               "targets of its test set\n",
               name.c_str(), bf16.accuracy, f32.accuracy, bf16.accuracy - f32.accuracy, bf16.loss, f32.loss,
               static_cast<long long>(bf16.samples));
}

std::shared_ptr<serve::ServedModel> load_served_model(const std::string& arg, const std::string& config_override,
                                                      bool report_bf16 = false) {
  const auto [name, path] = name_and_path(arg);
  ModelSetup m = model_setup(path, config_override);
  std::unique_ptr<nn::Model> model = train::build_model(m.config.model, m.geometry, m.config.train.seed);
  const std::string version = load_weights_at(path, *model);
  if (report_bf16) report_bf16_change(name, m, *model);
  auto served = std::make_shared<serve::ServedModel>(name, version, m.shape, std::move(model));
  set_codec(*served, m.vocab);
  return served;
}

// The checkpoints directory a model's PATH names or holds ("" when none).
std::string checkpoints_dir_of(const std::string& path) {
  const fs::path p(path);
  if (fs::is_directory(p / "checkpoints")) return (p / "checkpoints").string();
  if (fs::is_directory(p) && p.filename().string().rfind("step-", 0) == 0) return p.parent_path().string();
  if (fs::is_directory(p) && (fs::exists(p / "latest") || p.filename() == "checkpoints")) return p.string();
  return "";
}


// SIGTERM and SIGINT write their number to a pipe, which a thread reads to
// drain the server: a handler may run on any thread (the BLAS library's
// start before main), and writing to a pipe is async-signal-safe.
int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int signal) {
  const unsigned char byte = static_cast<unsigned char>(signal);
  [[maybe_unused]] const ssize_t written = ::write(g_signal_pipe[1], &byte, 1);
}

// `gradmesh serve --nproc N`: the same command, N times, under the launcher;
// every copy finds its rank (and rank 0 the port) from its environment.
int launch_shards(const ServeArgs& args, int nproc) {
  elastic::LaunchOptions o;
  o.nproc_per_node = nproc;
  o.heartbeat_timeout_s = 0;  // a server makes no training steps to report
  o.clean_signal_stop_succeeds = true;  // SIGTERM drains rank 0, which then stops the others
  o.dashboard_port = -1;  // a training run's dashboard: serving has its own /metrics (docs/serve.md)
  o.command = {self_executable()};
  for (size_t i = 0; i < args.command_line.size(); ++i) {
    const std::string& a = args.command_line[i];
    if (a == "--nproc") {
      ++i;
    } else if (a.rfind("--nproc=", 0) != 0) {
      o.command.push_back(a);
    }
  }
  return elastic::run_launcher(o);
}

// The ranks of a sharded server: returns the model rank 0 serves (null on
// the other ranks, which have run rank 0's commands until it stopped).
std::shared_ptr<serve::ServedModel> serve_shard(const ServeArgs& args, const ServeMesh& mesh,
                                                std::shared_ptr<serve::ShardedGpt>& sharded) {
  const std::shared_ptr<comm::ProcessGroup> world = comm::init_process_group_from_environment();
  if (world->size() != mesh.size())
    throw_error(ErrorKind::kUsage, "--mesh",
                "pp x tp = " + std::to_string(mesh.size()) + " ranks, but the job has " + std::to_string(world->size()));
  const auto [name, path] = name_and_path(args.models[0]);
  ModelSetup m = model_setup(path, args.config);
  ShardedPart part = load_sharded_part(world, mesh, m.config, m.geometry, path);
  sharded = part.sharded;
  if (world->rank() != 0) {
    // The launcher passes SIGTERM to every rank; only rank 0 drains, then stops the others.
    ::signal(SIGTERM, SIG_IGN);
    ::signal(SIGINT, SIG_IGN);
    part.sharded->follow();
    return nullptr;
  }
  std::fprintf(stderr, "%s split over %d processes (pp = %d, tp = %d)%s%s\n", name.c_str(), mesh.size(), mesh.pp,
               mesh.tp, part.stage_split.empty() ? "" : ": ", part.stage_split.c_str());
  auto served = std::make_shared<serve::ServedModel>(name, part.version, m.shape, std::move(part.part), part.sharded);
  set_codec(*served, m.vocab);
  return served;
}

}  // namespace

int run_serve(ServeArgs args) {
  if (args.models.empty()) throw_error(ErrorKind::kUsage, "gradmesh serve", "name at least one model");
  const ServeMesh mesh = parse_serve_mesh(args.mesh);
  const int nproc = args.nproc == 0 ? mesh.size() : args.nproc;
  if (nproc != mesh.size())
    throw_error(ErrorKind::kUsage, "--nproc " + std::to_string(nproc),
                "a server is one model split by --mesh over pp x tp processes; --mesh '" + args.mesh + "' has " +
                    std::to_string(mesh.size()));
  if (nproc > 1 && args.models.size() != 1)
    throw_error(ErrorKind::kUsage, "--mesh", "a split model is served alone; name one model");
  if (nproc > 1 && args.watch)
    throw_error(ErrorKind::kUsage, "--watch", "hot reload of a model split across processes is not supported yet");
  if (nproc > 1 && !comm::launched_as_worker()) return launch_shards(args, nproc);
  if (::pipe(g_signal_pipe) != 0) throw_error(ErrorKind::kIo, "gradmesh serve", "cannot create the signal pipe");
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);

  kernels::set_num_threads(static_cast<int>(args.threads));
  // Serving may trade bits for speed where training may not (docs/serve.md).
  kernels::set_fast_small_batches(!args.training_products);
  // Batches repeat their tensor sizes, so freed tensors are kept for reuse,
  // but not a huge request's: its memory goes back (docs/serve.md, memory).
  set_storage_cache_limits(size_t{256} << 20, size_t{4} << 20);
  // And malloc maps every block of 1 MiB or more on its own, so that freeing
  // it unmaps it: glibc would otherwise raise that threshold after the first
  // large free and keep later large blocks in its heaps.
  ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
  const bool bf16 = args.precision == "bf16";
  if (bf16) {
    kernels::set_matmul_precision(kernels::MatmulPrecision::kBf16);
    std::fprintf(stderr, "%s\n", kernels::bf16_support().describe().c_str());
  }
  if (!args.token_file.empty()) args.server.token = read_secret_file(args.token_file, "--token-file");
  args.server.max_body_bytes = args.max_body_mb << 20;
  std::vector<std::shared_ptr<serve::ServedModel>> models;
  std::shared_ptr<serve::ShardedGpt> sharded;
  if (nproc > 1) {
    std::shared_ptr<serve::ServedModel> served = serve_shard(args, mesh, sharded);
    if (!served) return 0;  // a rank other than 0: rank 0 stopped it
    models.push_back(std::move(served));
  } else {
    for (const std::string& m : args.models) models.push_back(load_served_model(m, args.config, bf16));
  }
  serve::InferenceServer server(models, args.server);
  if (args.watch) {
    for (size_t i = 0; i < models.size(); ++i) {
      const std::string name = models[i]->name(), path = name_and_path(args.models[i]).second;
      const std::string dir = checkpoints_dir_of(path);
      if (dir.empty())
        throw_error(ErrorKind::kUsage, "--watch",
                    "model '" + name + "' (" + path + ") has no checkpoints directory to watch");
      const std::string config = args.config;
      server.watch(name, dir, [name, config](const std::string& step_dir) {
        return load_served_model(name + "=" + step_dir, config);
      }, args.watch_interval);
      std::fprintf(stderr, "watching %s/latest for new versions of %s\n", dir.c_str(), name.c_str());
    }
    server.start_watching();
  }
  const int port = server.bind();
  for (const auto& m : models)
    std::fprintf(stderr, "serving %s (version %s) at http://%s:%d/v2/models/%s\n", m->name().c_str(),
                 m->version().c_str(), args.server.host.c_str(), port, m->name().c_str());
  std::fprintf(stderr, "listening on %s:%d%s; metrics at /metrics\n", args.server.host.c_str(), port,
               args.server.token.empty() ? "" : " (bearer token required)");
  if (server.grpc_port() >= 0)
    std::fprintf(stderr, "gRPC (the same protocol) on %s:%d\n", args.server.host.c_str(), server.grpc_port());
  std::fflush(stderr);
  std::thread waiter([&] {
    unsigned char signal = 0;
    while (::read(g_signal_pipe[0], &signal, 1) < 0 && errno == EINTR) {
    }
    if (signal == 0) return;  // the server stopped on its own
    std::fprintf(stderr, "%s: draining (no new requests; those in flight finish)\n", signal == SIGTERM ? "SIGTERM" : "SIGINT");
    std::fflush(stderr);
    server.stop();
  });
  server.run();
  if (sharded) {
    server.stop();  // generation has finished (it may still release cache slots) before the other ranks stop
    try {
      sharded->stop();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "stopping the other ranks failed: %s\n", e.what());
    }
  }
  const unsigned char quiet = 0;
  [[maybe_unused]] const ssize_t written = ::write(g_signal_pipe[1], &quiet, 1);
  waiter.join();
  std::fprintf(stderr, "stopped\n");
  return 0;
}

}  // namespace gradmesh::cli
