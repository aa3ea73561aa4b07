// gradmesh generate CHECKPOINT --prompt TEXT: text from a trained GPT.
#pragma once

#include <cstdint>
#include <string>

namespace gradmesh::cli {

struct GenerateArgs {
  std::string checkpoint;   // run dir, checkpoint dir (step-N), checkpoints dir, or a .safetensors file
  std::string config;       // "" = the config.toml of the run CHECKPOINT belongs to
  std::string prompt;
  int64_t max_tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int64_t threads = 1;
};

// Prints the prompt and the generated text to stdout as it is drawn.
int run_generate(const GenerateArgs& args);

}  // namespace gradmesh::cli
