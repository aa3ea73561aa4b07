#include "gradmesh/cli/generate_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/model_shards.h"
#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/data/token_file.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/nn/generate.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/model_factory.h"

namespace gradmesh::cli {
namespace {

namespace fs = std::filesystem;

// The config.toml of the run `path` belongs to: in it, or up to three levels
// up (<run>/checkpoints/step-N/model.safetensors).
std::string find_run_config(const std::string& path) {
  fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  for (int up = 0; up < 4 && !dir.empty(); ++up, dir = dir.parent_path())
    if (fs::is_regular_file(dir / "config.toml")) return (dir / "config.toml").string();
  throw_error(ErrorKind::kConfig, path,
              "no config.toml in it or the directories above it, so the model's shape is unknown; pass --config");
}

checkpoint::SafetensorsFile read_weights(const std::string& path) {
  if (!fs::exists(path)) throw_error(ErrorKind::kIo, path, "does not exist");
  if (!fs::is_directory(path)) return checkpoint::read_safetensors(path);
  // A finished run's final weights, else its newest verified checkpoint.
  if (fs::is_regular_file(fs::path(path) / "model.safetensors") && !checkpoint::is_step_directory(path))
    return checkpoint::read_safetensors((fs::path(path) / "model.safetensors").string());
  checkpoint::SafetensorsFile weights;
  weights.tensors = checkpoint::read_model_weights(checkpoint::load_checkpoint(path));  // whole or joined from shards
  return weights;
}

}  // namespace

int run_generate(const GenerateArgs& args) {
  kernels::set_num_threads(static_cast<int>(args.threads));
  const std::string config_path = args.config.empty() ? find_run_config(args.checkpoint) : args.config;
  const train::Config config = train::load_config(config_path);
  if (config.model.kind != "gpt")
    throw_error(ErrorKind::kConfig, config_path, "model.kind is \"" + config.model.kind + "\"; generate needs a gpt");
  const data::TokenSet vocab = data::read_token_set(config.data.tokens);
  train::InputGeometry geometry;
  geometry.vocab_size = vocab.vocab_size;
  const nn::GptSpec spec = train::gpt_spec(config.model, geometry);
  nn::Model model(nn::build_gpt(spec), config.train.seed);
  checkpoint::SafetensorsFile file = read_weights(args.checkpoint);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& t : file.tensors) tensors.emplace_back(t.name, t.tensor);
  model.load_parameters(tensors, args.checkpoint);

  std::vector<int64_t> prompt;
  for (uint16_t t : data::encode_text(vocab, args.prompt, "--prompt")) prompt.push_back(t);
  nn::GenerateOptions options;
  options.max_tokens = args.max_tokens;
  options.temperature = args.temperature;
  options.top_k = args.top_k;
  options.seed = args.seed;
  std::fputs(args.prompt.c_str(), stdout);
  auto& gpt = static_cast<nn::Gpt&>(model.root());
  // Byte vocabularies can split a character across tokens: print bytes as they come.
  const double start = now_seconds();
  const std::vector<int64_t> tokens = nn::generate(gpt, prompt, options, [&](int64_t token) {
    std::fputs(data::detokenize(vocab, {static_cast<uint16_t>(token)}).c_str(), stdout);
    std::fflush(stdout);
  });
  const double seconds = now_seconds() - start;
  std::fputc('\n', stdout);
  std::fflush(stdout);
  std::fprintf(stderr, "generated %zu tokens after a prompt of %zu in %.3f s: %.0f tokens/s\n", tokens.size(),
               prompt.size(), seconds, static_cast<double>(tokens.size()) / std::max(seconds, 1e-9));
  return 0;
}

}  // namespace gradmesh::cli
