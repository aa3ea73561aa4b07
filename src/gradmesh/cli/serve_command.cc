#include "gradmesh/cli/serve_command.h"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gradmesh/cli/model_source.h"
#include "gradmesh/core/error.h"
#include "gradmesh/data/token_file.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/train/config.h"
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

std::shared_ptr<serve::ServedModel> load_served_model(const std::string& arg, const std::string& config_override) {
  const auto [name, path] = name_and_path(arg);
  const std::string config_path = config_override.empty() ? find_run_config(path) : config_override;
  const train::Config config = train::load_config(config_path);
  train::InputGeometry geometry;
  serve::ModelShape shape;
  shape.kind = config.model.kind;
  std::shared_ptr<const data::TokenSet> vocab;
  if (config.data.format == "tokens") {
    vocab = std::make_shared<const data::TokenSet>(data::read_token_set(config.data.tokens));
    geometry.vocab_size = vocab->vocab_size;
  } else {
    geometry = train::load_training_data(config, /*with_test=*/false)->geometry;
  }
  if (shape.kind == "gpt") {
    const nn::GptSpec spec = train::gpt_spec(config.model, geometry);
    shape.sample = {spec.block_size};
    shape.classes = spec.vocab_size;
  } else {
    shape.sample = {geometry.channels, geometry.height, geometry.width};
    shape.classes = config.model.classes;
  }
  std::unique_ptr<nn::Model> model = train::build_model(config.model, geometry, config.train.seed);
  ModelWeights weights = read_model_weights_at(path);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& t : weights.file.tensors) tensors.emplace_back(t.name, t.tensor);
  model->load_parameters(tensors, path);
  auto served = std::make_shared<serve::ServedModel>(name, weights.version, shape, std::move(model));
  if (vocab && shape.kind == "gpt") {
    serve::TextCodec codec;
    codec.encode = [vocab](const std::string& text) {
      std::vector<int64_t> ids;
      for (uint16_t t : data::encode_text(*vocab, text, "text_input")) ids.push_back(t);
      return ids;
    };
    codec.decode = [vocab](const std::vector<int64_t>& ids) {
      std::vector<uint16_t> tokens(ids.begin(), ids.end());
      return data::detokenize(*vocab, tokens);
    };
    served->set_codec(std::move(codec));
  }
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

std::string read_token(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_error(ErrorKind::kIo, path, "cannot read the token file");
  std::stringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty()) throw_error(ErrorKind::kUsage, path, "the token file is empty");
  for (char c : token)
    if (std::isspace(static_cast<unsigned char>(c)) || std::iscntrl(static_cast<unsigned char>(c)))
      throw_error(ErrorKind::kUsage, path, "the token may not contain spaces or control characters");
  return token;
}

// SIGTERM and SIGINT write their number to a pipe, which a thread reads to
// drain the server: a handler may run on any thread (the BLAS library's
// start before main), and writing to a pipe is async-signal-safe.
int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int signal) {
  const unsigned char byte = static_cast<unsigned char>(signal);
  [[maybe_unused]] const ssize_t written = ::write(g_signal_pipe[1], &byte, 1);
}

}  // namespace

int run_serve(ServeArgs args) {
  if (args.models.empty()) throw_error(ErrorKind::kUsage, "gradmesh serve", "name at least one model");
  if (::pipe(g_signal_pipe) != 0) throw_error(ErrorKind::kIo, "gradmesh serve", "cannot create the signal pipe");
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);

  kernels::set_num_threads(static_cast<int>(args.threads));
  if (!args.token_file.empty()) args.server.token = read_token(args.token_file);
  args.server.max_body_bytes = args.max_body_mb << 20;
  std::vector<std::shared_ptr<serve::ServedModel>> models;
  for (const std::string& m : args.models) models.push_back(load_served_model(m, args.config));
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
  const unsigned char quiet = 0;
  [[maybe_unused]] const ssize_t written = ::write(g_signal_pipe[1], &quiet, 1);
  waiter.join();
  std::fprintf(stderr, "stopped\n");
  return 0;
}

}  // namespace gradmesh::cli
