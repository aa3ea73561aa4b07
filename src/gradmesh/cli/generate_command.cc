#include "gradmesh/cli/generate_command.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "gradmesh/cli/model_source.h"
#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/data/token_file.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/kernels/isa.h"
#include "gradmesh/nn/generate.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/model_factory.h"

namespace gradmesh::cli {

int run_generate(const GenerateArgs& args) {
  kernels::set_num_threads(static_cast<int>(args.threads));
  const std::string config_path = args.config.empty() ? find_run_config(args.checkpoint) : args.config;
  const train::Config config = train::load_config(config_path);
  kernels::set_portable_numerics(config.train.portable_numerics);  // the arithmetic the model was trained in
  if (config.model.kind != "gpt")
    throw_error(ErrorKind::kConfig, config_path, "model.kind is \"" + config.model.kind + "\"; generate needs a gpt");
  const data::TokenSet vocab = data::read_token_set(config.data.tokens, static_cast<int>(config.model.vocab_size));
  train::InputGeometry geometry;
  geometry.vocab_size = vocab.vocab_size;
  const nn::GptSpec spec = train::gpt_spec(config.model, geometry);
  nn::Model model(nn::build_gpt(spec), config.train.seed);
  load_weights_at(args.checkpoint, model);

  std::vector<int64_t> prompt;
  for (const uint32_t t : data::encode_text(vocab, args.prompt, "--prompt")) prompt.push_back(t);
  nn::GenerateOptions options;
  options.max_tokens = args.max_tokens;
  options.temperature = args.temperature;
  options.top_k = args.top_k;
  options.seed = args.seed;
  std::fputs(args.prompt.c_str(), stdout);
  auto& gpt = static_cast<nn::Gpt&>(model.root());
  // Byte vocabularies can split a character across tokens: print bytes as
  // they come. Subword pieces decode in context (a piece's leading space
  // depends on what precedes it): the text so far is decoded and what it
  // gained is printed.
  const double start = now_seconds();
  std::vector<uint32_t> so_far;
  std::string printed;
  const std::vector<int64_t> tokens = nn::generate(gpt, prompt, options, [&](int64_t token) {
    if (vocab.kind != data::Vocabulary::kSentencePiece) {
      std::fputs(data::detokenize(vocab, {static_cast<uint32_t>(token)}).c_str(), stdout);
    } else {
      so_far.push_back(static_cast<uint32_t>(token));
      const std::string text = data::detokenize(vocab, so_far);
      if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0)
        std::fputs(text.c_str() + printed.size(), stdout);
      printed = text;
    }
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
