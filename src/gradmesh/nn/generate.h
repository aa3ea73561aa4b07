// Text generation from a GPT: the prompt is fed through the key/value cache
// one position at a time, then each new token is drawn from the model's
// next-token distribution and fed back, so a token costs one position of
// attention instead of a pass over the whole context.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "gradmesh/nn/gpt.h"

namespace gradmesh::nn {

struct GenerateOptions {
  int64_t max_tokens = 200;   // new tokens, >= 0
  double temperature = 1.0;   // > 0 scales the logits; 0 = always the most likely token
  int64_t top_k = 0;          // keep the k most likely tokens (0 = all)
  uint64_t seed = 0;          // token i is drawn with CounterRng(seed, kSampling, 0).uniform(i)
};

// Returns the new tokens (not the prompt). When the context (block_size) is
// full, generation goes on from its last block_size / 2 tokens. `on_token` (may be empty) sees each token as it is
// drawn, for streaming output. Throws Error(kUsage) for an empty prompt,
// one longer than block_size, or invalid options.
std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, const GenerateOptions& options,
                              const std::function<void(int64_t)>& on_token = {});

// The token drawn from `logits` [vocab] as `options` say, with `u` uniform in [0, 1).
int64_t sample_token(const float* logits, int64_t vocab, const GenerateOptions& options, float u);

}  // namespace gradmesh::nn
